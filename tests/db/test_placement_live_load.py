"""Placement from the DB (the API's allocate, without the MDS's in-memory view) sees the live load the MDS
stored with each OST, as iez status shows it: a busy OST gets less of a job."""

from __future__ import annotations

import pytest

from iez.config import database_url
from iez.db.engine import make_engine, write_session
from iez.db.ingest import store_batch
from iez.db.models import utcnow
from iez.db.requests import RequestIn, upsert_requests
from iez.db.stats import OssReport, OstReport, ost_loads
from iez.placement import PlacementSettings, place_app

MiB = 1 << 20


@pytest.fixture
def engine(db):
    engine = make_engine(database_url(db))
    yield engine
    engine.dispose()


def test_an_ost_the_mds_saw_busy_gets_fewer_stripes_when_placing_from_the_db(engine):
    osts = [OstReport(f"fs-OST{i:04x}", i, 10 << 20, 8 << 20, 0, 0) for i in range(4)]
    report = OssReport("oss0", 1, utcnow(), 5.0, 5.0, osts, interval_s=1.0)
    # OST 0 serves 190 of its 200 MiB/s to other jobs, as the MDS computed from the counters
    store_batch(engine, [(report, utcnow())], None, {0: 190.0 * MiB, 1: 0.0, 2: 0.0, 3: 0.0})
    with write_session(engine) as s:
        assert ost_loads(s) == {0: 190.0 * MiB, 1: 0.0, 2: 0.0, 3: 0.0}
        upsert_requests(s, "app", [RequestIn(f"/l/f{i}", 64 * MiB, 1, rank=i) for i in range(6)])
    placed = place_app(engine, "app", PlacementSettings(), stale_s=600, reservation_ttl_s=3600).placed
    used = [ost for a in placed for ost in a.osts]
    assert len(used) == 6 and 0 not in used, used  # 10 MiB/s left there: the other three finish sooner
