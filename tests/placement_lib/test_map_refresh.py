"""A layout map changed in place while processes have it loaded (issue 31 item 1).

An administrator truncates the map (``: > map.cdb``) or copies a new one over it
(``cp new.cdb map.cdb``: the same inode, truncated then rewritten). A process that
loaded the map before must go on as plainly as ever - never SIGBUS - and keeps
placing with the layouts it read at start-up (its private snapshot); a process
started afterwards reads the new file. The refresh rule (a new file renamed over
the old, what ``iez map export`` does) is in docs/preload.md."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import MIB, layout_text, layouts_below, read_layout
from iez.maps import MapEntry, write_map

pytestmark = pytest.mark.slow

#: Creates f<i> once the test has made go<i>; each create is a lookup in the map.
STEPPER = r"""
import os, sys, time
work, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(work, f"go{i}")):
        if time.monotonic() > deadline:
            sys.exit(f"no go{i}")
        time.sleep(0.005)
    with open(os.path.join(work, f"f{i}"), "w") as fh:
        fh.write("data\n")
print("done", n)
"""


def write(path: Path, work: Path, first_ost: int, n: int) -> dict[str, str]:
    layouts = {str(work / f"f{i}"): (MIB, [first_ost + i % 4]) for i in range(n)}
    # padding entries make the map span many pages: a probe reaches far into the file
    pad = {f"/pad/{k:06d}": (MIB, [k % 16]) for k in range(20000)}
    write_map(path, "refresh", [MapEntry(p, s, len(o), " ".join(map(str, o))) for p, (s, o) in {**layouts, **pad}.items()])
    return {p: layout_text(s, o) for p, (s, o) in layouts.items()}


def wait_for_file(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the program ended ({proc.returncode}): {proc.communicate()}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


@pytest.mark.timeout(180)
def test_a_map_truncated_or_copied_over_in_place_never_kills_a_running_process(runner, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    layout_map = tmp_path / "map.cdb"
    n = 4
    old = write(layout_map, work, 0, n)
    new_map = tmp_path / "new.cdb"
    new = write(new_map, work, 8, n)
    script = tmp_path / "stepper.py"
    script.write_text(STEPPER)
    env = runner.env(None, IEZ_MAP=layout_map)
    from conftest import clean_env
    proc = subprocess.Popen([sys.executable, str(script), str(work), str(n)], env=clean_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        (work / "go0").touch()
        wait_for_file(work / "f0", proc)
        subprocess.run(["sh", "-c", f": > '{layout_map}'"], check=True)  # truncated in place
        (work / "go1").touch()
        wait_for_file(work / "f1", proc)
        subprocess.run(["cp", str(new_map), str(layout_map)], check=True)  # same inode, rewritten
        (work / "go2").touch()
        wait_for_file(work / "f2", proc)
        subprocess.run(["sh", "-c", f": > '{layout_map}'; cat '{new_map}' > '{layout_map}'"], check=True)
        (work / "go3").touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, f"exit {proc.returncode} (SIGBUS is -7): {err.decode(errors='replace')}"
    assert out == f"done {n}\n".encode()
    # the running process placed every file from the map it read at start-up
    assert layouts_below(work) == old
    # a process started now reads the new map
    late = work / "f0"
    late.unlink()
    run = runner.iez(["sh", "-c", f"echo x > '{late}'"], None, IEZ_MAP=layout_map)
    assert run.returncode == 0, run.stderr
    assert read_layout(late) == new[str(late)]


@pytest.mark.timeout(240)
def test_creates_racing_with_in_place_copies_all_succeed(runner, tmp_path):
    """A shell creating 300 files (each a lookup) while the map is copied over 30 times: no crash,
    every file written, each carrying one of the two layouts or - loaded mid-copy - none."""
    work = tmp_path / "work"
    work.mkdir()
    layout_map = tmp_path / "map.cdb"
    n = 300
    a = write(layout_map, work, 0, n)
    other = tmp_path / "b.cdb"
    b = write(other, work, 8, n)
    saved = tmp_path / "a.cdb"
    shutil.copy(layout_map, saved)
    from conftest import clean_env
    # /bin/true per file: new processes load the map mid-copy too
    loop = f"i=0; while [ $i -lt {n} ]; do echo $i > '{work}'/f$i || exit 9; /bin/true || exit 8; i=$((i+1)); done; echo ok"
    proc = subprocess.Popen(["bash", "-c", loop], env=clean_env(runner.env(None, IEZ_MAP=layout_map)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    rounds = 0
    while proc.poll() is None and rounds < 30:
        subprocess.run(["cp", str(other if rounds % 2 == 0 else saved), str(layout_map)], check=True)
        rounds += 1
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"exit {proc.returncode} (SIGBUS is -7): {err.decode(errors='replace')}"
    assert out == b"ok\n"
    assert rounds > 0
    for path, text in layouts_below(work).items():
        assert text in (a[path], b[path])
    assert len(list(work.glob("f*"))) == n
