"""``iez status [--db DB] --json``: the live view from the DB (OST states, pools, space, Lustre's reserved space,
fill and load; OSS freshness), and ``GET /v1/osts`` with the same policy fields."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import iez_cli
from iez.config import database_url
from iez.db.engine import make_engine
from iez.db.ingest import store_batch
from iez.db.models import utcnow
from iez.db.stats import OssReport, OstReport
from iez.mds.view import ClusterView

GiB_KB = 1024 * 1024
MiB = 1 << 20


def report(oss: str, seq: int, when, osts: dict[int, tuple[int, int, str]], interval: float | None = 60.0):
    """osts: index -> (kbytes_avail, write_bytes counter, state the OSS reports)."""
    return OssReport(oss, seq, when, 5.0, 6.0,
                     [OstReport(f"fs-OST{i:04x}", i, 10 * GiB_KB, avail, 0, written, state)
                      for i, (avail, written, state) in osts.items()], interval)


def fill_db(db: str) -> None:
    """Two OSSs as the MDS stores them: oss0 fresh with two samples 10 s apart, oss1 silent for 1,000 s."""
    engine = make_engine(database_url(db))
    now = utcnow()
    policies = {0: ("active", "flash", 3072), 1: ("degraded", "flash", 3072), 2: ("inactive", "disk scratch", None)}
    first = report("oss0", 1, now - timedelta(seconds=12), {0: (8 * GiB_KB, 0, "active"),
                                                            1: (5 * GiB_KB, 0, "degraded")})
    second = report("oss0", 2, now - timedelta(seconds=2), {0: (8 * GiB_KB, 1000 * MiB, "active"),
                                                            1: (5 * GiB_KB, 0, "degraded")})
    old = report("oss1", 1, now - timedelta(seconds=1000), {2: (GiB_KB, 7, "active")})
    # the loads the MDS stores with each row are its live view's (iez.traffic), as iez mds computes them
    view = ClusterView()
    for r in (first, old):
        view.apply(r)
    store_batch(engine, [(first, now - timedelta(seconds=12)), (old, now - timedelta(seconds=1000))], policies,
                view.loads())
    view.apply(second)
    store_batch(engine, [(second, now - timedelta(seconds=2))], policies, view.loads())
    engine.dispose()


@pytest.mark.slow
def test_status_json_shows_states_pools_space_load_and_freshness(db: str, tmp_path: Path):
    fill_db(db)
    status_file = tmp_path / "mds-status.json"
    status_file.write_text(json.dumps({"lustre": {"source": "procfs", "qos": {"prio_free_pct": 90,
                                                                             "threshold_rr_pct": 17}}}))
    done = iez_cli("status", "--db", db, "--json", "--status-file", str(status_file))
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    osts = {o["index"]: o for o in view["osts"]}
    assert sorted(osts) == [0, 1, 2]
    for ost in view["osts"]:
        assert {"index", "oss", "state", "pools", "kbytes_total", "kbytes_avail", "reserved_kbytes", "fill",
                "load_mib_s"} <= set(ost)
    assert [(o["state"], o["pools"], o["reserved_kbytes"]) for o in view["osts"]] == [
        ("active", ["flash"], 3072), ("degraded", ["flash"], 3072), ("inactive", ["disk", "scratch"], 0)]
    assert (osts[0]["oss"], osts[0]["kbytes_total"], osts[0]["kbytes_avail"]) == ("oss0", 10 * GiB_KB, 8 * GiB_KB)
    assert osts[0]["fill"] == pytest.approx(0.2) and osts[1]["fill"] == pytest.approx(0.5)
    assert osts[0]["kbytes_usable"] == 8 * GiB_KB - 3072  # what allocation may use: less Lustre's reserve
    assert osts[0]["load_mib_s"] == pytest.approx(100.0)  # 1,000 MiB written in 10 s
    assert osts[1]["load_mib_s"] == 0.0 and osts[2]["load_mib_s"] == 0.0  # idle; a single sample
    oss = {o["id"]: o for o in view["oss"]}
    assert oss["oss0"]["fresh"] is True and 1.5 <= oss["oss0"]["age_s"] < 60
    assert oss["oss1"]["fresh"] is False and 999 <= oss["oss1"]["age_s"] < 1100  # 3 x 60 s long past
    assert view["qos"] == {"prio_free_pct": 90, "threshold_rr_pct": 17}


@pytest.mark.slow
def test_status_table_and_stale_rule(db: str, tmp_path: Path):
    fill_db(db)
    done = iez_cli("status", "--db", db, "--status-file", str(tmp_path / "none.json"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["OSS", "fresh", "age", "OSTs"]
    assert lines[1].split()[:2] == ["oss0", "yes"] and lines[2].split()[:2] == ["oss1", "NO"]
    rows = [line.split() for line in lines if line.strip().split(" ")[0].isdigit()]
    assert [(r[0], r[2], r[-1]) for r in rows] == [("0", "active", "flash"), ("1", "degraded", "flash"),
                                                   ("2", "inactive", "scratch")]
    assert "qos" not in done.stdout
    # twenty intervals of grace make the silent OSS fresh again
    wide = json.loads(iez_cli("status", "--db", db, "--json", "--stale-intervals", "20").stdout)
    assert all(o["fresh"] for o in wide["oss"])


def test_status_of_a_missing_db_is_one_line(tmp_path: Path):
    missing = tmp_path / "nowhere" / "iez.db"
    done = iez_cli("status", "--db", str(missing), "--json")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "iez db upgrade" in done.stderr
    assert not missing.parent.exists()  # reading never creates


@pytest.mark.slow
def test_status_of_an_empty_db_says_nobody_reported(db: str):
    done = iez_cli("status", "--db", db)
    assert done.returncode == 0 and "no OSS has reported yet" in done.stdout
    assert json.loads(iez_cli("status", "--db", db, "--json").stdout)["osts"] == []


def agent_message(oss: str, version: int, osts: dict[int, str]) -> dict:
    entries = []
    for index, state in osts.items():
        entry = {"name": f"fs-OST{index:04x}", "index": index, "kbytes_total": 1000, "kbytes_avail": 900}
        if version == 2:
            entry.update(state=state, degraded=state == "degraded", no_precreate=None, readonly=None)
        entries.append(entry)
    return {"schema": "iez.oss-stats", "version": version, "oss_id": oss, "seq": int(time.time() * 1000),
            "time": time.time(), "cpu_pct": 1.0, "mem_pct": 1.0, "osts": entries}


def test_api_osts_carry_state_pools_and_lustre_reserved_space(api):
    # indices far from the other API tests' OSTs: the server's DB is shared by the session
    assert api.post("/v1/stats", json=agent_message("policy-v2", 2, {65000: "degraded", 65001: "readonly"})
                    ).status_code == 201
    assert api.post("/v1/stats", json=agent_message("policy-v1", 1, {65002: "active"})).status_code == 201
    rows = {o["index"]: o for o in api.get("/v1/osts").json()["osts"] if o["index"] in (65000, 65001, 65002)}
    assert {i: (o["state"], o["pools"], o["reserved_kbytes"]) for i, o in rows.items()} == {
        65000: ("degraded", [], 0), 65001: ("readonly", [], 0), 65002: ("active", [], 0)}
    # a version-1 message with version-2 fields, and a version-2 message without a state, are refused
    mixed = agent_message("policy-v1", 1, {65003: "active"})
    mixed["osts"][0]["state"] = "degraded"
    assert api.post("/v1/stats", json=mixed).status_code == 422
    stateless = agent_message("policy-v2", 2, {65003: "active"})
    del stateless["osts"][0]["state"]
    answer = api.post("/v1/stats", json=stateless)
    assert answer.status_code == 422 and "state" in answer.text
