"""Requests, allocation and lookups on the real databases (SQLite file and MariaDB)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select, text, update
from sqlalchemy.orm import Session

from iez.config import database_url
from iez.db.allocations import lookup, lookup_many, pin
from iez.placement import PlacementSettings, place_app
from iez.db.engine import make_engine, read, write_session
from iez.db.models import STALE, AllocationRow, OssRow, Reservation, WriteRequestRow, utcnow
from iez.db.requests import NotFound, RequestIn, upsert_requests
from iez.db.stats import OssReport, OstReport, record, usable_cluster

GiB_KB = 1024 * 1024  # KiB in a GiB


@pytest.fixture
def engine(db):
    engine = make_engine(database_url(db))
    yield engine
    engine.dispose()


def report(oss_id: str, osts: range, avail_kb: int = 8 * GiB_KB, total_kb: int = 10 * GiB_KB) -> OssReport:
    return OssReport(oss_id, 1, utcnow(), 20.0, 30.0,
                     [OstReport(f"fs-OST{i:04x}", i, total_kb, avail_kb) for i in osts])


def cluster_of(engine, *reports: OssReport) -> None:
    with write_session(engine) as session:
        for r in reports:
            record(session, r)


def requests(n: int, size: int = 2**30, count: int = 4, prefix: str = "/lustre/job") -> list[RequestIn]:
    return [RequestIn(f"{prefix}/out.{i}", size, count, rank=i) for i in range(n)]


@pytest.mark.slow
def test_posting_the_same_app_and_file_again_updates_the_row(engine):
    with write_session(engine) as s:
        first = upsert_requests(s, "ior", requests(3))
    with write_session(engine) as s:
        again = upsert_requests(s, "ior", [RequestIn("/lustre/job/out.1", 5 * 2**30, 8, rank=1)])
    assert again == [first[1]]
    with Session(engine) as s:
        assert s.scalar(select(func.count()).select_from(WriteRequestRow)) == 3
        row = s.get(WriteRequestRow, first[1])
        assert (row.write_bytes, row.stripe_count) == (5 * 2**30, 8)


@pytest.mark.slow
def test_allocate_stores_allocations_and_reservations_for_pending_requests(engine):
    cluster_of(engine, report("oss0", range(0, 5)), report("oss1", range(5, 10)))
    with write_session(engine) as s:
        upsert_requests(s, "ior", requests(4))
    placed = place_app(engine, "ior", PlacementSettings(), stale_s=600, reservation_ttl_s=3600).placed
    assert [a.file for a in placed] == [f"/lustre/job/out.{i}" for i in range(4)]
    assert all(a.stripe_count == 4 and len(set(a.osts)) == 4 for a in placed)
    with Session(engine) as s:
        assert s.scalar(select(func.count()).select_from(AllocationRow)) == 4
        reserved = s.scalar(select(func.sum(Reservation.bytes)))
        assert reserved == sum(a.stripe_size * a.stripe_count for a in placed)
    layout = read(engine, lambda c: lookup(c, "/lustre/job/out.2"))
    assert layout == {"file": "/lustre/job/out.2", "stripe_size": placed[2].stripe_size,
                      "stripe_count": 4, "osts": list(placed[2].osts)}
    # nothing pending any more: a second call places nothing
    assert place_app(engine, "ior", PlacementSettings(), 600, 3600).placed == []


@pytest.mark.slow
def test_a_changed_request_loses_its_allocation_and_is_placed_again(engine):
    cluster_of(engine, report("oss0", range(0, 8)))
    with write_session(engine) as s:
        upsert_requests(s, "hacc", requests(2))
    place_app(engine, "hacc", PlacementSettings(), 600, 3600).placed
    with write_session(engine) as s:
        upsert_requests(s, "hacc", [RequestIn("/lustre/job/out.0", 2**30, 2, rank=0)])
    with Session(engine) as s:
        assert s.scalar(select(func.count()).select_from(AllocationRow).where(AllocationRow.state == STALE)) == 1
    again = place_app(engine, "hacc", PlacementSettings(), 600, 3600).placed
    assert [(a.file, a.stripe_count) for a in again] == [("/lustre/job/out.0", 2)]
    assert read(engine, lambda c: lookup(c, "/lustre/job/out.0"))["stripe_count"] == 2


@pytest.mark.slow
def test_requests_that_do_not_fit_are_refused_with_their_reason_and_store_no_allocation(engine):
    cluster_of(engine, report("oss0", range(0, 4), avail_kb=1024, total_kb=2048))  # 1 MiB free per OST
    with write_session(engine) as s:
        upsert_requests(s, "big", requests(2, size=10 * 2**30))
    done = place_app(engine, "big", PlacementSettings(), 600, 3600)
    assert done.placed == [] and [f for f, _ in done.refused] == ["/lustre/job/out.0", "/lustre/job/out.1"]
    assert all("fill cap" in why for _, why in done.refused)
    with Session(engine) as s:
        assert [r.refusal is not None for r in s.scalars(select(WriteRequestRow))] == [True, True]
        assert s.scalar(select(func.count()).select_from(AllocationRow)) == 0
        assert s.scalar(select(func.count()).select_from(Reservation)) == 0


def test_unknown_application_is_named(engine):
    with pytest.raises(NotFound, match="nope"):
        place_app(engine, "nope", PlacementSettings(), 600, 3600)


@pytest.mark.slow
def test_reservations_shrink_the_space_the_next_allocation_sees(engine):
    cluster_of(engine, report("oss0", range(0, 4), avail_kb=GiB_KB, total_kb=2 * GiB_KB))
    with write_session(engine) as s:
        upsert_requests(s, "a", [RequestIn("/lustre/a", 2 * 2**30, 4)])  # 512 MiB on each OST
    placed = place_app(engine, "a", PlacementSettings(), 600, 3600).placed
    with Session(engine) as s:
        cluster = usable_cluster(s, utcnow(), 600)
    assert {o.index: o.kbytes_avail for o in cluster.osts} == {
        i: GiB_KB - placed[0].stripe_size // 1024 for i in range(4)}
    # expired reservations no longer count
    with write_session(engine) as s:
        s.execute(update(Reservation).values(expires=utcnow() - timedelta(seconds=1)))
    with Session(engine) as s:
        assert all(o.kbytes_avail == GiB_KB for o in usable_cluster(s, utcnow(), 600).osts)


def test_osts_of_a_stale_oss_are_left_out(engine):
    cluster_of(engine, report("fresh", range(0, 3)), report("silent", range(3, 6)))
    with write_session(engine) as s:
        s.execute(update(OssRow).where(OssRow.oss_id == "silent").values(received=utcnow() - timedelta(hours=1)))
    with Session(engine) as s:
        assert [o.index for o in usable_cluster(s, utcnow(), 180).osts] == [0, 1, 2]


def test_statistics_are_kept_as_a_time_series_and_the_latest_wins(engine):
    cluster_of(engine, report("oss0", range(0, 2), avail_kb=5 * GiB_KB))
    cluster_of(engine, report("oss0", range(0, 2), avail_kb=4 * GiB_KB))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM ost_stats")).scalar() == 4
        assert conn.execute(text("SELECT COUNT(*) FROM oss_stats")).scalar() == 2
        assert conn.execute(text("SELECT kbytes_avail FROM osts WHERE ost_index = 1")).scalar() == 4 * GiB_KB


def test_a_pinned_layout_replaces_the_live_one(engine):
    pin(engine, "/lustre/x", 1048576, [3, 7, 11])
    pin(engine, "/lustre/x", 2097152, [1, 2])
    assert read(engine, lambda c: lookup(c, "/lustre/x")) == {
        "file": "/lustre/x", "stripe_size": 2097152, "stripe_count": 2, "osts": [1, 2]}
    with Session(engine) as s:
        states = s.scalars(select(AllocationRow.state).order_by(AllocationRow.id)).all()
    assert states == ["stale", "planned"]


@pytest.mark.slow
@pytest.mark.parametrize("path, size, osts, named", [
    ("relative/x", 65536, [1], "absolute"),
    ("/x", 1000, [1], "stripe size"),
    ("/x", 65536, [1, 1], "twice"),
    ("/x", 65536, [-2], ">= 0"),
    ("/" + "a" * 4096, 65536, [1], "4096"),
])
def test_a_bad_pinned_layout_is_refused_with_the_reason(engine, path, size, osts, named):
    with pytest.raises(ValueError, match=named):
        pin(engine, path, size, osts)


@pytest.mark.slow
def test_batch_lookup_finds_live_layouts_and_skips_unknown_paths(engine):
    for i in range(1200):  # more than one IN (...) chunk
        pin(engine, f"/lustre/b/{i}", 65536, [i % 7]) if i % 100 == 0 else None
    paths = [f"/lustre/b/{i}" for i in range(1200)]
    found = read(engine, lambda c: lookup_many(c, paths))
    assert sorted(found) == sorted(f"/lustre/b/{i}" for i in range(0, 1200, 100))
    assert found["/lustre/b/300"]["osts"] == [300 % 7]
