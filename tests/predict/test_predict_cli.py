"""``iez predict DIR_OR_FILE --json``: the contract (orders, accuracy, requests) through the real command line."""

from __future__ import annotations

import json

import pytest

from conftest import run_iez
from iez.sim.workloads import load_requests
from iez.predict.synth import SynthSpec, write_runs

pytestmark = pytest.mark.slow

VARIABLES = {"write_bytes", "stripe_count", "rank"}


def predict_json(*args) -> dict:
    proc = run_iez("predict", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_synth_then_predict_noise_free_runs_is_exact(tmp_path):
    out = tmp_path / "runs"
    proc = run_iez("trace", "synth", "--workload", "ior-fpp", "--ranks", "8", "--runs", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    data = predict_json(str(out), "--out", str(tmp_path / "next.csv"))
    assert set(data["orders"]) == VARIABLES
    assert all(isinstance(o, list) and len(o) == 3 and all(isinstance(x, int) for x in o)
               for o in data["orders"].values())
    assert set(data["accuracy"]) == VARIABLES and all(a >= 99.0 for a in data["accuracy"].values())
    assert data["held_out_run"] == "run-0003" and data["runs"] == 3
    assert data["requests"] == [{"file": f"/lustre/scratch/ior/testFile.{r:08d}", "write_bytes": 2 * 2**30,
                                 "stripe_count": 8, "rank": r, "pool": None, "components": None,
                                 "default_layout": None} for r in range(8)]
    [job] = load_requests(str(tmp_path / "next.csv"))
    assert [r.file for r in job.requests] == [r["file"] for r in data["requests"]]
    proc = run_iez("predict", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "periodic" in proc.stdout and "8 predicted requests" in proc.stdout


def test_noisy_runs_get_an_arima_order(tmp_path):
    write_runs(SynthSpec("hacc-fpp", 8, runs=4, noise=0.02, seed=2), tmp_path)
    data = predict_json(str(tmp_path), "--workers", "1")
    assert data["methods"] == {"write_bytes": "arima", "stripe_count": "constant", "rank": "periodic"}
    assert data["accuracy"]["write_bytes"] > 95 and data["accuracy"]["rank"] == 100.0
    assert len(data["requests"]) == 8 and data["fit_stats"]["fits"] > 0
    assert all(r["file"].endswith(f"Part{r['rank']:08d}-of-00000008.data") for r in data["requests"])


def test_a_requests_csv_with_a_run_column(tmp_path):
    lines = ["file,write_bytes,stripe_count,rank,run"]
    for run in (1, 2, 3):
        lines += [f"/out/ckpt{run:03d}/part.{r}.h5,{1000 * (r + 1)},4,{r}" + f",{run}" for r in range(4)]
    path = tmp_path / "reqs.csv"
    path.write_text("\n".join(lines) + "\n")
    data = predict_json(str(path))
    assert data["run_ids"] == ["1", "2", "3"]
    assert data["accuracy"] == {"write_bytes": 100.0, "stripe_count": 100.0, "rank": 100.0}
    assert [r["file"] for r in data["requests"]] == [f"/out/ckpt004/part.{r}.h5" for r in range(4)]
    assert [r["write_bytes"] for r in data["requests"]] == [1000, 2000, 3000, 4000]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    proc = run_iez("predict", str(tmp_path / "nothing"), "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("iez predict: error:") and len(proc.stderr.splitlines()) == 1
