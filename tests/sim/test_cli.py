"""The ``iez simulate`` and ``iez bench allocate`` command shapes (ARCHITECTURE.md "Contracts"), run as processes."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

CONTRACT_FIELDS = {"scenario", "policy", "ost_cost", "ost_cost_bound", "oss_cost", "max_ost_util", "mean_ost_util",
                   "max_fill", "mean_fill", "makespan_s", "makespan_bound_s", "enospc_files", "excluded_bytes",
                   "refused"}
NEW_FAMILIES = ("hetfill-new-oss-", "hetfill-wide-", "hetfill-one-full-", "hetbw-slow-oss-", "hetbw-congested-",
                "few-files-", "bigstripe-", "seq-skewed-100jobs-")
CLUSTER = {"fill_cap": 0.9, "oss": [
    {"id": f"oss{k}", "bandwidth_mib_s": 600 if k else 300, "osts": [
        {"index": 4 * k + j, "kbytes_total": 10 << 20, "kbytes_avail": (6 + j) << 20,
         "load_mib_s": 150 if (k, j) == (1, 0) else 0} for j in range(4)]} for k in range(3)]}


def iez(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "iez.cli", *args], capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"iez {' '.join(args)} failed: {proc.stderr}")
    return proc


def test_list_prints_one_scenario_per_line():
    lines = iez("simulate", "--list").stdout.splitlines()
    assert "paper-ior-fpp-sc8-64" in lines and "paper-concurrent" in lines
    assert "skewed-concurrent" in lines and "seq-mixed-jobs" in lines and "large-fpp-1000osts" in lines
    assert all(line and " " not in line for line in lines)
    for family in NEW_FAMILIES:
        assert sum(line.startswith(family) for line in lines) >= (3 if family != "few-files-" else 3), family


def test_simulate_json_has_the_contract_fields_for_every_pair():
    out = json.loads(iez("simulate", "--scenario", "paper-ior-fpp-sc8-8,paper-concurrent",
                         "--policy", "rr,qos,paper,iez", "--json").stdout)
    assert [(r["scenario"], r["policy"]) for r in out] == [
        (s, p) for s in ("paper-ior-fpp-sc8-8", "paper-concurrent") for p in ("rr", "qos", "paper", "iez")]
    for row in out:
        assert CONTRACT_FIELDS <= set(row)
        assert row["ost_cost"] >= row["ost_cost_bound"] >= 1.0
        assert row["makespan_s"] >= row["makespan_bound_s"] > 0


def test_simulate_table_shows_time_bound_ostcost_fill_enospc_refused_and_plot_is_a_png(tmp_path):
    png = tmp_path / "fig.png"
    proc = iez("simulate", "--scenario", "paper-ior-fpp-sc8-64,hetfill-one-full-1", "--policy", "rr,iez",
               "--plot", str(png))
    header = proc.stdout.splitlines()[0]
    for column in ("I/O time", "bound", "OSTCost", "max fill", "ENOSPC", "refused"):
        assert column in header
    assert "modelled" in proc.stdout
    rr_row = next(line for line in proc.stdout.splitlines() if line.startswith("hetfill-one-full-1") and " rr " in line)
    assert int(rr_row.split()[-2]) >= 1  # round-robin ran the nearly full OST out of space
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cluster_description_with_replayed_requests(tmp_path):
    cluster = tmp_path / "site.json"
    cluster.write_text(json.dumps(CLUSTER))
    reqs = tmp_path / "reqs.json"
    reqs.write_text(json.dumps([{"app": "a", "file": f"/l/f{i}", "write_bytes": 3 * 2**30 + i, "stripe_count": 2,
                                 "rank": i} for i in range(12)] + [{"app": "a", "file": "/l/huge",
                                                                    "write_bytes": 2**40, "stripe_count": 1}]))
    out = json.loads(iez("simulate", "--cluster", str(cluster), "--replay", str(reqs), "--policy", "iez,rr,qos",
                         "--json").stdout)
    assert [r["policy"] for r in out] == ["iez", "rr", "qos"]
    for row in out:
        assert CONTRACT_FIELDS <= set(row)
        assert row["files"] == 13
        assert row["ost_index"] == list(range(12))
    iez_row = out[0]
    assert iez_row["refused"] and iez_row["refused"][0]["file"] == "/l/huge"  # 1 TiB fits on no OST
    assert iez_row["excluded_bytes"] == 0 and iez_row["enospc_files"] == 0
    assert iez_row["max_fill"] <= iez_row["fill_cap"] == 0.9
    assert sum(iez_row["ost_bytes"]) == sum(3 * 2**30 + i for i in range(12))


def test_settings_reach_the_cluster_and_the_policies(tmp_path):
    cluster = tmp_path / "site.json"
    cluster.write_text(json.dumps(CLUSTER))
    base = json.loads(iez("simulate", "--cluster", str(cluster), "--scenario", "paper-ior-fpp-sc8-8",
                          "--policy", "iez", "--json").stdout)[0]
    assert base["scenario"] == "paper-ior-fpp-sc8-8@site.json"
    capped = json.loads(iez("simulate", "--cluster", str(cluster), "--scenario", "paper-ior-fpp-sc8-8",
                            "--policy", "iez", "--fill-cap", "0.7", "--json").stdout)[0]
    assert capped["fill_cap"] == 0.7 and capped["max_fill"] <= 0.7
    fast = json.loads(iez("simulate", "--scenario", "paper-ior-fpp-sc8-8", "--policy", "iez", "--ost-bandwidth", "400",
                          "--oss-bandwidth", "1200", "--json").stdout)[0]
    slow = json.loads(iez("simulate", "--scenario", "paper-ior-fpp-sc8-8", "--policy", "iez", "--json").stdout)[0]
    assert fast["makespan_s"] == pytest.approx(slow["makespan_s"] / 2, rel=1e-6)
    reseeded = json.loads(iez("simulate", "--scenario", "paper-ior-fpp-sc8-8", "--policy", "iez", "--fill-seed", "3",
                              "--json").stdout)[0]
    assert reseeded["ost_fill_before"] != slow["ost_fill_before"]
    qos = [json.loads(iez("simulate", "--scenario", "skewed-ior-fpp-sc4-16", "--policy", "qos", "--prio-free", p,
                          "--threshold-rr", "0.05", "--json").stdout)[0]["ost_util"] for p in ("0.9", "0.1")]
    assert qos[0] != qos[1]


def test_lfs_df_output_is_a_cluster(tmp_path):
    df = tmp_path / "lfs-df.txt"
    df.write_text("UUID                   1K-blocks        Used   Available Use% Mounted on\n" + "".join(
        f"fs-OST{i:04x}_UUID  10485760  {2097152 * (1 + i % 3)}  {10485760 - 2097152 * (1 + i % 3)}  "
        f"{20 * (1 + i % 3)}% /fs[OST:{i}]\n" for i in range(8)) + "Pool: fs.fast\nfs-OST0000_UUID\nfs-OST0001_UUID\n")
    reqs = tmp_path / "reqs.csv"
    reqs.write_text("app,file,write_bytes,stripe_count,rank,pool\n" +
                    "".join(f"a,/l/f{i},{2**30},2,{i},\n" for i in range(4)) + "a,/l/fast,1000,2,9,fast\n")
    out = json.loads(iez("simulate", "--cluster", str(df), "--replay", str(reqs), "--osts-per-oss", "4",
                         "--policy", "iez", "--json").stdout)[0]
    assert out["ost_index"] == list(range(8)) and out["placed_files"] == 5 and out["excluded_bytes"] == 0
    placed = dict(zip(out["ost_index"], out["ost_bytes"]))
    assert placed[0] + placed[1] >= 1000


def test_bad_cluster_file_is_one_clear_line_naming_file_and_field(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"oss": [{"id": "a", "osts": [{"index": 0, "kbytes_total": 10, "kbytes_avail": 50}]}]}')
    reqs = tmp_path / "r.csv"
    reqs.write_text("file,write_bytes,stripe_count\n/l/a,100,1\n")
    proc = iez("simulate", "--cluster", str(bad), "--replay", str(reqs), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "bad.json: oss[0].osts[0]" in proc.stderr and "kbytes_avail=50" in proc.stderr
    proc = iez("simulate", "--cluster", str(bad), check=False)
    assert proc.returncode == 2 and "--cluster needs --replay" in proc.stderr


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
    assert out["seconds"] > 0 and out["ost_cost"] >= 1.0


def test_a_scenario_saved_as_files_replays_the_same(tmp_path):
    cluster, reqs = tmp_path / "c.json", tmp_path / "r.json"
    named = json.loads(iez("simulate", "--scenario", "hetbw-congested-1", "--policy", "rr,iez", "--json",
                           "--save-cluster", str(cluster), "--save-requests", str(reqs)).stdout)
    replayed = json.loads(iez("simulate", "--cluster", str(cluster), "--replay", str(reqs), "--policy", "rr,iez",
                              "--json").stdout)
    for a, b in zip(named, replayed):
        assert a["makespan_s"] == pytest.approx(b["makespan_s"], rel=1e-12)
        assert a["makespan_bound_s"] == pytest.approx(b["makespan_bound_s"], rel=1e-12)
        assert a["ost_bytes"] == b["ost_bytes"]
