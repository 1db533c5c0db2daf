"""``mirror_count`` on requests: posted to the API (real uvicorn, validated 1..4), stored (migration 0008),
placed as mirrors in separate OSSs and served by the lookups; learnt from traces of FLR files; replayed from
JSON by the simulator."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import update

from conftest import iez_cli
from iez.config import database_url
from iez.db.engine import make_engine, write_session
from iez.db.models import OstRow
from iez.layout.emulated import parse_attr
from iez.sim.workloads import load_requests
from iez.trace.csvformat import TRACE_COLUMNS
from iez.trace.parse import parse_dir

MIB = 1 << 20
GiB_KB = 1 << 20
POLICY = "iez"


def _stats(oss_id: str, indices) -> dict:
    return {"oss_id": oss_id, "seq": 1, "time": 1_700_000_000.5, "cpu_pct": 1.0, "mem_pct": 1.0,
            "osts": [{"name": f"fs-OST{i:04x}", "index": i, "kbytes_total": 10 * GiB_KB, "kbytes_avail": 8 * GiB_KB,
                      "read_bytes": 0, "write_bytes": 0} for i in indices]}


@pytest.mark.slow
def test_posted_mirror_count_is_stored_placed_in_two_osss_and_served(api, server):
    pool = "m" + uuid.uuid4().hex[:8]
    base = 60_000 + int(uuid.uuid4().hex[:4], 16) % 5_000
    servers = {}
    for k in range(2):
        oss = f"oss-{pool}-{k}"
        api.post("/v1/stats", json=_stats(oss, [base + 2 * k, base + 2 * k + 1])).raise_for_status()
        servers.update({base + 2 * k: oss, base + 2 * k + 1: oss})
    engine = make_engine(database_url(server.db))
    try:
        with write_session(engine) as session:
            session.execute(update(OstRow).where(OstRow.ost_index.in_(list(servers))).values(pools=pool))
    finally:
        engine.dispose()
    app = "mirrors-" + uuid.uuid4().hex[:8]
    files = [f"/lustre/{app}/f{i}" for i in range(3)]
    bad = api.post("/v1/requests", json={"app": app, "requests": [
        {"file": files[0], "write_bytes": MIB, "stripe_count": 1, "pool": pool, "mirror_count": 5}]})
    assert bad.status_code == 422 and "mirror_count" in bad.text
    posted = api.post("/v1/requests", json={"app": app, "requests": [
        {"file": f, "write_bytes": 8 * MIB, "stripe_count": 1, "rank": i, "pool": pool, "mirror_count": 2}
        for i, f in enumerate(files)]})
    assert posted.status_code == 201, posted.text
    allocated = api.post("/v1/allocate", json={"app": app, "policy": POLICY})
    assert allocated.status_code == 200, allocated.text
    answered = {a["file"]: a for a in allocated.json()["allocations"]}
    schema = api.get("/openapi.json").json()["components"]["schemas"]["Layout"]["properties"]
    assert {"mirrors", "preferred_mirror"} <= set(schema)  # the contract names what the answers carry
    for f in files:
        one = api.get("/v1/allocations", params={"path": f})
        assert one.status_code == 200, one.text
        got = one.json()
        # POST /v1/allocate answers each file's copies as the lookup serves them (issue 28: it dropped them)
        assert answered[f]["mirrors"] == got["mirrors"] and answered[f]["preferred_mirror"] == got["preferred_mirror"]
        mirrors = [[o for c in m for o in c["osts"]] for m in got["mirrors"]]
        assert len(mirrors) == 2 and got["osts"] == mirrors[0]
        assert servers[mirrors[0][0]] != servers[mirrors[1][0]]  # each copy on its own OSS
        assert got["preferred_mirror"] in (0, 1)


def test_a_trace_of_an_flr_file_is_learnt_with_its_mirror_count(tmp_path):
    layout = "version=3 mirror=1 comp=0:eof:1048576:1:4 mirror=2 comp=0:eof:1048576:1:9"
    mirrored_default = "version=3 mirror=1 comp=0:eof:-:2:- mirror=2 comp=0:eof:-:2:-"
    rows = [
        {"path": "/d/flr", "bytes_written": 4 * MIB, "file_size": 4 * MIB, "stripe_count": 1, "stripe_size": MIB,
         "rank": 0, "comm_size": 1, "open_time": "1700000000.25", "pid": 1, "host": "n1", "app": "a", "job": "1",
         "layout": layout, "dir_layout": ""},
        {"path": "/m/under-default", "bytes_written": MIB, "file_size": MIB, "stripe_count": 2, "stripe_size": MIB,
         "rank": 0, "comm_size": 1, "open_time": "1700000000.25", "pid": 1, "host": "n1", "app": "a", "job": "1",
         "layout": "", "dir_layout": mirrored_default},
        {"path": "/d/plain", "bytes_written": MIB, "file_size": MIB, "stripe_count": 1, "stripe_size": MIB,
         "rank": 0, "comm_size": 1, "open_time": "1700000000.25", "pid": 1, "host": "n1", "app": "a", "job": "1",
         "layout": "", "dir_layout": ""},
    ]
    with open(tmp_path / "iez-trace.a.csv", "w") as out:
        out.write(",".join(TRACE_COLUMNS) + "\n")
        for r in rows:
            out.write(",".join(str(r.get(c, "")) for c in TRACE_COLUMNS) + "\n")
    requests = {r.file: r for r in parse_dir(str(tmp_path)).requests}
    assert {f: r.mirror_count for f, r in requests.items()} == {"/d/flr": 2, "/m/under-default": 2, "/d/plain": 1}
    assert requests["/d/flr"].to_dict()["mirror_count"] == 2 and "mirror_count" not in requests["/d/plain"].to_dict()
    assert parse_attr(layout, "t").mirror_count == 2
    out = tmp_path / "requests.csv"
    done = iez_cli("trace", "parse", str(tmp_path), "--out", str(out))
    assert done.returncode == 0, done.stderr
    header, *lines = out.read_text().splitlines()
    assert header.endswith(",mirror_count") and {line.split(",")[0]: line.rsplit(",", 1)[1] for line in lines} == {
        "/d/flr": "2", "/m/under-default": "2", "/d/plain": "1"}
    # and the simulator replays it (CSV), as it replays JSON
    jobs = load_requests(out)
    assert sorted(r.mirror_count for job in jobs for r in job.requests) == [1, 2, 2]
    as_json = tmp_path / "requests.json"
    as_json.write_text(json.dumps([{"file": "/x", "write_bytes": MIB, "stripe_count": 1, "mirror_count": 3}]))
    assert [r.mirror_count for job in load_requests(as_json) for r in job.requests] == [3]


def test_an_applications_policy_asks_for_mirrors_at_trace_parse(tmp_path, db):
    row = {"path": "/d/a", "bytes_written": MIB, "file_size": MIB, "stripe_count": 1, "stripe_size": MIB, "rank": 0,
           "comm_size": 1, "open_time": "1700000000.25", "pid": 1, "host": "n1", "app": "a", "job": "1",
           "layout": "", "dir_layout": ""}
    with open(tmp_path / "iez-trace.a.csv", "w") as out:
        out.write(",".join(TRACE_COLUMNS) + "\n" + ",".join(str(row.get(c, "")) for c in TRACE_COLUMNS) + "\n")
    done = iez_cli("trace", "parse", str(tmp_path), "--mirror-count", "2", "--json", "--store", "--db", db,
                   "--app", "a")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["mirror_count"] == 2
    engine = make_engine(database_url(db))
    try:
        with engine.connect() as conn:
            assert conn.execute(__import__("sqlalchemy").text(
                "SELECT mirror_count FROM write_requests WHERE path = '/d/a'")).scalar() == 2
    finally:
        engine.dispose()
    bad = iez_cli("trace", "parse", str(tmp_path), "--mirror-count", "5")
    assert bad.returncode != 0 and "--mirror-count 5: give 1 to 4 copies" in bad.stderr
