"""Mirrored sources (FLR) on an emulated cluster, as real processes: `iez copy` reads each chunk from the copy
whose OST is not congested (per-OST chunks in its JSON) and beats reading the preferred copy only; `iez mirror
resync` brings a stale copy back (flag cleared, every byte equal when read pinned to each copy)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from move_helpers import REPO, LiveCluster, MiB, XATTR, emulated_cluster, iez_copy, sha

from iez.runtime import find_library
from iez.layout.emulated import parse_attr

pytestmark = pytest.mark.slow

#: Copy 1 (preferred) on OST 1 of oss0, copy 2 on OST 5 of oss1: one stripe object each.
MIRRORED = "version=3 mirror=1:prefer comp=0:eof:1048576:1:1 mirror=2 comp=0:eof:1048576:1:5"
PINNED_SHA = """
import fcntl, hashlib, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.ioctl(fd, 0x400866B1, int(sys.argv[2]))  # LL_IOC_FLR_SET_MIRROR
h = hashlib.sha256()
while True:
    b = os.read(fd, 1 << 20)
    if not b:
        break
    h.update(b)
print(h.hexdigest())
"""


def iez(args: list[str], root: Path, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "IEZ_STATE_DIR": str(root) + "-state", "IEZ_EMULATE": str(root)}
    env.pop("LD_PRELOAD", None)
    return subprocess.run([sys.executable, "-m", "iez.cli", *args], env=env, capture_output=True, text=True,
                          timeout=180, cwd=REPO, **kw)


def mirrored(path: Path, size: int, text: str = MIRRORED) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    os.setxattr(path, XATTR, text.encode())
    return path


def congest(root: Path, ost: int, mib_s: float) -> None:
    done = iez(["cluster", "set", "--root", str(root), "--ost", str(ost), "--load", str(mib_s)], root)
    assert done.returncode == 0, done.stderr


def test_a_congested_copy_is_skipped_and_reads_split_across_copies(tmp_path):
    live = LiveCluster(tmp_path)
    try:
        run_congested_copy(live)
    finally:
        live.stop()


def run_congested_copy(live: LiveCluster) -> None:
    root, data, db = live.root, live.data, {"IEZ_DB": live.db}
    src = mirrored(data / "src" / "m", 16 * MiB)
    (data / "a").mkdir()
    (data / "b").mkdir()
    (data / "c").mkdir()

    clear = json.loads(iez_copy([str(src), str(data / "c"), "--json"], root, env=db).stdout)
    # both copies clear: the chunks are dealt to the two copies in turn (split reads)
    assert clear["chunks"] == {"1": 8, "5": 8}, clear["chunks"]
    assert clear["mirror_chunks"] == {"1": 8, "2": 8}

    congest(root, 1, 36)  # copy 1's OST: 4 MiB/s left, 0.25 s a chunk
    # the MDS learns it from the emulated servers' counters (3 one-second intervals for the full rate)
    live.wait_for_load(1, 30)
    done = iez_copy([str(src), str(data / "a"), "--json"], root, env=db)
    assert done.returncode == 0, done.stderr
    skipping = json.loads(done.stdout)
    assert sha(data / "a" / "m") == sha(src)
    # the live view shows OST 1 hot: every chunk is read from copy 2 (the detector's path: the unit test below)
    assert skipping["chunks"] == {"5": 16} and skipping["mirror_chunks"] == {"2": 16}, skipping["chunks"]

    done = iez_copy([str(src), str(data / "b"), "--json", "--no-mirror-skip"], root, env=db)
    assert done.returncode == 0, done.stderr
    preferred = json.loads(done.stdout)
    assert preferred["chunks"] == {"1": 16} and preferred["mirror_chunks"] == {"1": 16}
    assert sha(data / "b" / "m") == sha(src)
    # 16 MiB at 4 MiB/s from the preferred copy against most of it at 40 MiB/s from the other
    assert skipping["throughput_mib_s"] > 2 * preferred["throughput_mib_s"], (skipping["seconds"], preferred["seconds"])


def test_a_stale_copy_is_resynced_and_matches_byte_for_byte(tmp_path):
    root, data = emulated_cluster(tmp_path)
    stale = MIRRORED.replace("mirror=2 ", "mirror=2:stale ")
    f = mirrored(data / "m", 6 * MiB + 4321, stale)
    before = sha(f)
    shown = json.loads(iez(["layout", "show", "--json", str(f)], root).stdout)
    assert shown["stale_mirrors"] == [1]

    done = iez(["mirror", "resync", "--json", "--share", "0.5", str(f)], root)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["bytes"] == 6 * MiB + 4321 and report["files"][0]["copies"] == [2]
    # the stale copy's OST (5, 40 MiB/s) written at half its bandwidth: at least 6 MiB / 20 MiB/s
    assert report["seconds"] >= 6 / 20 * 0.9

    layout = parse_attr(os.getxattr(f, XATTR), str(f))
    assert layout.stale == () and layout.preferred_mirror == 0 and len(layout.mirrors) == 2
    shown = json.loads(iez(["layout", "show", "--json", str(f)], root).stdout)
    assert "stale_mirrors" not in shown
    assert sha(f) == before
    lib = find_library()  # as iez copy finds it (built when missing)
    env = {**os.environ, "LD_PRELOAD": str(lib), "IEZ_MODE": "off", "IEZ_EMULATE": str(root),
           "IEZ_STATE_DIR": str(root) + "-state"}
    for mirror in ("1", "2"):
        read = subprocess.run([sys.executable, "-c", PINNED_SHA, str(f), mirror], env=env, capture_output=True,
                              text=True, timeout=60)
        assert read.returncode == 0, read.stderr
        assert read.stdout.strip() == hashlib.sha256(f.read_bytes()).hexdigest() == before, mirror

    again = json.loads(iez(["mirror", "resync", "--json", str(f)], root).stdout)
    assert again["bytes"] == 0  # nothing stale any more


def test_a_background_resync_returns_at_once_and_clears_the_stale_copy(tmp_path):
    root, data = emulated_cluster(tmp_path)
    f = mirrored(data / "m", 4 * MiB, MIRRORED.replace("mirror=2 ", "mirror=2:stale "))
    before = sha(f)
    start = time.monotonic()
    done = iez(["mirror", "resync", "--background", "--json", "--share", "0.25", str(f)], root)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - start < 10
    pid = json.loads(done.stdout)["pid"]
    deadline = time.monotonic() + 60
    while os.path.exists(f"/proc/{pid}") and "Z" not in open(f"/proc/{pid}/stat").read().split()[2]:
        assert time.monotonic() < deadline, "the background resync did not end"
        time.sleep(0.1)
    assert parse_attr(os.getxattr(f, XATTR), str(f)).stale == ()
    assert sha(f) == before


def test_resync_refuses_a_file_without_mirrors_in_one_line(tmp_path):
    root, data = emulated_cluster(tmp_path)
    plain = data / "plain"
    plain.write_bytes(b"x")
    done = iez(["mirror", "resync", str(plain)], root)
    assert done.returncode == 1
    assert done.stderr.strip() == f"iez mirror resync: {plain}: no emulated layout (on Lustre: lfs mirror resync {plain})"


def _taken(queues) -> list:
    out, position = [], [0]
    while (got := queues.take(position)) is not None:
        out.append(got)
        queues.release(got[0])
    return out


def test_without_a_live_view_the_congestion_detector_moves_chunks_off_a_copy(tmp_path, monkeypatch):
    """No IEZ_EMULATE, no Lustre: chunks are dealt to both copies, and once the detector finds copy 1's OST
    congested its queued chunks go to copy 2's; a chunk queued after that goes there at once."""
    from iez.move.congestion import Settings
    from iez.move.mover import Movement, MoveOptions, Queues

    monkeypatch.delenv("IEZ_EMULATE", raising=False)
    src = mirrored(tmp_path / "m", 8 * MiB)
    movement = Movement([(str(src), str(tmp_path / "out"), None)], MoveOptions(congestion=Settings(window=2)))
    queues = Queues(movement)
    with queues.cond:
        queues._feed()
    assert {k: len(q) for k, q in queues.queues.items()} == {1: 4, 5: 4}  # split across the copies
    for _ in range(2):
        movement.read_detector.record(1, 1.0, MiB)  # OST 1 found congested
    taken = _taken(queues)
    assert [key for key, _ in taken] == [5] * 8 and {c.mirror for _, c in taken} == {1}

    spread_off = Movement([(str(src), str(tmp_path / "out2"), None)],
                          MoveOptions(congestion=Settings(window=2), mirror_skip=False))
    for _ in range(2):
        spread_off.read_detector.record(1, 1.0, MiB)
    assert {key for key, _ in _taken(Queues(spread_off))} == {1}  # the preferred copy only, congested or not
