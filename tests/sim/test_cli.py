"""The ``iez simulate`` and ``iez bench allocate`` command shapes (ARCHITECTURE.md "Contracts"), run as processes."""

import json
import subprocess
import sys

import pytest

CONTRACT_FIELDS = {"scenario", "policy", "ost_cost", "ost_cost_bound", "oss_cost", "max_ost_util", "mean_ost_util",
                   "max_fill", "mean_fill", "makespan_s"}


def iez(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "iez.cli", *args], capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"iez {' '.join(args)} failed: {proc.stderr}")
    return proc


def test_list_prints_one_scenario_per_line():
    lines = iez("simulate", "--list").stdout.splitlines()
    assert "paper-ior-fpp-sc8-64" in lines and "paper-concurrent" in lines
    assert all(line and " " not in line for line in lines)


def test_simulate_json_has_the_contract_fields_for_every_pair():
    out = json.loads(iez("simulate", "--scenario", "paper-ior-fpp-sc8-8,paper-concurrent",
                         "--policy", "rr,qos,paper,iez", "--json").stdout)
    assert [(r["scenario"], r["policy"]) for r in out] == [
        (s, p) for s in ("paper-ior-fpp-sc8-8", "paper-concurrent") for p in ("rr", "qos", "paper", "iez")]
    for row in out:
        assert CONTRACT_FIELDS <= set(row)
        assert row["ost_cost"] >= row["ost_cost_bound"] >= 1.0


def test_simulate_table_labels_modelled_time_and_plot_is_a_png(tmp_path):
    png = tmp_path / "fig.png"
    proc = iez("simulate", "--scenario", "paper-ior-fpp-sc8-64", "--plot", str(png))
    assert "OSTCost" in proc.stdout and "modelled" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_replay_of_a_request_list(tmp_path):
    csv_file = tmp_path / "reqs.csv"
    csv_file.write_text("app,file,write_bytes,stripe_count,rank\n" +
                        "".join(f"a,/l/f{i},{2**30},4,{i}\n" for i in range(15)))
    out = json.loads(iez("simulate", "--replay", str(csv_file), "--policy", "iez,rr", "--json").stdout)
    assert {r["policy"] for r in out} == {"iez", "rr"}
    assert next(r for r in out if r["policy"] == "iez")["ost_cost"] == pytest.approx(1.0)


@pytest.mark.parametrize("args, message", [
    (("simulate", "--scenario", "nope"), "unknown scenario 'nope'"),
    (("simulate", "--policy", "fastest"), "unknown policy fastest"),
    (("simulate", "--replay", "/no/such/file.csv"), "No such file"),
])
def test_bad_input_is_one_clear_line_and_exit_2(args, message):
    proc = iez(*args, check=False)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_corrupt_replay_row_names_the_row(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("file,write_bytes,stripe_count\n/l/a,100,4\n/l/b,lots,4\n")
    proc = iez("simulate", "--replay", str(bad), check=False)
    assert proc.returncode == 2 and "request 2" in proc.stderr


def test_bench_allocate_prints_the_contract_object():
    out = json.loads(iez("bench", "allocate", "--osts", "60", "--oss", "12", "--requests", "5000",
                         "--stripe-count", "4", "--policy", "iez", "--json").stdout)
    assert {"policy", "osts", "requests", "seconds", "ost_cost"} <= set(out)
    assert out["policy"] == "iez" and out["osts"] == 60 and out["requests"] == 5000
    assert out["seconds"] > 0 and 1.0 <= out["ost_cost"] <= 1.01
