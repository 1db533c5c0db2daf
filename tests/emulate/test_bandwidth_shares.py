"""Shares of the emulated bandwidth (seed 002): processes in I/O classes (IEZ_IO_CLASS, IEZ_IO_WEIGHT,
IEZ_IO_SHARE) share each emulated server by weight, and a capped (background) class leaves the rest to the
job beside it. Real Python writers, started together, write to files on one emulated OST for the same
window; what each got is compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iez.emulate.bandwidth import MiB, Server, Table, write_table
from test_bandwidth_emulation import cluster, env, lib, with_layout  # noqa: F401 (lib is a fixture)
from waiting import scaled

pytestmark = pytest.mark.slow

WRITER = """
import os, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
block = b"\\0" * (256 << 10)
fd = os.open(path, os.O_WRONLY)
print("ready", flush=True)
start = float(sys.stdin.readline())  # the same start for every writer, sent once all are ready
while time.time() < start:
    time.sleep(0.001)
done = 0
while time.time() < start + seconds:
    done += os.write(fd, block)
print(done)
"""


def small_window(root: Path, ost_mib_s: float) -> None:
    """The same 2 OSS x 2 OST cluster with a 64 KiB window, so what is still in flight when the window
    closes (at most the window per writer) hardly counts."""
    write_table(root, {i: (Server(ost_mib_s), f"oss{i // 2}") for i in range(4)},
                {"oss0": Server(10_000), "oss1": Server(10_000)}, window=64 << 10)


def race(lib: Path, root: Path, writers: list[tuple[Path, dict]], seconds: float) -> list[int]:
    """Each writer's bytes over the same window, which opens once every writer has its file open (on a loaded
    machine an interpreter can take seconds to start: a fixed head start let one writer begin late)."""
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(seconds)],
                              env={**env(lib, root), **extra}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
             for path, extra in writers]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n", "a writer died before opening its file"
    start = time.time() + 0.2
    out = []
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(f"{start}\n")
        p.stdin.flush()
    for p in procs:
        stdout, _ = p.communicate(timeout=scaled(60))
        assert p.returncode == 0
        out.append(int(stdout))
    return out


def unfairness(got: list[int], weights: list[float]) -> float:
    """vPFS's measure: the sum over applications of |throughput share - weight share| (0 to 2)."""
    return sum(abs(g / sum(got) - w / sum(weights)) for g, w in zip(got, weights))


def test_two_movements_weighted_3_to_1_get_3_to_1(lib, tmp_path):  # noqa: F811
    root, data = cluster(tmp_path, ost_mib_s=40)
    small_window(root, 40)
    a, b = with_layout(data / "a", [0]), with_layout(data / "b", [0])
    got = race(lib, root, [(a, {"IEZ_IO_CLASS": "move-a", "IEZ_IO_WEIGHT": "3"}),
                           (b, {"IEZ_IO_CLASS": "move-b", "IEZ_IO_WEIGHT": "1"})], seconds=2.0)
    ratio = got[0] / got[1]
    assert 3 * 0.9 <= ratio <= 3 * 1.1, (got, ratio)
    assert unfairness(got, [3, 1]) < 0.05
    # together they used the OST, no more: 2 s at 40 MiB/s (plus a window each)
    assert sum(got) <= 2.0 * 40 * MiB + 2 * (64 << 10) + 2 * (256 << 10)
    assert sum(got) >= 0.85 * 2.0 * 40 * MiB
    table = Table(root)
    assert sorted(c["weight"] for c in table.classes()) == [1.0, 1.0, 3.0]  # class 0 and the two
    table.close()


def test_a_capped_background_movement_leaves_the_job_the_rest(lib, tmp_path):  # noqa: F811
    root, data = cluster(tmp_path, ost_mib_s=40)
    small_window(root, 40)
    job, background = with_layout(data / "job", [1]), with_layout(data / "bg", [1])
    alone = race(lib, root, [(job, {})], seconds=1.5)[0]
    small_window(root, 40)  # fresh lanes
    both = race(lib, root, [(job, {}), (background, {"IEZ_IO_CLASS": "staging", "IEZ_IO_SHARE": "0.3"})],
                seconds=1.5)
    assert both[0] >= (1 - 0.3) * alone * 0.9, (alone, both)  # the job keeps at least 70 % of its speed
    assert both[1] <= 0.3 * 1.5 * 40 * MiB * 1.1 + (256 << 10), both  # the movement never takes more than 30 %
    # with the job gone, a capped movement still stays at its cap (a share, not a priority)
    small_window(root, 40)
    only_bg = race(lib, root, [(background, {"IEZ_IO_CLASS": "staging", "IEZ_IO_SHARE": "0.3"})], seconds=1.0)[0]
    assert only_bg <= 0.3 * 1.0 * 40 * MiB * 1.1 + (256 << 10)


def test_a_bad_weight_or_share_is_said_and_ignored(lib, tmp_path):  # noqa: F811
    root, data = cluster(tmp_path, ost_mib_s=400)
    f = with_layout(data / "f", [2])
    done = subprocess.run(["dd", "if=/dev/zero", f"of={f}", "bs=1M", "count=2", "conv=notrunc", "status=none"],
                          env={**env(lib, root), "IEZ_IO_CLASS": "x", "IEZ_IO_WEIGHT": "heavy",
                               "IEZ_IO_SHARE": "2", "IEZ_DEBUG": "1"}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "IEZ_IO_WEIGHT=heavy is not a positive number" in done.stderr
    assert "IEZ_IO_SHARE=2 is not a fraction" in done.stderr
    table = Table(root)
    assert [(c["weight"], c["cap"]) for c in table.classes() if c["key"] != 1] == [(1.0, 0.0)]
    table.close()
    assert json.loads((root / "cluster.json").read_text())["oss"]  # the description is untouched
    assert os.path.getsize(f) == 2 * MiB
