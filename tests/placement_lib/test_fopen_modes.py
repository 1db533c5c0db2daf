"""fopen's mode as glibc reads it (issue 31 item 9): the first character and at most 6 more, the
rest ignored. ``fopen(existing, "wbbbbbbx")`` truncates in the plain run (its 'x' is the 8th
character); under libiez it failed with EEXIST. A C program (through ctypes) calls fopen with
each mode on an existing and on a new file, in both create paths, with every name in the map."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import MIB, layouts_below
from iez.maps import MapEntry, write_map

pytestmark = pytest.mark.slow

MODES = ["wbbbbbbx", "wbbbbbx", "w+bbbbbx", "abbbbbbx", "wbbbbbbbbbbx", "wxbbbbbbb", "webbbbbx", "w+bbbbbbe",
         "wbbbbbbe"]

PROGRAM = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.fclose.argtypes = [ctypes.c_void_p]
libc.fputs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
libc.fileno.argtypes = [ctypes.c_void_p]
work = sys.argv[1]
for i, mode in enumerate(sys.argv[2:]):
    for kind in ("old", "new"):
        path = os.path.join(work, f"{kind}.{i}")
        fp = libc.fopen(path.encode(), mode.encode())
        if not fp:
            print(mode, kind, "errno", ctypes.get_errno())
            continue
        fd = libc.fileno(fp)
        cloexec = bool(__import__("fcntl").fcntl(fd, __import__("fcntl").F_GETFD) & 1)
        print(mode, kind, "ok fd", fd, "cloexec", cloexec, "flags", oct(os.get_blocking(fd) and __import__("fcntl").fcntl(fd, __import__("fcntl").F_GETFL) & 0o3003))
        libc.fputs(b"new\n", fp)
        libc.fclose(fp)
"""


def setup(work: Path) -> None:
    for i in range(len(MODES)):
        (work / f"old.{i}").write_text("old contents\n")


@pytest.mark.parametrize("create_path", ["own-open", "precreate"])
def test_fopen_reads_seven_mode_characters_as_glibc(create_path, runner, tmp_path):
    work = tmp_path / "work"
    layout_map = tmp_path / "job.map"
    names = [work / f"{k}.{i}" for i in range(len(MODES)) for k in ("old", "new")]
    write_map(layout_map, "fopen-modes", [MapEntry(str(p), MIB, 2, f"{i % 4} {4 + i % 4}") for i, p in enumerate(names)])
    script = tmp_path / "fopen_modes.py"
    script.write_text(PROGRAM)
    extra = {"IEZ_MAP": str(layout_map)}
    if create_path == "precreate":
        extra["IEZ_ASSUME_LUSTRE"] = "1"
    run = runner.compare([sys.executable, script, work, *MODES], None, work, setup=setup, **extra)
    run.assert_same()
    out = run.plain.stdout.decode()
    assert "wbbbbbbx old ok" in out and "wbbbbbx old errno 17" in out  # the plain run's own behaviour
    # new files are placed; existing ones never
    assert set(layouts_below(work)) == {str(work / f"new.{i}") for i in range(len(MODES))}
