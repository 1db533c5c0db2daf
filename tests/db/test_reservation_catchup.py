"""Reservations end when the OSTs' reports show their bytes written, not only at the time-out."""

from __future__ import annotations

from sqlalchemy import func, select

from iez.config import database_url
from iez.placement import PlacementSettings, place_app
from iez.db.engine import make_engine, read, write_session
from iez.db.models import Reservation, utcnow
from iez.db.requests import RequestIn, upsert_requests
from iez.db.stats import OssReport, OstReport, ingest, reserved_bytes

import pytest

TOTAL_KB, AVAIL_KB = 10 * 1024 * 1024, 8 * 1024 * 1024


@pytest.fixture
def engine(db):
    engine = make_engine(database_url(db))
    yield engine
    engine.dispose()


def report(seq: int, avail_kb: dict[int, int]) -> OssReport:
    return OssReport("oss0", seq, utcnow(), 10.0, 10.0,
                     [OstReport(f"fs-OST{i:04x}", i, TOTAL_KB, avail_kb.get(i, AVAIL_KB)) for i in range(4)],
                     interval_s=1.0)


@pytest.mark.slow
def test_reports_showing_the_bytes_used_end_reservations_oldest_first(engine):
    with write_session(engine) as s:
        ingest(s, report(1, {}))
        upsert_requests(s, "app", [RequestIn(f"/l/f{i}", 4 * 2**20, 1, rank=i) for i in range(8)])
    placed = place_app(engine, "app", PlacementSettings(), stale_s=600, reservation_ttl_s=3600).placed
    assert len(placed) == 8
    held = read(engine, lambda c: reserved_bytes(c, utcnow()))
    assert sum(held.values()) == 8 * 4 * 2**20
    baselines = read(engine, lambda c: set(c.execute(select(Reservation.avail_kb_at)).scalars()))
    assert baselines == {AVAIL_KB}  # the reported free space each reservation was made against
    ost = placed[0].osts[0]
    per_ost = held[ost] // (4 * 2**20)
    # the OST shows one stripe written: exactly one reservation ends, the others still hold
    with write_session(engine) as s:
        ended = ingest(s, report(2, {ost: AVAIL_KB - 4 * 1024}))
    assert ended == 1
    after = read(engine, lambda c: reserved_bytes(c, utcnow()))
    assert after[ost] == (per_ost - 1) * 4 * 2**20
    # all of them written (and a little more): all end; other OSTs are untouched
    with write_session(engine) as s:
        ended = ingest(s, report(3, {ost: AVAIL_KB - per_ost * 4 * 1024 - 100}))
    assert ended == per_ost - 1
    final = read(engine, lambda c: reserved_bytes(c, utcnow()))
    assert ost not in final and sum(final.values()) == (8 - per_ost) * 4 * 2**20


@pytest.mark.slow
def test_space_freed_elsewhere_does_not_end_reservations(engine):
    with write_session(engine) as s:
        ingest(s, report(1, {}))
        upsert_requests(s, "app", [RequestIn("/l/one", 4 * 2**20, 1)])
    (placed,) = place_app(engine, "app", PlacementSettings(), stale_s=600, reservation_ttl_s=3600).placed
    with write_session(engine) as s:
        assert ingest(s, report(2, {placed.osts[0]: AVAIL_KB + 1024 * 1024})) == 0  # more free than before
    count = read(engine, lambda c: c.scalar(select(func.count()).select_from(Reservation)))
    assert count == 1
