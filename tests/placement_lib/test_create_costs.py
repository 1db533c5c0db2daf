"""Issue 31 item 8: the library's own per-create costs, cut where they came from it.

- ``openat(dirfd, name)`` callers (tar, cp -r, git) paid a ``/proc/self/fd`` readlink per create: the
  directory's path is now remembered by its (dev, ino) for IEZ_DIRFD_FRESH_S (0.1 s), so a descriptor
  number reused for another directory, and a directory renamed while held, are still placed under their
  right names (the rename once the remembered path is older than that).
- ``O_CREAT`` opens of existing, new, dangling-link, read-only and directory paths in turn behave as the
  plain run (an existing file keeps costing a failing ``O_EXCL`` attempt and a ``statx``: an open without
  ``O_CREAT`` would skip the kernel's ``fs.protected_regular`` check, docs/preload.md).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MIB, layouts_below, read_layout
from iez.maps import MapEntry, write_map

pytestmark = pytest.mark.slow


def layout_map(path: Path, names: dict[Path, int]) -> str:
    """A map placing each path on OST ``names[path]`` (1 MiB stripes, one stripe)."""
    write_map(path, "create-costs", [MapEntry(str(p), MIB, 1, str(ost)) for p, ost in names.items()])
    return str(path)


DIRFD_SCRIPT = r"""
import os, sys, time
a, b, a2 = sys.argv[1:4]
d = os.open(a, os.O_RDONLY | os.O_DIRECTORY)
def make(name, fd):
    f = os.open(name, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644, dir_fd=fd)
    os.write(f, b"x"); os.close(f)
for i in range(40):
    make(f"f{i}", d)
os.close(d)
d2 = os.open(b, os.O_RDONLY | os.O_DIRECTORY)   # the same number, another directory
assert d2 == d, (d, d2)
for i in range(3):
    make(f"f{i}", d2)
held = os.open(a, os.O_RDONLY | os.O_DIRECTORY)
make("before", held)
os.rename(a, a2)                                  # renamed while held
time.sleep(0.3)
make("after", held)
print("done")
"""


@pytest.mark.timeout(120)
def test_directory_descriptors_reused_and_renamed_are_placed_under_their_own_names(runner, tmp_path):
    work = tmp_path / "work"
    a, b, a2 = work / "a", work / "b", work / "a2"
    names = {a / f"f{i}": i % 8 for i in range(40)}
    names.update({b / f"f{i}": 8 + i for i in range(3)})
    names.update({a / "before": 20, a2 / "after": 21, a / "after": 22})
    job_map = layout_map(tmp_path / "job.map", names)

    def setup(w: Path) -> None:
        a.mkdir()
        b.mkdir()

    result = runner.compare([sys.executable, "-B", "-c", DIRFD_SCRIPT, a, b, a2], None, work, setup,
                            IEZ_MAP=job_map)
    result.assert_same()
    assert result.lib.stdout == b"done\n", result.lib.stderr
    placed = layouts_below(work)
    for i in range(40):
        assert "osts=" + str(i % 8) in placed[str(a2 / f"f{i}")], i
    for i in range(3):
        assert "osts=" + str(8 + i) in placed[str(b / f"f{i}")], i  # not a's entries under the reused number
    assert "osts=20" in placed[str(a2 / "before")]
    assert "osts=21" in placed[str(a2 / "after")]  # its new name, not a/after's layout


@pytest.mark.timeout(180)
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_creates_through_one_directory_descriptor_read_its_path_rarely(runner, tmp_path):
    work = tmp_path / "work"
    (work / "d").mkdir(parents=True)
    count = 400
    names = {work / "d" / f"f{i}": i % 8 for i in range(count)}
    job_map = layout_map(tmp_path / "job.map", names)
    script = ("import os, sys, time\n"
              "d = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
              "t = time.monotonic()\n"
              f"for i in range({count}):\n"
              "    f = os.open(f'f{i}', os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644, dir_fd=d); os.close(f)\n"
              "print(time.monotonic() - t)\n")
    trace = tmp_path / "strace.out"
    proc = subprocess.run(["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=readlink,readlinkat",
                           sys.executable, "-B", "-c", script, work / "d"],
                          env={**runner.env(None, IEZ_MAP=job_map)}, capture_output=True, timeout=150)
    assert proc.returncode == 0, proc.stderr
    seconds = float(proc.stdout.decode().split()[-1])
    reads = len(re.findall(r"readlink(?:at)?\([^)]*/proc/self/fd/", trace.read_text()))
    assert len(layouts_below(work)) == count
    # one read per 0.1 s of creating at most (and one to start), against one per create before
    assert reads <= 2 + seconds / 0.1, (reads, seconds)
    assert reads < count / 4, (reads, seconds)


EXISTING_SCRIPT = r"""
import os, sys
w = sys.argv[1]
for i in range(6):                              # existing files, opened to append
    with open(os.path.join(w, "log"), "a") as f:
        f.write(f"{i}\n")
fd = os.open(os.path.join(w, "new1"), os.O_CREAT | os.O_WRONLY, 0o600)   # then a new file
os.write(fd, b"n1"); os.close(fd)
for i in range(4):
    fd = os.open(os.path.join(w, "log"), os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600); os.close(fd)
with open(os.path.join(w, "link"), "w") as f:   # through a dangling link: its target is created
    f.write("via link")
for i in range(3):
    try:
        os.open(os.path.join(w, "ro"), os.O_CREAT | os.O_WRONLY, 0o600)
    except PermissionError as e:
        print("ro", e.errno)
    try:
        os.open(os.path.join(w, "dir"), os.O_CREAT | os.O_WRONLY, 0o600)
    except IsADirectoryError as e:
        print("dir", e.errno)
    with open(os.path.join(w, "log"), "a") as f:
        f.write("again\n")
fd = os.open(os.path.join(w, "new2"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o640)
os.write(fd, b"n2"); os.close(fd)
try:
    os.open(os.path.join(w, "missing", "x"), os.O_CREAT | os.O_WRONLY, 0o600)
except FileNotFoundError as e:
    print("missing", e.errno)
print(sorted(os.listdir(w)))
"""


@pytest.mark.timeout(120)
def test_o_creat_opens_of_existing_and_new_files_in_turn_behave_as_plain(runner, tmp_path):
    work = tmp_path / "work"
    names = {work / "log": 1, work / "new1": 2, work / "target": 3, work / "new2": 4, work / "ro": 5}
    job_map = layout_map(tmp_path / "job.map", names)

    def setup(w: Path) -> None:
        (w / "log").write_text("start\n")
        (w / "link").symlink_to("target")
        (w / "ro").write_text("")
        (w / "ro").chmod(0o444)
        (w / "dir").mkdir()

    result = runner.compare([sys.executable, "-B", "-c", EXISTING_SCRIPT, work], None, work, setup,
                            IEZ_MAP=job_map)
    result.assert_same()
    assert (work / "log").read_text().count("again") == 3
    placed = layouts_below(work)
    assert set(placed) == {str(work / "new1"), str(work / "target"), str(work / "new2")}, placed
    assert read_layout(work / "log") is None  # an existing file is never placed
