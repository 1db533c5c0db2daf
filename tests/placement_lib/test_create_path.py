"""The create path: where no Lustre is mounted, libiez makes the application's own open (O_EXCL
added) and sets the layout on the descriptor the application receives - one open and one
fsetxattr per placed file, nothing else on its path. On a Lustre client (IEZ_ASSUME_LUSTRE=1 takes
that path here) it creates the file with its layout first. Either way the program sees exactly
what the plain call gives it: descriptor numbers, errno, flags, close-on-exec, permission bits,
stream positions."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import MIB, layouts_below, pin_layouts
from iez.maps import MapEntry, write_map

pytestmark = pytest.mark.slow

#: The files create_calls makes new (each with a layout pinned), by the call that makes them.
NEW = ["open.new", "excl.new", "rdonly.new", "openat.new", "creat.new", "fopen-w.new", "fopen-a+.new",
       "fopen-wx.new", "fopen-we.new", "fopen-wbx.new", "fopen-ccs.new"]
#: fopen modes fdopen cannot make (",ccs=") keep the pre-creating path.
PRECREATED = {"fopen-ccs.new"}
#: Made through the dangling link "dangling" (an O_CREAT open of the link): placed as the target's path.
THROUGH_LINK = ["target.missing"]


def setup(work: Path) -> None:
    (work / "exists").write_bytes(b"keep")


def pinned(work: Path) -> dict[Path, tuple[int, list[int]]]:
    names = [*NEW, "exists", "dangling", "target.missing"]
    return {work / name: (MIB, [i % 8, (i + 3) % 8]) for i, name in enumerate(names)}


def layout_map(tmp_path: Path, layouts: dict) -> Path:
    path = tmp_path / "job.map"
    write_map(path, "create-path", [MapEntry(str(p), size, len(osts), " ".join(map(str, osts)))
                                    for p, (size, osts) in layouts.items()])
    return path


@pytest.mark.parametrize("create_path", ["own-open", "precreate"])
@pytest.mark.parametrize("source", ["map", "sqlite"])
def test_every_create_call_behaves_as_plain_and_places_only_new_files(create_path, source, apps, runner,
                                                                     shared_db, tmp_path):
    work = tmp_path / "work"
    layouts = pinned(work)
    db = shared_db("sqlite")
    expected = pin_layouts(db, layouts)
    extra = {"IEZ_ASSUME_LUSTRE": "1"} if create_path == "precreate" else {}
    if source == "map":
        extra["IEZ_MAP"] = str(layout_map(tmp_path, layouts))
    run = runner.compare([apps("create_calls"), work], db, work, setup=setup, **extra)
    run.assert_same()
    assert b"fd 3 flags" in run.plain.stdout  # the program did run its calls
    assert layouts_below(work) == {str(work / n): expected[str(work / n)] for n in NEW + THROUGH_LINK}
    assert (work / "exists").read_bytes().startswith(b"keep")  # an existing file is never replaced


def test_a_placed_create_is_one_open_and_one_fsetxattr(apps, libiez, state_dir, tmp_path):
    """Under strace: each new file's path appears in exactly one system call (the application's open,
    with O_EXCL added), each placed file costs one fsetxattr on the descriptor that open returned, and
    libiez stats, statfs's and unlinks nothing on the way."""
    work = tmp_path / "work"
    work.mkdir()
    setup(work)
    layouts = pinned(work)
    trace = tmp_path / "strace.out"
    env = {"LD_PRELOAD": str(libiez), "IEZ_MAP": str(layout_map(tmp_path, layouts)), "IEZ_DB": "",
           "IEZ_STATE_DIR": str(state_dir), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(["strace", "-f", "-qq", "-o", str(trace), "-e",
                           "trace=open,openat,creat,newfstatat,statfs,fstatfs,fsetxattr,unlink,unlinkat,close",
                           str(apps("create_calls")), str(work)], env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = trace.read_text().splitlines()
    fast = [n for n in NEW if n not in PRECREATED]
    for name in fast:
        calls = [line for line in lines if f'{work}/{name}"' in line or f'"{name}"' in line]
        assert len(calls) == 1, (name, calls)
        assert "O_CREAT" in calls[0] and "O_EXCL" in calls[0], calls
    setxattrs = [line for line in lines if "fsetxattr(" in line]
    assert len(setxattrs) == len(NEW + THROUGH_LINK), setxattrs
    # every fast-path fsetxattr goes on the descriptor the open just returned
    opened = {}
    for line in lines:
        m = re.search(r'open(?:at)?\(.*"([^"]+)".*O_EXCL.*\)\s*=\s*(\d+)', line)
        if m:
            opened[Path(m.group(1)).name] = int(m.group(2))
    fds = {int(re.search(r"fsetxattr\((\d+),", line).group(1)) for line in setxattrs}
    assert {opened[n] for n in fast} <= fds
    # up to the last call, the ",ccs=" fopen, which pre-creates (stat, statfs, open, fsetxattr, close)
    before_ccs = lines[:next(i for i, line in enumerate(lines) if "fopen-ccs.new" in line)]
    # except the one lstat of a dangling link an O_CREAT open went through (whose link the library then reads)
    assert not [line for line in before_ccs if str(work) in line and re.search(r"statfs|newfstatat|unlink", line)
                and not (f'{work}/dangling"' in line and "AT_SYMLINK_NOFOLLOW" in line)]
    assert layouts_below(work).keys() == {str(work / n) for n in NEW + THROUGH_LINK}
