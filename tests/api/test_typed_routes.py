"""Every route of the API declares what it answers (issue 28 item 5: typed response models): the OpenAPI
document gives each JSON route a schema, and the OST, OSS and application views are served through theirs
(a view that drifted from its model would answer 500)."""

from __future__ import annotations

import time

from iez.api.schemas import AppOut, OssOut, OstOut


def test_every_json_route_has_a_response_schema(api):
    spec = api.get("/openapi.json").json()
    untyped = []
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            ok = op.get("responses", {}).get("200") or op.get("responses", {}).get("201") or {}
            content = ok.get("content", {}).get("application/json")
            if content is not None and not content.get("schema"):
                untyped.append(f"{method.upper()} {path}")
    assert not untyped, f"routes answering JSON without a schema: {untyped}"
    for name in ("OstsOut", "OssListOut", "AppOut"):
        assert name in spec["components"]["schemas"], name


def test_the_ost_oss_and_app_views_carry_exactly_their_models_fields(api):
    report = {"oss_id": "oss-typed", "seq": int(time.time() * 1000), "time": time.time(), "cpu_pct": 3.0,
              "mem_pct": 4.0, "osts": [{"name": "fs-OST0bee", "index": 3054, "kbytes_total": 1 << 30,
                                        "kbytes_avail": 1 << 29}]}
    assert api.post("/v1/stats", json=report).status_code < 300
    osts = api.get("/v1/osts")
    assert osts.status_code == 200, osts.text
    ost = next(o for o in osts.json()["osts"] if o["index"] == 3054)
    assert set(ost) == set(OstOut.model_fields) and ost["oss_id"] == "oss-typed"
    oss = next(o for o in api.get("/v1/oss").json()["oss"] if o["oss_id"] == "oss-typed")
    assert set(oss) == set(OssOut.model_fields) and oss["osts"] == 1 and oss["stale"] is False
    stored = api.post("/v1/requests", json={"app": "typed-app", "requests": [
        {"file": "/lustre/typed/out.0", "write_bytes": 1 << 20, "stripe_count": 1, "rank": 0}]})
    assert stored.status_code < 300, stored.text
    app = api.get("/v1/apps/typed-app")
    assert app.status_code == 200, app.text
    assert set(app.json()) == set(AppOut.model_fields) and app.json()["pending"] == 1
