"""Split brain cannot double-allocate (issue 25, item 2): allocations are fenced on the lease's generation.

An MDS paused longer than its lease (SIGSTOP here; a frozen VM or a partition on a site) is taken over by a
standby; when it runs again it may reach its allocation pass before its heartbeat notices. The pass's own
transaction checks the lease generation first (:meth:`iez.mds.lease.MdsLease.fence`), so it is refused, stores
nothing, and the MDS stops. Real DBs (SQLite file, MariaDB), real ``iez mds`` processes.
"""

from __future__ import annotations

import signal
import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from conftest import BACKENDS, fresh_db
from iez.config import database_url
from iez.db.engine import make_engine, write_transaction
from iez.db.models import AllocationRow, MdsLeaseRow, utcnow
from iez.db.requests import RequestIn, upsert_requests
from iez.db.stats import OssReport, OstReport, record
from iez.mds.lease import LeaseLost, MdsLease
from iez.placement import PlacementSettings, place_app
from mds_helpers import Publisher, mds_factory, stats  # noqa: F401 (mds_factory is a fixture)
from test_mds_lease import INTERVAL, STALE_INTERVALS, standbys, status_pid, wait_for  # noqa: F401 (a fixture)
from test_mds_service import add_requests, connect

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

GiB_KB = 1 << 20


def allocations(db: str) -> list[tuple[int, str]]:
    engine = make_engine(database_url(db))
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(select(AllocationRow.request_id, AllocationRow.path))]
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_allocation_with_a_superseded_lease_generation_is_refused_in_its_transaction(backend, tmp_path):
    db = fresh_db(backend, tmp_path, "fence")
    engine = make_engine(database_url(db))
    try:
        old, new = MdsLease(engine, INTERVAL), MdsLease(engine, INTERVAL)
        assert old.claim() is None

        def setup(session) -> None:
            record(session, OssReport("oss0", 1, utcnow(), 5.0, 5.0,
                                      [OstReport(f"fs-OST{i:04x}", i, 10 * GiB_KB, 8 * GiB_KB) for i in range(4)]))
            upsert_requests(session, "job", [RequestIn(f"/lustre/job/{i}", 1 << 30, 2, rank=i) for i in range(4)])

        write_transaction(engine, setup)
        with engine.begin() as conn:  # the holder went silent past its lease
            conn.execute(update(MdsLeaseRow).values(expires=utcnow() - timedelta(seconds=1)))
        assert new.claim() is None and new.generation == old.generation + 1
        with pytest.raises(LeaseLost, match=f"lease \\(generation {old.generation}\\) is no longer the current one"):
            place_app(engine, "job", PlacementSettings(), 600, 3600, fence=old.fence)
        assert old.lost is not None and old.lost.generation == new.generation and not old.held
        assert allocations(db) == []  # the refused transaction stored nothing
        assert len(place_app(engine, "job", PlacementSettings(), 600, 3600, fence=new.fence).placed) == 4
        new.release()  # released: no generation is current, the last holder's included
        with pytest.raises(LeaseLost, match="no MDS holds it"):
            place_app(engine, "job", PlacementSettings(), 600, 3600, fence=MdsLease(engine, INTERVAL).fence)
    finally:
        engine.dispose()


def feed(pub: Publisher, stop: threading.Event, oss: str, seq: int) -> threading.Thread:
    """An agent reporting every 0.2 s until ``stop`` (messages queue at a paused MDS, as they would)."""

    def loop() -> None:
        n = seq
        while not stop.wait(0.2):
            n += 1
            pub.send(stats(oss, n, 0, count=4))

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


# SQLite too: neither MDS is paused inside a transaction of its own on purpose (each is idle between passes
# when stopped, and no agent reports to the standby while it is stopped), so the file's lock is free.
@pytest.mark.parametrize("backend", BACKENDS)
def test_an_mds_paused_past_its_lease_allocates_nothing_when_it_wakes_and_stops(backend, tmp_path, mds_factory,
                                                                                 standbys):
    db = fresh_db(backend, tmp_path, "splitbrain")
    active = mds_factory(db, name="active").start()
    pub, stop, pub2 = Publisher(active.endpoint), threading.Event(), None
    feeders = [feed(pub, stop, "oss0", connect(active, pub, oss="oss0", first_ost=0))]
    standby = standbys(db, "standby", "--standby").start()
    try:
        standby.wait_log("standing by: another MDS is active")
        active.proc.send_signal(signal.SIGSTOP)  # its agent keeps reporting: the messages wait in its socket
        wait_for(lambda: status_pid(standby.status_file) == standby.proc.pid, STALE_INTERVALS * INTERVAL + 15,
                 "the standby's takeover")
        standby.proc.send_signal(signal.SIGSTOP)  # the new holder, silent for now: nothing places the requests
        add_requests(db, "job", 4)  # pending when the old one wakes, with a fresh view from its queued reports
        active.proc.send_signal(signal.SIGCONT)
        assert active.proc.wait(timeout=30) == 1
        log = active.log.read_text()
        assert allocations(db) == [], log[-3000:]  # the deposed MDS placed nothing
        assert "stopped: another MDS took over the active MDS lease" in log
        fenced = "refused: this MDS's lease (generation 1) is no longer the current one" in log
        print(f"the woken MDS was stopped by {'its allocation fence' if fenced else 'its heartbeat'}")
        assert fenced or "lost the active MDS lease" in log
        # the new holder runs again and places each request once
        standby.proc.send_signal(signal.SIGCONT)
        pub2 = Publisher(standby.endpoint)
        feeders.append(feed(pub2, stop, "oss0", 10_000))
        wait_for(lambda: len(allocations(db)) == 4, 30, "the new holder's allocations")
        placed = allocations(db)
        assert sorted(path for _, path in placed) == [f"/lustre/job/out.{i}" for i in range(4)]
        assert len({request for request, _ in placed}) == 4
    finally:
        stop.set()
        for thread in feeders:
            thread.join()
        for publisher in (pub, pub2):
            if publisher is not None:
                publisher.close()
        active.proc.send_signal(signal.SIGCONT)
        standby.proc.send_signal(signal.SIGCONT)
