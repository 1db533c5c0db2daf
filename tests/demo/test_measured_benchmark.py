"""``benchmarks/measured_placement.py``: one of its scenarios run for real (a slow OSS the MDS knows from
the site's hardware description), printed and written as JSON rows that hold what the README quotes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "measured_placement.py"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_slow_oss_scenario_is_measured_for_every_policy_beside_model_and_bound(tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--scenario", "slow-oss", "--python-writer", "--json",
                           str(out)], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "slow-oss" in done.stdout and "meas/bound" in done.stdout
    rows = {r["policy"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"iez", "rr", "qos"}
    for row in rows.values():
        assert abs(row["model_error"]) <= 0.15, row
        assert row["modelled_s"] >= row["makespan_bound_s"] * 0.999, row  # the bound is a bound
    assert rows["iez"]["modelled_vs_bound"] <= 1.05, rows["iez"]
    # rr and qos give the slow OSS a third of the bytes; iez gives it what it can serve in the same time
    assert rows["iez"]["measured_s"] <= 0.6 * rows["rr"]["measured_s"], rows
    assert rows["iez"]["measured_s"] <= rows["qos"]["measured_s"], rows
    assert rows["iez"]["max_fill"] <= 0.95


def test_an_unknown_scenario_is_named(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--scenario", "nope"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "no scenario nope" in done.stderr
