"""The REST API over real HTTP, on a server backed by SQLite and one backed by MariaDB."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from conftest import Server, fresh_db, run_iez

pytestmark = pytest.mark.slow

POLICY = os.environ.get("IEZ_TEST_POLICY", "iez")
GiB_KB = 1024 * 1024


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def agent_message(oss_id: str, indices, avail_kb=8 * GiB_KB, total_kb=10 * GiB_KB, seq=1) -> dict:
    return {
        "oss_id": oss_id, "seq": seq, "time": 1_700_000_000.5, "cpu_pct": 12.5, "mem_pct": 40.0,
        "osts": [{"name": f"fs-OST{i:04x}", "index": i, "kbytes_total": total_kb, "kbytes_avail": avail_kb,
                  "read_bytes": 10, "write_bytes": 20} for i in indices],
    }


def test_healthz_docs_and_openapi_are_served(api):
    assert api.get("/healthz").json()["status"] == "ok"
    assert api.get("/docs").status_code == 200
    paths = api.get("/openapi.json").json()["paths"]
    for path in ("/v1/stats", "/v1/requests", "/v1/allocate", "/v1/allocations", "/v1/allocations/lookup",
                 "/v1/osts", "/v1/oss", "/v1/apps/{name}", "/healthz", "/metrics"):
        assert path in paths


def test_agent_statistics_show_up_in_osts_and_oss(api):
    oss = unique("oss")
    answer = api.post("/v1/stats", json=agent_message(oss, [900, 901]))
    assert answer.status_code == 201 and answer.json() == {"oss_id": oss, "osts": 2}
    osts = {o["index"]: o for o in api.get("/v1/osts").json()["osts"]}
    assert osts[901]["name"] == "fs-OST0385" and osts[901]["oss_id"] == oss
    assert osts[901]["kbytes_avail"] == 8 * GiB_KB
    listed = {o["oss_id"]: o for o in api.get("/v1/oss").json()["oss"]}
    assert listed[oss]["cpu_pct"] == 12.5 and listed[oss]["stale"] is False and listed[oss]["osts"] == 2


def test_requests_then_allocate_then_lookup(api, server):
    app = unique("ior")
    api.post("/v1/stats", json=agent_message(unique("oss"), range(0, 8)))
    files = [f"/lustre/{app}/out.{i}" for i in range(4)]
    posted = api.post("/v1/requests", json={"app": app, "requests": [
        {"file": f, "write_bytes": 2**30, "stripe_count": 2, "rank": i} for i, f in enumerate(files)]})
    assert posted.status_code == 201
    ids = posted.json()["ids"]
    assert len(ids) == 4 and len(set(ids)) == 4

    allocated = api.post("/v1/allocate", json={"app": app, "policy": POLICY})
    assert allocated.status_code == 200, allocated.text
    layouts = allocated.json()["allocations"]
    assert [a["file"] for a in layouts] == files
    for layout in layouts:
        assert set(layout) == {"file", "stripe_size", "stripe_count", "osts"}
        assert layout["stripe_count"] == 2 == len(set(layout["osts"]))
        assert layout["stripe_size"] % 65536 == 0

    one = api.get("/v1/allocations", params={"path": files[1]})
    assert one.status_code == 200 and one.json() == layouts[1]
    batch = api.post("/v1/allocations/lookup", json={"paths": files + ["/lustre/none"]}).json()
    assert batch["allocations"] == layouts and batch["missing"] == ["/lustre/none"]

    summary = api.get(f"/v1/apps/{app}").json()
    assert summary["pending"] == 0 and len(summary["requests"]) == 4
    assert summary["requests"][0]["allocation"]["osts"] == layouts[0]["osts"]
    # the same CLI sees what the API stored
    shown = run_iez("alloc", "show", "--db", server.db, "--file", files[0], "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout) == layouts[0]


def test_a_stored_request_that_no_longer_reads_is_refused_alone(api, server):
    """Issue 28: one unparseable stored request (a template an older release stored, a hand-edited row) made
    POST /v1/allocate answer 500 for the whole application; it is refused alone, naming why, the rest placed."""
    from sqlalchemy import text

    from iez.config import database_url
    from iez.db.engine import make_engine

    app = unique("legacy")
    api.post("/v1/stats", json=agent_message(unique("oss"), range(0, 8)))
    files = [f"/lustre/{app}/out.{i}" for i in range(3)]
    posted = api.post("/v1/requests", json={"app": app, "requests": [
        {"file": f, "write_bytes": 2**20, "stripe_count": 1, "rank": i} for i, f in enumerate(files)]})
    assert posted.status_code == 201
    engine = make_engine(database_url(server.db))
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE write_requests SET components = :c WHERE path = :p"),
                         {"c": '[{"end": "nowhere"', "p": files[1]})
    finally:
        engine.dispose()
    allocated = api.post("/v1/allocate", json={"app": app, "policy": POLICY})
    assert allocated.status_code == 200, allocated.text
    assert [a["file"] for a in allocated.json()["allocations"]] == [files[0], files[2]]
    [refused] = allocated.json()["refused"]
    assert refused["file"] == files[1] and "stored request cannot be read" in refused["reason"], refused


def test_posting_the_same_app_and_file_again_updates_instead_of_duplicating(api):
    app = unique("hacc")
    body = {"app": app, "requests": [{"file": f"/lustre/{app}/p", "write_bytes": 100, "stripe_count": 1, "rank": 0}]}
    first = api.post("/v1/requests", json=body).json()["ids"]
    body["requests"][0]["write_bytes"] = 200
    assert api.post("/v1/requests", json=body).json()["ids"] == first
    requests = api.get(f"/v1/apps/{app}").json()["requests"]
    assert len(requests) == 1 and requests[0]["write_bytes"] == 200


def test_unknown_things_answer_404_in_json(api):
    missing = api.get("/v1/allocations", params={"path": "/lustre/never/written"})
    assert missing.status_code == 404
    assert missing.json() == {"detail": "no allocation for /lustre/never/written"}
    assert api.get("/v1/apps/" + unique("ghost")).status_code == 404
    gone = api.post("/v1/allocate", json={"app": unique("ghost")})
    assert gone.status_code == 404 and "no application named" in gone.json()["detail"]


def test_requests_that_do_not_fit_answer_409_and_store_nothing(api):
    app = unique("huge")
    api.post("/v1/requests", json={"app": app, "requests": [
        {"file": f"/lustre/{app}/x", "write_bytes": 2**55, "stripe_count": 1, "rank": 0}]})
    answer = api.post("/v1/allocate", json={"app": app, "policy": POLICY})
    assert answer.status_code == 409 and f"/lustre/{app}/x" in answer.json()["detail"]
    assert api.get(f"/v1/apps/{app}").json()["pending"] == 1


@pytest.mark.parametrize("request_item, field", [
    ({"file": "relative/path", "write_bytes": 1, "stripe_count": 1, "rank": 0}, "requests[0].file"),
    ({"file": "/" + "x" * 4096, "write_bytes": 1, "stripe_count": 1, "rank": 0}, "requests[0].file"),
    ({"file": "/ok", "write_bytes": -1, "stripe_count": 1, "rank": 0}, "requests[0].write_bytes"),
    ({"file": "/ok", "write_bytes": 2**63, "stripe_count": 1, "rank": 0}, "requests[0].write_bytes"),
    ({"file": "/ok", "write_bytes": 2**55 + 1, "stripe_count": 1, "rank": 0}, "requests[0].write_bytes"),
    ({"file": "/ok", "write_bytes": 1, "stripe_count": 0, "rank": 0}, "requests[0].stripe_count"),
    ({"file": "/ok", "write_bytes": 1, "stripe_count": 2001, "rank": 0}, "requests[0].stripe_count"),
    ({"file": "/ok", "write_bytes": 1, "stripe_count": -2, "rank": 0}, "requests[0].stripe_count"),
    ({"file": "/ok", "write_bytes": 1, "stripe_count": 1, "rank": -2}, "requests[0].rank"),  # -1: shared
    ({"write_bytes": 1, "stripe_count": 1, "rank": 0}, "requests[0].file"),
])
def test_invalid_requests_answer_422_naming_the_field(api, request_item, field):
    answer = api.post("/v1/requests", json={"app": "v", "requests": [request_item]})
    assert answer.status_code == 422
    body = answer.json()
    assert body["errors"][0]["field"] == field
    assert body["detail"].startswith(field + ":")


def test_limits_themselves_are_accepted(api):
    path = "/" + "p" * 4095  # 4096 bytes exactly
    answer = api.post("/v1/requests", json={"app": unique("lim"), "requests": [
        {"file": path, "write_bytes": 2**55, "stripe_count": 2000, "rank": 0},
        {"file": "/lustre/all", "write_bytes": 0, "stripe_count": -1, "rank": 2**31 - 1}]})
    assert answer.status_code == 201, answer.text
    assert api.get("/v1/allocations", params={"path": path}).status_code == 404


def test_broken_json_and_bad_stats_are_named(api):
    broken = api.post("/v1/requests", content=b"{not json", headers={"Content-Type": "application/json"})
    assert broken.status_code == 422 and broken.json()["errors"][0]["field"] == "body"
    bad = agent_message("o", [1])
    bad["osts"][0]["kbytes_avail"] = bad["osts"][0]["kbytes_total"] + 1
    answer = api.post("/v1/stats", json=bad)
    assert answer.status_code == 422 and "kbytes_avail" in answer.json()["detail"]
    bad = agent_message("o", [1])
    bad["cpu_pct"] = 130
    assert api.post("/v1/stats", json=bad).json()["errors"][0]["field"] == "cpu_pct"
    relative = api.get("/v1/allocations", params={"path": "x"})
    assert relative.status_code == 422 and relative.json()["errors"][0]["field"] == "path"
    policy = api.post("/v1/allocate", json={"app": "a", "policy": "best"})
    assert policy.status_code == 422 and policy.json()["errors"][0]["field"] == "policy"


def test_writes_need_the_bearer_token(server):
    body = {"app": "auth", "requests": []}
    with server.client(token=None) as anonymous:
        missing = anonymous.post("/v1/requests", json=body)
        assert missing.status_code == 401 and "Bearer" in missing.json()["detail"]
        assert missing.headers["www-authenticate"] == "Bearer"
        assert anonymous.get("/v1/osts").status_code == 200  # reads are open by default
    with server.client(token="wrong") as intruder:
        wrong = intruder.post("/v1/stats", json=agent_message("x", [1]))
        assert wrong.status_code == 403 and wrong.json() == {"detail": "invalid bearer token"}
    with server.client() as writer:
        assert writer.post("/v1/requests", json=body).status_code == 201


def test_metrics_count_requests_latencies_allocations_and_stale_oss(api):
    api.get("/v1/allocations", params={"path": "/lustre/metrics/probe"})
    text = api.get("/metrics").text
    assert 'iez_http_requests_total{method="GET",route="/v1/allocations",status="404"}' in text
    assert "iez_http_request_duration_seconds_bucket" in text
    assert "iez_allocations_total" in text or "iez_allocation_failures_total" in text
    assert "\niez_stale_oss " in text


@pytest.mark.parametrize("backend", ["sqlite"])
def test_closed_reads_need_the_token_and_no_token_means_no_writes(backend, tmp_path):
    db = fresh_db(backend, tmp_path, "closed")
    srv = Server(db, env={"IEZ_API_READS": "token"})
    try:
        with srv.client(token=None) as anonymous:
            assert anonymous.get("/v1/osts").status_code == 401
            assert anonymous.get("/v1/allocations", params={"path": "/x"}).status_code == 401
            assert anonymous.post("/v1/allocations/lookup", json={"paths": ["/x"]}).status_code == 401
            assert anonymous.get("/healthz").status_code == 200
        with srv.client(token="wrong") as intruder:
            assert intruder.get("/v1/allocations", params={"path": "/x"}).status_code == 403
        with srv.client() as reader:
            assert reader.get("/v1/osts").status_code == 200
            assert reader.get("/v1/allocations", params={"path": "/x"}).status_code == 404
    finally:
        srv.stop()
    srv = Server(db, env={"IEZ_API_TOKEN": ""})
    try:
        with srv.client(token="anything") as client:
            refused = client.post("/v1/requests", json={"app": "a", "requests": []})
            assert refused.status_code == 403 and "IEZ_API_TOKEN" in refused.json()["detail"]
    finally:
        srv.stop()


def test_api_refuses_to_start_on_an_out_of_date_schema(tmp_path, backend):
    db = fresh_db(backend, tmp_path, "stale", migrate=False)
    if backend == "sqlite":
        db = str(tmp_path / "stale.db")
        run_iez("db", "upgrade", "--db", db, "--revision", "base")  # an empty, schema-less database
    done = run_iez("api", "--db", db, "--port", "1")
    assert done.returncode == 1
    assert "iez db upgrade --db" in done.stderr and "Traceback" not in done.stderr


def test_batch_lookup_with_a_bad_path_is_refused_naming_it(api):
    answer = api.post("/v1/allocations/lookup", json={"paths": ["/ok", "relative"]})
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "paths[1]"
    extra = api.post("/v1/allocations/lookup", json={"paths": ["/ok"], "limit": 3})
    assert extra.status_code == 422 and extra.json()["errors"][0]["field"] == "limit"


def test_lookup_answers_reflect_new_allocations_at_once(api):
    app = unique("fresh")
    api.post("/v1/stats", json=agent_message(unique("oss"), range(100, 104)))
    path = f"/lustre/{app}/f"
    assert api.get("/v1/allocations", params={"path": path}).status_code == 404
    api.post("/v1/requests", json={"app": app, "requests": [
        {"file": path, "write_bytes": 2**20, "stripe_count": 1, "rank": 0}]}).raise_for_status()
    api.post("/v1/allocate", json={"app": app, "policy": POLICY}).raise_for_status()
    assert api.get("/v1/allocations", params={"path": path}).status_code == 200
    assert api.post("/v1/allocations/lookup", json={"paths": [path]}).json()["missing"] == []
