"""Emulated bandwidth: real programs (dd, cat, Python) under libiez with IEZ_EMULATE=ROOT take the time their
files' emulated layouts cost on the emulated cluster - each OST and OSS serves its bytes at its bandwidth
less its background load, shared by every process on the host - and run at full speed without it.

The emulation guarantees lower bounds (no call returns before its OSTs would have served it), so those are
asserted tightly; upper bounds only catch "not slowed at all" or "slowed twice" with a machine's slack.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iez.emulate.bandwidth import MiB, Table

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "placement_lib" / "build" / "libiez.so"
XATTR = "user.iez.layout"


@pytest.fixture(scope="module")
def lib() -> Path:
    subprocess.run(["make", "-s", "-C", str(REPO / "placement_lib")], check=True, stdout=subprocess.DEVNULL)
    return LIB


def cluster(tmp_path: Path, ost_mib_s=40.0, oss_mib_s=1000.0, loads=None) -> tuple[Path, Path]:
    """2 OSS x 2 OSTs (0, 1 on oss0; 2, 3 on oss1), emulated under tmp_path/root; data in tmp_path/data."""
    loads = loads or {}
    desc = {"oss": [{"id": f"oss{k}", "bandwidth_mib_s": oss_mib_s, "osts": [
        {"index": i, "kbytes_total": 1 << 20, "kbytes_avail": 1 << 20, "bandwidth_mib_s": ost_mib_s,
         "load_mib_s": loads.get(i, 0)} for i in (2 * k, 2 * k + 1)]} for k in range(2)]}
    (tmp_path / "cluster.json").write_text(json.dumps(desc))
    root, data = tmp_path / "root", tmp_path / "data"
    done = subprocess.run([sys.executable, "-m", "iez.cli", "cluster", "emulate", "--cluster",
                           str(tmp_path / "cluster.json"), "--root", str(root), "--data", str(data), "--no-agents"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (root / "bandwidth.shm").is_file()
    return root, data


def with_layout(path: Path, osts: list[int], stripe_size: int = MiB) -> Path:
    path.touch()
    os.setxattr(path, XATTR, f"version=1 stripe_size={stripe_size} stripe_count={len(osts)} "
                             f"osts={','.join(map(str, osts))}".encode())
    return path


def env(lib: Path, root: Path | None) -> dict:
    e = {**os.environ, "LD_PRELOAD": str(lib), "IEZ_MODE": "off", "IEZ_STATE_DIR": str(root or "/tmp") + "-state"}
    if root is not None:
        e["IEZ_EMULATE"] = str(root)
    return e


def dd(target: Path, mib: int) -> list[str]:
    return ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mib}", "conv=notrunc", "status=none"]


def timed(cmds: list[list[str]], environ: dict) -> float:
    """Runs the commands at once; seconds until the last one ends."""
    start = time.monotonic()
    procs = [subprocess.Popen(c, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in cmds]
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read()
    return time.monotonic() - start


def test_a_write_takes_its_ost_s_time_and_only_under_emulation(lib, tmp_path):
    root, data = cluster(tmp_path, ost_mib_s=40)
    f = with_layout(data / "f", [0])
    slowed = timed([dd(f, 16)], env(lib, root))
    assert slowed >= 16 / 40 * 0.97  # 0.4 s: 16 MiB at 40 MiB/s
    assert slowed < 16 / 40 + 1.5
    plain = timed([dd(f, 16)], env(lib, None))
    assert plain < slowed / 2
    # a file without a layout is never slowed
    g = data / "g"
    g.touch()
    assert timed([dd(g, 16)], env(lib, root)) < slowed / 2


def test_processes_share_an_ost_and_stripes_spread_over_osts(lib, tmp_path):
    root, data = cluster(tmp_path, ost_mib_s=40)
    e = env(lib, root)
    a, b = with_layout(data / "a", [0]), with_layout(data / "b", [0])
    same = timed([dd(a, 8), dd(b, 8)], e)  # 16 MiB through one OST: 0.4 s
    assert same >= 16 / 40 * 0.97
    c, d = with_layout(data / "c", [1]), with_layout(data / "d", [2])
    apart = timed([dd(c, 8), dd(d, 8)], e)  # 8 MiB on each of two OSTs: 0.2 s
    assert apart >= 8 / 40 * 0.97 and apart < same * 0.85
    # one file over four OSTs at 1 MiB stripes: 16 MiB is 4 MiB per OST, 0.1 s
    wide = with_layout(data / "wide", [0, 1, 2, 3])
    spread = timed([dd(wide, 16)], e)
    assert spread >= 4 / 40 * 0.97 and spread < same * 0.7


def test_an_oss_caps_the_sum_of_its_osts(lib, tmp_path):
    root, data = cluster(tmp_path, ost_mib_s=40, oss_mib_s=40)
    e = env(lib, root)
    a, b = with_layout(data / "a", [0]), with_layout(data / "b", [1])  # both on oss0
    together = timed([dd(a, 8), dd(b, 8)], e)
    assert together >= 16 / 40 * 0.97  # the OSS's 40 MiB/s, not the OSTs' 80


def test_reads_are_slowed_and_background_load_takes_its_share(lib, tmp_path):
    root, data = cluster(tmp_path, ost_mib_s=40, loads={0: 30})
    f = with_layout(data / "f", [0])
    with open(f, "r+b") as out:
        out.write(b"\0" * (4 * MiB))
    read = timed([["cat", str(f)]], env(lib, root))  # 4 MiB at 40 - 30 = 10 MiB/s
    assert read >= 4 / 10 * 0.97
    # iez cluster set changes the load of a running cluster in place
    done = subprocess.run([sys.executable, "-m", "iez.cli", "cluster", "set", "--root", str(root), "--ost", "0",
                           "--load", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert Table(root).rate(0) == 40 * MiB
    assert json.loads((root / "cluster.json").read_text())["oss"][0]["osts"][0]["load_mib_s"] == 0
    faster = timed([["cat", str(f)]], env(lib, root))
    assert faster >= 4 / 40 * 0.97 and faster < read * 0.6


def test_python_copies_through_sendfile_and_dup_are_slowed(lib, tmp_path):
    """shutil.copyfile uses sendfile on Linux; a dup of a descriptor keeps its layout."""
    root, data = cluster(tmp_path, ost_mib_s=40)
    src = with_layout(data / "src", [0])
    with open(src, "r+b") as out:
        out.write(b"x" * (8 * MiB))
    dst = with_layout(data / "dst", [2])
    code = ("import shutil, os, sys\n"
            "shutil.copyfile(sys.argv[1], sys.argv[2])\n"
            "fd = os.open(sys.argv[2], os.O_WRONLY); fd2 = os.dup(fd); os.close(fd)\n"
            "os.write(fd2, b'y' * (8 << 20)); os.close(fd2)\n")
    took = timed([[sys.executable, "-c", code, str(src), str(dst)]], env(lib, root))
    # 8 MiB read from OST 0 and written to OST 2 at once (0.2 s), then 8 MiB more to OST 2 (0.2 s)
    assert took >= 0.4 * 0.97
    assert dst.read_bytes()[:4] == b"yyyy" and dst.stat().st_size == 8 * MiB


MIRRORED = "version=3 mirror=1 comp=0:eof:1048576:1:0 mirror=2:stale comp=0:eof:1048576:1:2"
READ_MIRROR = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
if sys.argv[2] != "auto":
    fcntl.ioctl(fd, 0x400866B1, int(sys.argv[2]))  # LL_IOC_FLR_SET_MIRROR, as llapi_mirror_read does
t0 = time.monotonic()
while os.read(fd, 1 << 20):
    pass
os.close(fd)
print(time.monotonic() - t0)
"""


def test_a_mirrored_file_writes_its_primary_and_reads_the_copy_asked_for(lib, tmp_path):
    """FLR in emulation: a write costs the primary copy's OSTs only (the other goes stale until a resync); a
    read costs one copy - the preferred or first in-sync one, or the one LL_IOC_FLR_SET_MIRROR pinned."""
    root, data = cluster(tmp_path, ost_mib_s=40, loads={2: 36})  # OST 2 (mirror 2) congested: 4 MiB/s left
    f = data / "m"
    f.touch()
    os.setxattr(f, XATTR, MIRRORED.encode())
    wrote = timed([dd(f, 8)], env(lib, root))
    assert 8 / 40 * 0.97 <= wrote < 8 / 4 * 0.5  # at OST 0's speed, not the congested copy's
    e = env(lib, root)

    def read(mirror: str) -> float:
        done = subprocess.run([sys.executable, "-c", READ_MIRROR, str(f), mirror], env=e, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return float(done.stdout)

    auto = read("auto")  # mirror 2 is stale: reads come from mirror 1
    assert 8 / 40 * 0.97 <= auto < 8 / 4 * 0.5
    pinned_slow = read("2")
    assert pinned_slow >= 8 / 4 * 0.9  # the congested copy, as asked
    assert read("1") < pinned_slow / 3
