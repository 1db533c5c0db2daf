"""One staleness rule (iez.freshness) for the MDS's view, the REST API and ``iez status``: an OSS is fresh while
its last report is at most 3 of its own report intervals old (60 s when its reports give none) plus a 10 s margin."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from conftest import Server, iez_cli
from iez.config import database_url
from iez.db.engine import make_engine
from iez.db.ingest import store_batch
from iez.db.models import utcnow
from iez.db.stats import OssReport, OstReport
from iez.freshness import StaleRule
from iez.mds.view import ClusterView

pytestmark = pytest.mark.slow

# (report interval the OSS's messages give, seconds since its last report, fresh by the rule)
CASES = {
    "fast-silent": (10.0, 45.0, False),  # 4.5 of its 10 s intervals: stale long before the old API's 180 s
    "fast-ok": (10.0, 20.0, True),
    "slow-ok": (300.0, 400.0, True),  # 1.3 of its 5 min intervals: fresh although past 180 s
    "slow-silent": (300.0, 1000.0, False),
    "unknown-ok": (None, 150.0, True),  # no interval in its messages: 3 x 60 s
    "unknown-silent": (None, 220.0, False),
}


def test_rule_limits():
    rule = StaleRule()
    # 3 of its intervals plus a 10 s margin: a report in flight (batched by the MDS up to 5 s) is not stale
    assert rule.limit_s(10) == 40 and rule.limit_s(None) == 190 and rule.limit_s(0) == 190
    assert rule.fresh(40, 10) and not rule.fresh(40.001, 10)
    assert StaleRule(margin_s=0).limit_s(10) == 30
    with pytest.raises(ValueError):
        StaleRule(0)


def fill(db: str) -> None:
    engine = make_engine(database_url(db))
    now = utcnow()
    batch = []
    for index, (oss, (interval, age, _)) in enumerate(CASES.items()):
        when = now - timedelta(seconds=age)
        batch.append((OssReport(oss, 1, when, 1.0, 1.0, [OstReport(f"fs-OST{index:04x}", index, 1000, 900)],
                                interval), when))
    store_batch(engine, batch, {})
    engine.dispose()


def test_mds_api_and_status_agree(db: str):
    fill(db)
    expected = {oss: fresh for oss, (_, _, fresh) in CASES.items()}

    engine = make_engine(database_url(db))
    try:
        view = ClusterView.from_db(engine, default_interval_s=60.0, stale_intervals=3)
    finally:
        engine.dispose()
    assert {oss: oss in view.fresh() for oss in CASES} == expected

    status = json.loads(iez_cli("status", "--db", db, "--json").stdout)
    assert {o["id"]: o["fresh"] for o in status["oss"]} == expected

    server = Server(db)
    try:
        with server.client() as client:
            rows = client.get("/v1/oss").json()["oss"]
            metrics = client.get("/metrics").text
    finally:
        server.stop()
    assert {o["oss_id"]: not o["stale"] for o in rows} == expected
    stale_line = next(line for line in metrics.splitlines() if line.startswith("iez_stale_oss"))
    assert float(stale_line.split()[-1]) == sum(not fresh for fresh in expected.values())
