"""``POST /v1/requests`` with a pool, a PFL template and shared files (rank -1), through the DB to the
allocation (``POST /v1/allocate``) and the lookups (``GET /v1/allocations?path=``, the batch lookup), on the
session's SQLite and MariaDB servers; bad templates are 422s naming the field."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import update

from iez.config import database_url
from iez.db.engine import make_engine, read, write_session
from iez.db.models import AllocationRow, OstRow

from test_api_contract import POLICY, agent_message, unique

MIB = 1 << 20
TEMPLATE = [{"end": 4 * MIB, "stripe_count": 1, "stripe_size": MIB}, {"end": -1, "stripe_count": 2}]
DEFAULT = "version=2 comp=0:4194304:1048576:1:-:pool=POOL comp=4194304:eof:-:2:-:pool=POOL"


@pytest.fixture
def pool(api, server) -> tuple[str, set[int]]:
    """A pool of its own: 4 of the 8 OSTs of a new OSS (pool membership is the MDS's to set: written here)."""
    name = "p" + uuid.uuid4().hex[:8]
    base = 1000 + int(uuid.uuid4().hex[:4], 16) % 50_000
    api.post("/v1/stats", json=agent_message(unique("oss"), range(base, base + 8))).raise_for_status()
    members = {base, base + 2, base + 4, base + 6}
    engine = make_engine(database_url(server.db))
    try:
        with write_session(engine) as session:
            session.execute(update(OstRow).where(OstRow.ost_index.in_(members)).values(pools=name))
    finally:
        engine.dispose()
    return name, members


def test_pool_template_and_shared_rank_round_trip_to_the_db(api):
    app = unique("pfl")
    default = DEFAULT.replace("POOL", "flash")
    posted = api.post("/v1/requests", json={"app": app, "requests": [
        {"file": f"/lustre/{app}/shared", "write_bytes": 64 * MIB, "stripe_count": 2, "rank": -1,
         "pool": "flash", "components": TEMPLATE, "default_layout": default},
        {"file": f"/lustre/{app}/plain", "write_bytes": MIB, "stripe_count": 1, "rank": 3}]})
    assert posted.status_code == 201, posted.text
    requests = {r["file"].rsplit("/", 1)[1]: r for r in api.get(f"/v1/apps/{app}").json()["requests"]}
    shared = requests["shared"]
    assert (shared["rank"], shared["pool"], shared["default_layout"]) == (-1, "flash", default)
    assert shared["components"] == TEMPLATE
    assert (requests["plain"]["pool"], requests["plain"]["components"], requests["plain"]["default_layout"]) == (
        None, None, None)


@pytest.mark.slow
def test_allocations_honour_the_pool_and_the_template(api, server, pool):
    name, members = pool
    app = unique("pfl")
    files = [f"/lustre/{app}/part.{i}" for i in range(3)]
    default = DEFAULT.replace("POOL", name)
    api.post("/v1/requests", json={"app": app, "requests": [
        {"file": f, "write_bytes": 64 * MIB, "stripe_count": 2, "rank": i, "pool": name,
         "components": [{**c, "pool": name} for c in TEMPLATE], "default_layout": default}
        for i, f in enumerate(files)] + [
        {"file": f"/lustre/{app}/pooled", "write_bytes": 8 * MIB, "stripe_count": 2, "rank": -1, "pool": name}]}
    ).raise_for_status()
    allocated = api.post("/v1/allocate", json={"app": app, "policy": POLICY})
    assert allocated.status_code == 200, allocated.text
    layouts = {a["file"]: a for a in allocated.json()["allocations"]}
    assert sorted(layouts) == sorted(files + [f"/lustre/{app}/pooled"])
    for f in files:
        a = layouts[f]
        assert a["pool"] == name and set(a["osts"]) <= members
        comps = a["components"]
        assert [(c["start"], c["end"], c["stripe_count"], len(c["osts"])) for c in comps] == [
            (0, 4 * MIB, 1, 1), (4 * MIB, -1, 2, 2)]  # 64 MiB reaches both components
        assert all(set(c["osts"]) <= members and len(set(c["osts"])) == len(c["osts"]) for c in comps)
        assert comps[0]["stripe_size"] == MIB and a["osts"] == comps[0]["osts"] + comps[1]["osts"]
        assert a["stripe_count"] == 3
        # the lookups answer the same, pool and components included
        one = api.get("/v1/allocations", params={"path": f})
        assert one.status_code == 200 and one.json() == a
    pooled = layouts[f"/lustre/{app}/pooled"]
    assert pooled["pool"] == name and "components" not in pooled and set(pooled["osts"]) <= members
    batch = api.post("/v1/allocations/lookup", json={"paths": files + [f"/lustre/{app}/pooled"]}).json()
    assert batch["allocations"] == [layouts[f] for f in files + [f"/lustre/{app}/pooled"]]
    summary = api.get(f"/v1/apps/{app}").json()
    assert summary["pending"] == 0
    shown = {r["file"]: r["allocation"] for r in summary["requests"]}
    assert all(shown[f]["components"] == layouts[f]["components"] and shown[f]["pool"] == name for f in files)
    # what the library reads: the layout text and the default the request was learnt under
    engine = make_engine(database_url(server.db))
    try:
        rows = read(engine, lambda conn: conn.execute(
            AllocationRow.__table__.select().where(AllocationRow.path.in_(files), AllocationRow.state != "stale")
        ).all())
    finally:
        engine.dispose()
    assert len(rows) == 3
    for row in rows:
        assert row.pool == name and row.default_layout == default
        assert row.layout.startswith("version=2 comp=0:4194304:1048576:1:") and f":pool={name}" in row.layout


@pytest.mark.slow
@pytest.mark.parametrize("change, field, message", [
    ({"pool": "no spaces"}, "requests[0].pool", "is not a Lustre pool name"),
    ({"pool": "x" * 16}, "requests[0].pool", "is not a Lustre pool name"),
    ({"components": []}, "requests[0].components", "at least 1 item"),
    ({"components": [{"stripe_count": 1}]}, "requests[0].components", "component 0: a component needs its end"),
    ({"components": [{"end": 1048576, "stripe_count": 1}]}, None, None),  # ends before EOF: accepted
    ({"components": [{"end": -1, "stripe_count": 1}, {"end": -1, "stripe_count": 2}]}, "requests[0].components",
     "component 1 follows one that runs to the end of the file"),
    ({"components": [{"end": 1048576, "stripe_count": 0}]}, "requests[0].components", "stripe_count=0"),
    ({"components": [{"end": -1, "stripe_count": 1, "colour": "red"}]}, "requests[0].components",
     "unknown component field 'colour'"),
    ({"components": [{"end": -1, "stripe_count": 1, "pool": "bad pool"}]}, "requests[0].components",
     "is not a Lustre pool name"),
    ({"components": ["end=-1"]}, "requests[0].components[0]", "valid dictionary"),
    ({"default_layout": "version=9"}, "requests[0].default_layout", "layout attribute"),
    ({"rank": -2}, "requests[0].rank", "greater than or equal to -1"),
])
def test_bad_policies_answer_422_naming_the_field(api, change, field, message):
    item = {"file": "/lustre/policy/f", "write_bytes": 1, "stripe_count": 1, "rank": 0, **change}
    answer = api.post("/v1/requests", json={"app": unique("bad"), "requests": [item]})
    if field is None:
        assert answer.status_code == 201, answer.text
        return
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["errors"][0]["field"] == field and message in body["errors"][0]["message"]
    assert body["detail"].startswith(field + ":")
