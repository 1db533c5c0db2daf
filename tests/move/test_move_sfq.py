"""SFQ(D) (iez.move.sfq): flows that keep a server busy get it by weight, at most D requests are in service,
an idle flow comes back without banked credit, and through a real emulated OST (libiez, IEZ_EMULATE) two
movements in one process weighted 3:1 move 3:1 of the bytes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from iez.move.sfq import SfqD, unfairness

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "emulate"))
from test_bandwidth_emulation import cluster, env, lib, with_layout  # noqa: E402,F401 (lib is a fixture)

pytestmark = pytest.mark.slow


def run_flows(sched: SfqD, flows: dict[str, tuple[float, int]], seconds: float, service_s: float,
              in_service: list | None = None) -> dict[str, int]:
    """Each flow (weight, threads) submits cost-1 requests back to back; a request holds its slot for
    service_s. Returns requests completed per flow."""
    stop = time.monotonic() + seconds
    done: dict[str, int] = {f: 0 for f in flows}
    lock = threading.Lock()
    busy = [0]

    def worker(flow: str, weight: float) -> None:
        while time.monotonic() < stop:
            with sched.slot(flow, weight, 1.0):
                with lock:
                    busy[0] += 1
                    if in_service is not None:
                        in_service.append(busy[0])
                time.sleep(service_s)
                with lock:
                    busy[0] -= 1
                    done[flow] += 1

    threads = [threading.Thread(target=worker, args=(f, w)) for f, (w, n) in flows.items() for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done


@pytest.mark.parametrize("depth", [1, 4])
def test_backlogged_flows_share_by_weight_with_at_most_depth_in_service(depth):
    sched = SfqD(depth)
    seen: list[int] = []
    # the server serves `depth` requests at once, each 4 ms: both flows stay backlogged (8 threads each)
    done = run_flows(sched, {"a": (3.0, 8), "b": (1.0, 8)}, seconds=1.5, service_s=0.004, in_service=seen)
    assert max(seen) <= depth
    ratio = done["a"] / done["b"]
    assert 2.7 <= ratio <= 3.3, done
    assert unfairness({"a": done["a"], "b": done["b"]}, {"a": 3, "b": 1}) < 0.05


def test_an_idle_flow_comes_back_without_banked_credit():
    """b is idle while a runs alone; when b returns it gets its 1/4, not the whole server to catch up."""
    sched = SfqD(1)
    run_flows(sched, {"a": (3.0, 4)}, seconds=0.5, service_s=0.002)
    sched.served.clear()
    done = run_flows(sched, {"a": (3.0, 4), "b": (1.0, 4)}, seconds=1.0, service_s=0.002)
    assert 2.5 <= done["a"] / done["b"] <= 3.5, done


def test_weights_and_depth_are_checked():
    with pytest.raises(ValueError, match="depth 0"):
        SfqD(0)
    with pytest.raises(ValueError, match="weight 0"):
        SfqD().acquire("f", 0, 1)
    assert unfairness({"a": 1, "b": 1}, {"a": 1, "b": 1}) == 0
    assert unfairness({"a": 1, "b": 0}, {"a": 1, "b": 1}) == pytest.approx(1.0)


MOVER = """
import json, os, sys, threading, time
from iez.move.sfq import Schedulers, unfairness
files, seconds = json.loads(sys.argv[1]), float(sys.argv[2])
sched = Schedulers(depth=2)
chunk = 256 << 10
block = b"\\0" * chunk
stop = time.monotonic() + seconds
moved = {}
lock = threading.Lock()
def worker(flow, weight, path):
    fd = os.open(path, os.O_WRONLY)
    off = 0
    while time.monotonic() < stop:
        with sched[0].slot(flow, weight, chunk):
            os.pwrite(fd, block, off)
        off += chunk
        with lock:
            moved[flow] = moved.get(flow, 0) + chunk
    os.close(fd)
threads = [threading.Thread(target=worker, args=(flow, w, p)) for flow, w, p in files for _ in range(3)]
[t.start() for t in threads]
[t.join() for t in threads]
print(json.dumps({"moved": moved, "unfairness": unfairness(moved, {f: w for f, w, _ in files})}))
"""


def test_two_movements_in_one_mover_share_an_emulated_ost_3_to_1(lib, tmp_path):  # noqa: F811
    root, data = cluster(tmp_path, ost_mib_s=40)
    a, b = with_layout(data / "a", [0]), with_layout(data / "b", [0])
    files = [["move-a", 3.0, str(a)], ["move-b", 1.0, str(b)]]
    done = subprocess.run([sys.executable, "-c", MOVER, json.dumps(files), "2.0"], env=env(lib, root),
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    ratio = out["moved"]["move-a"] / out["moved"]["move-b"]
    assert 2.7 <= ratio <= 3.3, out
    assert out["unfairness"] < 0.05
    # and the OST was the limit: about 2 s at 40 MiB/s between them
    assert sum(out["moved"].values()) <= 2.0 * 40 * (1 << 20) * 1.15
