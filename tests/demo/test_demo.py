"""``iez demo``: the README's main command, run for real (agents, MDS, API, an MPI or Python writer)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS = ["build", "start-services", "traced-run", "learn", "allocate", "placed-run-iez", "reset-cluster",
         "placed-run-rr", "model-qos", "compare", "stop-services"]


def leftovers(work: Path) -> list[str]:
    """Processes still running that were started for this working directory."""
    out = subprocess.run(["pgrep", "-af", str(work)], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("writer", ["mpi", "python"])
def test_demo_places_at_least_as_fast_as_lustres_allocators_and_cleans_up(writer, tmp_path):
    work = tmp_path / "work"
    args = ["--json", "--work", str(work), "--plot", str(tmp_path / "demo.png"), "--ranks", "8"]
    if writer == "python":
        args.append("--python-writer")
    done = subprocess.run([sys.executable, "-m", "iez.cli", "demo", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=280)
    report = json.loads(done.stdout)
    assert done.returncode == 0, (report["steps"], done.stderr[-2000:])
    assert [s["name"] for s in report["steps"]] == STEPS and all(s["ok"] for s in report["steps"])
    assert report["writer"] == writer
    times = report["makespan_s"]
    assert set(times) == {"iez", "rr", "qos"} and set(report["ost_cost"]) == {"iez", "rr", "qos"}
    assert times["iez"] <= min(times["rr"], times["qos"]) * 1.01
    assert report["runs"]["iez"]["measured"] and report["runs"]["rr"]["measured"]
    # the same jobs through the emulated bandwidth (libiez, IEZ_EMULATE): the wall clock agrees with the model
    for policy in ("iez", "rr"):
        io = report["io_time_s"][policy]
        assert io["modelled"] > 0.5, io  # long enough to be measured
        assert abs(io["measured"] / io["modelled"] - 1) <= 0.15, (policy, io)
    assert set(report["runs"]["iez"]["util"]) == {str(i) for i in range(15)}
    assert (tmp_path / "demo.png").stat().st_size > 10_000
    assert not leftovers(work)


@pytest.mark.timeout(120)
def test_ctrl_c_stops_every_process_the_demo_started(tmp_path):
    work = tmp_path / "work"
    proc = subprocess.Popen([sys.executable, "-m", "iez.cli", "demo", "--work", str(work), "--plot",
                             str(tmp_path / "x.png"), "--python-writer"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (work / "mds-status.json").exists() or not leftovers(work):
        assert time.monotonic() < deadline and proc.poll() is None, "the demo did not start its services"
        time.sleep(0.2)
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-2000:]
    time.sleep(1)
    assert not leftovers(work), leftovers(work)
