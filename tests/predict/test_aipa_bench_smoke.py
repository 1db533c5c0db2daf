"""Smoke test of ``benchmarks/aipa_bench.py``: noise-free cases print a row per workload, all exact."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "aipa_bench.py"


@pytest.mark.slow
def test_noise_free_rows_are_exact(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--ranks", "8", "--noise", "0", "--runs", "3", "--no-grid",
                           "--workers", "1", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "noise-free: lowest accuracy of any variable 100.00 %" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert sorted(r["workload"] for r in rows) == ["hacc-fpp", "hacc-ssf", "ior-fpp", "ior-ssf"]
    assert all(min(r["accuracy"].values()) == 100.0 for r in rows)
