"""`iez copy` as a real process on an emulated cluster (libiez preloaded by the copy itself): every byte,
mode and layout arrives, chunk counts add up, a congested OST serves fewer chunks while all OSTs have work
(layout-aware) and gets fewer destination files, --naive keeps each file on one worker, and failures are
one line per file with nothing partial left under a final name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from move_helpers import REPO, LiveCluster, MiB, XATTR, emulated_cluster, iez_copy, sha, with_layout

from iez.layout.emulated import parse_attr

pytestmark = pytest.mark.slow


def test_every_byte_mode_and_layout_arrives_and_chunks_add_up(tmp_path):
    root, data = emulated_cluster(tmp_path)
    src = data / "src"
    sizes = {"a": 3 * MiB, "b": 5 * MiB + 123, "c": 0, "sub/d": 2 * MiB - 1, "sub/e": 4 * MiB}
    for k, (name, size) in enumerate(sizes.items()):
        with_layout(src / name, [k % 8, (k + 3) % 8], size, stripe=MiB)
    os.chmod(src / "a", 0o640)
    os.chmod(src / "sub/e", 0o600)
    out = data / "out"
    out.mkdir()
    done = iez_copy([str(src), str(out), "--json"], root)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # only the JSON on stdout
    assert report["files"] == len(sizes) and report["failed"] == []
    assert report["bytes"] == sum(sizes.values())
    assert report["seconds"] > 0 and report["throughput_mib_s"] > 0
    assert sum(report["chunks"].values()) == sum(-(-s // MiB) for s in sizes.values())
    assert set(report["chunks"]) <= {str(i) for i in range(8)}
    for name in sizes:
        copy = out / "src" / name
        assert sha(copy) == sha(src / name), name
        assert copy.stat().st_mode == (src / name).stat().st_mode, name
        layout = parse_attr(os.getxattr(copy, XATTR), str(copy))  # placed by iez before the first byte
        assert layout.stripe_count == 2 and set(layout.osts) <= set(range(8))
    assert not [p for p in out.rglob("*") if ".iez-copy." in p.name]
    # the emulation slowed it: 14 MiB read and written at 40 MiB/s per OST cannot take under 14/320 s
    assert report["seconds"] >= 14 / 320


def test_a_congested_ost_serves_fewer_chunks_and_gets_fewer_files(tmp_path):
    live = LiveCluster(tmp_path)  # 40 MiB/s per OST
    try:
        congested_copy(live)
    finally:
        live.stop()


def congested_copy(live: LiveCluster) -> None:
    root, data = live.root, live.data
    done = subprocess.run([sys.executable, "-m", "iez.cli", "cluster", "set", "--root", str(root), "--ost", "3",
                           "--load", "30"], capture_output=True, text=True, timeout=60)  # OST 3: 10 MiB/s left
    assert done.returncode == 0, done.stderr
    # the mover's placement reads the load the MDS learnt from the emulated servers' counters
    live.wait_for_load(3, 25)
    src = data / "src"
    for k in range(16):  # 8 MiB per file over two OSTs: 16 chunks on every OST
        with_layout(src / f"f{k:02d}", [k % 8, (k + 1) % 8], 8 * MiB, random=False)
    out = data / "out"
    out.mkdir()
    done = iez_copy([str(src), str(out), "--json", "--window", "4"], root, env={"IEZ_DB": live.db})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["chunks"] == {str(i): 16 for i in range(8)}
    mixed = report["mixed_chunks"]
    others = [mixed.get(str(i), 0) for i in range(8) if i != 3]
    assert mixed.get("3", 0) < min(others), mixed
    assert any(e["ost"] == 3 and e["congested"] for e in report["congested"]), report["congested"]
    # destinations placed by iez with the live load: OST 3 gets the fewest files
    placed = report["dst_files_per_ost"]
    assert placed.get("3", 0) < min(placed.get(str(i), 0) for i in range(8) if i != 3), placed


def test_naive_copies_each_file_on_one_worker_and_places_round_robin(tmp_path):
    root, data = emulated_cluster(tmp_path)
    src = data / "src"
    for k in range(8):
        with_layout(src / f"f{k}", [k % 8, (k + 1) % 8], 4 * MiB, random=False)
    out = data / "out"
    out.mkdir()
    naive = json.loads(iez_copy([str(src), str(out), "--json", "--naive"], root).stdout)
    assert naive["mode"] == "naive" and naive["files"] == 8
    assert naive["files_by_several_workers"] == 0
    placed = naive["dst_files_per_ost"]  # Lustre's rr: 8 files x 2 stripes go round all 8 OSTs
    assert sum(placed.values()) == 16 and set(placed) == {str(i) for i in range(8)}, placed
    aware = json.loads(iez_copy([str(src), str(data / "out2"), "--json"], root).stdout)
    assert aware["mode"] == "layout-aware" and aware["files_by_several_workers"] > 0


def test_failures_are_one_line_each_and_the_rest_is_copied(tmp_path):
    root, data = emulated_cluster(tmp_path)
    src = data / "src"
    good = with_layout(src / "good", [0, 1], 3 * MiB)
    bad = with_layout(src / "bad", [2], MiB)
    os.setxattr(bad, XATTR, b"version=1 stripe_size=oops")
    out = data / "out"
    out.mkdir()
    done = iez_copy([str(src), str(tmp_path / "missing"), str(out), "--json"], root)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr
    assert any("missing" in line and "No such file" in line for line in lines)
    assert any(str(bad) in line and "layout attribute" in line for line in lines)
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    assert report["files"] == 1 and len(report["failed"]) == 2
    assert sha(out / "src" / "good") == sha(good)
    assert not (out / "src" / "bad").exists()
    assert not [p for p in out.rglob("*") if ".iez-copy." in p.name]
    # user errors: one line, exit 2
    several = iez_copy([str(good), str(bad), str(out / "src" / "good")], root)
    assert several.returncode == 2 and "not a directory" in several.stderr and "Traceback" not in several.stderr


def test_a_killed_copy_leaves_only_whole_files_under_final_names(tmp_path):
    root, data = emulated_cluster(tmp_path, ost_mib_s=10)
    src = data / "src"
    for k in range(24):
        with_layout(src / f"f{k:02d}", [k % 8], 2 * MiB)  # 0.1 s a chunk read, 0.1 s written: about 5 s in all
    out = data / "out"
    out.mkdir()
    env = {**os.environ, "IEZ_EMULATE": str(root), "IEZ_STATE_DIR": str(tmp_path / "state")}
    env.pop("LD_PRELOAD", None)
    proc = subprocess.Popen([sys.executable, "-m", "iez.cli", "copy", str(src), str(out), "--workers", "2"],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(p.name.startswith("f") for p in (out / "src").glob("f*")
                                                  if (out / "src").is_dir()):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    finals = [p for p in (out / "src").iterdir() if ".iez-copy." not in p.name]
    assert finals, "nothing was copied before the kill"
    assert len(finals) < 24, "the copy ended before the kill: the test proves nothing"
    for p in finals:
        assert sha(p) == sha(src / p.name), p


COMPETITOR = r"""
import os, sys
path = sys.argv[1]
buf = b"\1" * (1 << 20)
fd = os.open(path, os.O_WRONLY)
while True:
    os.pwrite(fd, buf, 0)  # keeps the OST busy: every call's MiB counts, the disk keeps one
"""


def test_sink_side_places_away_from_an_ost_a_competing_writer_overloads(tmp_path):
    """No load in cluster.json: only the mover's own write times show OST 5 is slow."""
    from move_helpers import with_layout as laid

    root, data = emulated_cluster(tmp_path, ost_mib_s=40)
    hog = laid(data / "hog", [5], 0, random=False)
    lib = REPO / "placement_lib" / "build" / "libiez.so"
    subprocess.run(["make", "-s", "-C", str(REPO / "placement_lib")], check=True, stdout=subprocess.DEVNULL)
    env = {**os.environ, "IEZ_EMULATE": str(root), "LD_PRELOAD": str(lib), "IEZ_MODE": "off"}
    competitor = subprocess.Popen([sys.executable, "-c", COMPETITOR, str(hog)], env=env)
    try:
        src = tmp_path / "plain"  # not in the cluster: reading costs nothing, the writes are what is slowed
        src.mkdir()
        for k in range(32):
            with open(src / f"s{k:02d}", "wb") as out:
                out.truncate(4 * MiB)
        runs = {}
        for mode in ("layout-aware", "naive"):
            out = data / mode
            out.mkdir()
            done = iez_copy([str(src), str(out), "--json", "--workers", "8", "--stripe-count", "1", "--window", "4",
                             "--dense"]  # the sparse sources' zeros written: the writes are what is timed
                            + (["--naive"] if mode == "naive" else []), root)
            assert done.returncode == 0, done.stderr
            runs[mode] = json.loads(done.stdout)
    finally:
        competitor.kill()
        competitor.wait()
    aware, naive = runs["layout-aware"], runs["naive"]
    assert naive["dst_files_per_ost"].get("5", 0) == 4  # round-robin: 32 files over 8 OSTs, slow or not
    assert aware["dst_files_per_ost"].get("5", 0) < 4, aware["dst_files_per_ost"]
    assert any(e["ost"] == 5 and e["side"] == "write" and e["congested"] for e in aware["congested"])
    assert sum(aware["dst_files_per_ost"].values()) == 32 and aware["files"] == 32
