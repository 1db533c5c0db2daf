"""Allocation from the MDS's live view: concurrent triggers, congestion, and space held by reservations."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timezone

import pytest
from sqlalchemy import select

from conftest import BACKENDS, fresh_db
from iez.config import database_url
from iez.db.engine import make_engine, read, write_session
from iez.db.models import AllocationRow, Reservation, utcnow
from iez.db.requests import RequestIn, upsert_requests
from iez.db.stats import OssReport, OstReport, ingest, reserved_bytes
from iez.mds.resources import Usage
from iez.placement import PlacementSettings
from iez.mds.service import MdsConfig, MdsService

GiB = 2**30


class IdleNode:
    def sample(self) -> Usage:
        return Usage(1.0, 1.0)


def report(oss: str, seq: int, osts: range, avail_kb: int, written: dict[int, int] | None = None,
           t: float | None = None) -> OssReport:
    when = datetime.fromtimestamp(t, timezone.utc).replace(tzinfo=None) if t else utcnow()
    return OssReport(oss, seq, when, 5.0, 5.0,
                     [OstReport(f"fs-OST{i:04x}", i, 100 * 1024 * 1024, avail_kb, 0, (written or {}).get(i, 0))
                      for i in osts], interval_s=60.0)


def service(db: str, **placement) -> MdsService:
    engine = make_engine(database_url(db))
    svc = MdsService(engine, MdsConfig(poll_s=0.1, placement=PlacementSettings(**placement)), sampler=IdleNode())
    return svc


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_two_allocation_triggers_at_once_never_over_reserve_an_ost(backend, tmp_path):
    db = fresh_db(backend, tmp_path, "mdsrace")
    # two MDS loops (or an MDS and the API) on one DB; no fill cap, so the race is about free space alone
    first, second = service(db, fill_cap=1.0), service(db, fill_cap=1.0)
    reports = [report("oss0", 1, range(0, 3), 10 * 1024 * 1024), report("oss1", 1, range(3, 6), 10 * 1024 * 1024)]
    with write_session(first.engine) as s:
        for r in reports:
            ingest(s, r)
        # each app alone fits (6 x 4 GiB of 60 GiB); together they need more than there is
        upsert_requests(s, "a", [RequestIn(f"/l/a{i}", 8 * GiB, 2) for i in range(6)])
        upsert_requests(s, "b", [RequestIn(f"/l/b{i}", 8 * GiB, 2) for i in range(6)])
    for svc in (first, second):
        for r in reports:
            svc.view.apply(r)
    barrier = threading.Barrier(2)
    results = {}

    def run(svc, app):
        barrier.wait()
        results[app] = svc.allocate([app])

    threads = [threading.Thread(target=run, args=(first, "a")), threading.Thread(target=run, args=(second, "b"))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    # exactly one app fitted; the other's files were refused, not squeezed onto the same space
    assert sorted(results.values()) == [0, 6]
    assert first.counters.refused + second.counters.refused == 6
    held = read(first.engine, lambda c: reserved_bytes(c, utcnow()))
    assert all(b <= 10 * GiB for b in held.values())
    assert sum(held.values()) == 6 * 2 * 4 * GiB
    first.engine.dispose()
    second.engine.dispose()


def test_busy_osts_are_avoided_even_with_space_and_used_again_once_idle(tmp_path):
    db = fresh_db("sqlite", tmp_path, "mdsbusyost")
    svc = service(db)
    t0 = 1.8e9
    # four equal OSTs; OST 0 and 1 then see 500 MiB/s of writes from another job, OST 2 and 3 none
    steps = [(t0, {}), (t0 + 10, {0: 5000 * 2**20, 1: 5000 * 2**20})]
    for seq, (t, written) in enumerate(steps, start=1):
        r = report("oss0", seq, range(4), 50 * 1024 * 1024, written, t=t)
        svc.view.apply(r)
        with write_session(svc.engine) as s:
            ingest(s, r)
    assert svc.view.loads() == {0: 500 * 2**20, 1: 500 * 2**20, 2: 0.0, 3: 0.0}
    with write_session(svc.engine) as s:
        upsert_requests(s, "app", [RequestIn(f"/l/f{i}", 256 * 2**20, 1) for i in range(8)])
    assert svc.allocate(["app"]) == 8
    used = Counter(int(o) for (osts,) in read(svc.engine, lambda c: c.execute(select(AllocationRow.osts)).all())
                   for o in osts.split())
    assert set(used) == {2, 3}  # the busy OSTs have almost no bandwidth left for this job
    # the other job ends: the counters stop rising, and the next batch spreads over all four
    r = report("oss0", 3, range(4), 50 * 1024 * 1024, {0: 5000 * 2**20, 1: 5000 * 2**20}, t=t0 + 20)
    svc.view.apply(r)
    with write_session(svc.engine) as s:
        ingest(s, r)
        upsert_requests(s, "app2", [RequestIn(f"/l/g{i}", 256 * 2**20, 1) for i in range(8)])
    assert svc.allocate(["app2"]) == 8
    rows = read(svc.engine, lambda c: c.execute(select(AllocationRow.path, AllocationRow.osts)).all())
    spread = Counter(int(o) for path, osts in rows if path.startswith("/l/g") for o in osts.split())
    assert set(spread) == {0, 1, 2, 3}
    svc.engine.dispose()


def test_stale_osses_are_left_out_of_allocation(tmp_path):
    db = fresh_db("sqlite", tmp_path, "mdsstaleout")
    svc = service(db)
    import time

    now = time.time()
    svc.view.apply(report("fresh", 1, range(0, 2), 50 * 1024 * 1024), received=now)
    svc.view.apply(report("gone", 1, range(2, 4), 50 * 1024 * 1024), received=now - 1000)
    svc.view.refresh(now)
    with write_session(svc.engine) as s:
        for name, osts in (("fresh", range(0, 2)), ("gone", range(2, 4))):
            ingest(s, report(name, 1, osts, 50 * 1024 * 1024))
        upsert_requests(s, "app", [RequestIn(f"/l/f{i}", GiB, 1) for i in range(6)])
    assert svc.allocate(["app"]) == 6
    used = {int(o) for (osts,) in read(svc.engine, lambda c: c.execute(select(AllocationRow.osts)).all())
            for o in osts.split()}
    assert used == {0, 1}
    reservations = read(svc.engine, lambda c: c.execute(select(Reservation.ost_index)).scalars().all())
    assert set(reservations) == {0, 1}
    svc.engine.dispose()


def test_the_time_series_keeps_one_report_per_interval_and_the_live_rows_the_latest(tmp_path):
    import json as _json
    import time
    from sqlalchemy import func

    from iez.db.models import OssStat, OstRow, OstStat

    db = fresh_db("sqlite", tmp_path, "mdsseries")
    svc = MdsService(make_engine(database_url(db)), MdsConfig(series_interval_s=60.0), sampler=IdleNode())
    start = time.time() - 10  # five samples a second apart, none ahead of the MDS clock
    for seq in range(1, 6):
        frame = {"schema": "iez.oss-stats", "version": 1, "oss_id": "oss0", "seq": seq, "time": start + seq,
                 "cpu_pct": 1.0, "mem_pct": 1.0, "interval_s": 1.0,
                 "osts": [{"name": f"fs-OST{i:04x}", "index": i, "kbytes_total": 1000, "kbytes_avail": 900 - seq}
                          for i in range(3)]}
        assert svc.receive([_json.dumps(frame).encode()])
    svc.flush_and_wait()
    count = lambda model: read(svc.engine, lambda c: c.scalar(select(func.count()).select_from(model)))  # noqa: E731
    assert (count(OssStat), count(OstStat)) == (1, 3)  # five reports inside one 60 s series interval
    assert read(svc.engine, lambda c: set(c.execute(select(OstRow.kbytes_avail)).scalars())) == {895}
    assert svc.counters.stored == 5
    svc._stop_writer()
    svc.engine.dispose()
