"""What a directory watcher sees under libiez (issue 31 item 6).

A watcher (inotify, here the emulated MDT's reader in the test process) records every event on a directory
while real programs - ``dd``, ``cp``, a shell redirection, a Python writer that writes ``NAME.tmp``
and renames it, and one file no layout is known for - create and write files there: plainly, and
under libiez with the library off, tracing, placing from a map, from SQLite and MariaDB, with
emulated bandwidth (``IEZ_EMULATE``) and on the pre-creating path (``IEZ_ASSUME_LUSTRE=1``).

The kernel queues an event when the call that causes it runs, so once the programs have exited
every event is in the queue: nothing is waited for. The sequences must be the plain one, except
exactly what placement_lib/README.md "What a directory watcher sees" documents for a placed file:

- in emulation (no Lustre client), one ``IN_ATTRIB`` right after the application's ``IN_OPEN`` of
  the new file: the layout is the file's ``user.iez.layout`` attribute, set with ``fsetxattr`` on
  the application's own descriptor, and setting any attribute is an ``IN_ATTRIB`` for the kernel;
- on the pre-creating path, right after ``IN_CREATE``: the library's own ``IN_OPEN``, the
  attribute's ``IN_ATTRIB`` and an ``IN_CLOSE_NOWRITE`` (the file is pre-created read-only, so no
  ``IN_CLOSE_WRITE`` of an empty file reaches a close-write trigger), then the application's
  events without its ``IN_CREATE`` (its call opens the file the library made).

Tracing and a loaded library that is off add nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conftest import MIB, layout_text, pin_layouts, read_layout
from iez.emulate.bandwidth import Server, write_table
from iez.inventory.emulated_mdt import Inotify
from iez.maps import MapEntry, write_map

pytestmark = pytest.mark.slow

IN_ALL_EVENTS = 0xFFF
EVENT_NAMES = {0x1: "ACCESS", 0x2: "MODIFY", 0x4: "ATTRIB", 0x8: "CLOSE_WRITE", 0x10: "CLOSE_NOWRITE",
               0x20: "OPEN", 0x40: "MOVED_FROM", 0x80: "MOVED_TO", 0x100: "CREATE", 0x200: "DELETE",
               0x400: "DELETE_SELF", 0x800: "MOVE_SELF", 0x4000: "Q_OVERFLOW", 0x8000: "IGNORED",
               0x40000000: "ISDIR"}

#: the files a layout is pinned for
PINNED = ["dd.out", "cp.out", "sh.out", "py.out", "atomic.out"]
#: the names they are created as: atomic.out is written as atomic.out.tmp and renamed (placed with
#: atomic.out's layout: README "Temporary names")
PLACED = ["dd.out", "cp.out", "sh.out", "py.out", "atomic.out.tmp"]
UNPLACED = "none.out"

PY_WRITER = """
import os, sys
d = sys.argv[1]
with open(os.path.join(d, "py.out"), "w") as f:
    f.write("hello\\n" * 100)
tmp = os.path.join(d, "atomic.out.tmp")
with open(tmp, "wb") as f:
    f.write(b"x" * 5000)
    f.flush()
    os.fsync(f.fileno())
os.replace(tmp, os.path.join(d, "atomic.out"))
fd = os.open(os.path.join(d, "none.out"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.write(fd, b"unplaced\\n")
os.close(fd)
"""


class Watcher:
    """inotify on one directory, every event, read without blocking (the emulated MDT's inotify reader)."""

    def __init__(self, directory: Path):
        self.inotify = Inotify()
        self.inotify.add(str(directory), IN_ALL_EVENTS)

    def events(self) -> list[tuple[str, str]]:
        """Every queued event as (name, mask names), in the kernel's order."""
        return [(name, "|".join(v for k, v in EVENT_NAMES.items() if mask & k) or hex(mask))
                for _, mask, _, name in self.inotify.read()]

    def close(self) -> None:
        self.inotify.close()


def programs(work: Path, source: Path) -> list[list]:
    return [
        ["dd", "if=/dev/zero", f"of={work / 'dd.out'}", "bs=4096", "count=3", "status=none"],
        ["cp", source, work / "cp.out"],
        ["sh", "-c", f"echo redirected > '{work / 'sh.out'}'"],
        [sys.executable, "-c", PY_WRITER, work],
    ]


def record(run, work: Path, source: Path) -> list[tuple[str, str]]:
    """Runs every program with ``run(cmd)`` in a fresh ``work``; the events the directory saw."""
    for entry in work.iterdir():
        entry.unlink()
    watcher = Watcher(work)
    try:
        for cmd in programs(work, source):
            proc = run(cmd)
            assert proc.returncode == 0, (cmd, proc.stderr)
        return watcher.events()
    finally:
        watcher.close()


def with_layouts(plain: list[tuple[str, str]], placed: list[str], precreate: bool) -> list[tuple[str, str]]:
    """The plain sequence with exactly the documented events of each placed create added."""
    out = []
    created: set[str] = set()
    attributed: set[str] = set()
    for name, what in plain:
        if name in placed and what == "CREATE" and precreate:
            out += [(name, "CREATE"), (name, "OPEN"), (name, "ATTRIB"), (name, "CLOSE_NOWRITE")]
            continue
        out.append((name, what))
        if name in placed and what == "CREATE":
            created.add(name)
        elif name in created and name not in attributed and what == "OPEN":
            out.append((name, "ATTRIB"))
            attributed.add(name)
    return out


@pytest.fixture(scope="module")
def layouts() -> dict[str, tuple[int, list[int]]]:
    return {name: ((1 + i) * MIB, [i, 10 + i]) for i, name in enumerate(PINNED)}


MODES = ["off", "trace", "map", "sqlite", "mariadb", "emulate", "precreate"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", MODES)
def test_a_watcher_sees_the_plain_events_and_only_the_documented_ones(mode, runner, shared_db, layouts, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(3 * 4096 + 17))
    paths = {work / name: layout for name, layout in layouts.items()}
    layout_map = tmp_path / "job.map"
    write_map(layout_map, "watch", [MapEntry(str(p), size, len(osts), " ".join(map(str, osts)))
                                    for p, (size, osts) in paths.items()])
    extra: dict[str, object] = {}
    db = None
    if mode == "off":
        extra = {"IEZ_MODE": "off", "IEZ_MAP": layout_map}
    elif mode == "trace":
        trace_dir = tmp_path / "traces"
        trace_dir.mkdir()
        extra = {"IEZ_MODE": "trace", "IEZ_TRACE_DIR": trace_dir}
    elif mode in ("sqlite", "mariadb"):
        db = shared_db(mode)
        pin_layouts(db, paths)
    else:
        extra = {"IEZ_MAP": layout_map}
        if mode == "emulate":
            root = tmp_path / "emu"
            root.mkdir()
            write_table(root, {o: (Server(10_000), "oss0") for o in range(20)}, {"oss0": Server(100_000)})
            extra["IEZ_EMULATE"] = root
        elif mode == "precreate":
            extra["IEZ_ASSUME_LUSTRE"] = "1"

    plain = record(lambda cmd: runner.plain(cmd), work, source)
    names = {name for name, _ in plain}
    assert names >= set(PLACED) | {UNPLACED}, plain  # every program's files were seen
    assert ("dd.out", "CLOSE_WRITE") in plain and ("atomic.out.tmp", "MOVED_FROM") in plain

    lib = record(lambda cmd: runner.iez(cmd, db, **extra), work, source)
    placed = mode not in ("off", "trace")
    expected = with_layouts(plain, PLACED, mode == "precreate") if placed else plain
    assert lib == expected
    # and they were placed indeed (the temporary name's layout travelled with the rename)
    for name in PINNED:
        want = layout_text(*layouts[name]) if placed else None
        assert read_layout(work / name) == want, name
    assert read_layout(work / UNPLACED) is None
