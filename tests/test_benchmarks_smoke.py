"""Smoke test of ``benchmarks/allocate_scaling.py --quick``: it runs, and its JSON rows make sense."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "allocate_scaling.py"
POLICIES = ("paper", "iez", "qos")


def test_quick_scaling_benchmark_writes_rows_for_every_policy(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "stripe count 4" in proc.stdout and "paper/iez" in proc.stdout

    rows = json.loads(out.read_text())
    finished = [r for r in rows if r["status"] == "ok"]
    for policy in POLICIES:
        assert any(r["policy"] == policy for r in finished), f"no finished {policy} row in {rows}"
    for row in finished:
        assert row["seconds"] > 0, row
        assert row["ost_cost"] >= 1.0, row
        assert row["peak_rss_mib"] > 0, row
    assert not [r for r in rows if r["status"] == "error"], rows

    def key(r):
        return (r["osts"], r["oss"], r["requests"], r["stripe_count"])

    iez = {key(r): r for r in finished if r["policy"] == "iez"}
    qos = {key(r): r for r in finished if r["policy"] == "qos"}
    shared = sorted(iez.keys() & qos.keys())
    assert shared, "iez and qos never finished the same instance"
    for k in shared:  # iez is judged by the job's I/O time, as users feel it
        assert iez[k]["makespan_s"] <= qos[k]["makespan_s"] * 1.001, (k, iez[k], qos[k])
