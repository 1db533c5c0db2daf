"""The write lock on a real 3-node MariaDB Galera cluster (issue 25, item 1), through iez's allocation path.

Galera does not replicate ``SELECT ... FOR UPDATE``: with that lock alone, two allocators on two nodes both
read 100 free and both reserved 60. iez's writers also write the lock row, so Galera certifies them against
each other and refuses the later one (1213), which :func:`iez.db.engine.write_transaction` runs again: it then
sees the first one's reservation. The cluster (``tests/db/galera.py``) is started once for the module, on
loopback ports with its own data directories, and stopped and removed afterwards.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text, update

from galera import AllocationRace, galera_cluster, iez_database
from iez.config import database_url
from iez.db.engine import make_engine
from iez.db.models import MdsLeaseRow, utcnow
from iez.db.requests import RequestIn, upsert_requests
from iez.db.engine import write_transaction
from iez.mds.lease import LeaseLost, MdsLease, read_holder
from iez.placement import PlacementSettings, place_app

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

MiB = 1 << 20


@pytest.fixture(scope="module")
def galera():
    with galera_cluster(3) as cluster:
        yield cluster


def test_two_writers_on_two_nodes_reserve_only_what_is_free_20_runs_of_20(galera):
    urls = iez_database(galera, "iez_two")
    race = AllocationRace(urls[:2], writers=2, free_bytes=100 * MiB, file_bytes=60 * MiB)  # nodes 1 and 2
    try:
        runs = [race.run() for _ in range(20)]
    finally:
        race.close()
    retries = sum(r.retries for r in runs)
    print(f"2 writers on 2 nodes, 100 MiB free, 60 MiB each: reserved {[r.reserved_bytes // MiB for r in runs]} MiB; "
          f"{retries} retried transactions in 20 runs")
    assert [r.errors for r in runs] == [[]] * 20  # no 503 (DatabaseUnavailable) for the losing writer
    assert [(r.placed, r.reserved_bytes) for r in runs] == [(1, 60 * MiB)] * 20
    # the writers did collide, and the loser was run again (it then saw the winner's reservation and refused)
    assert retries >= 1


def test_16_allocators_over_3_nodes_over_reserve_nothing(galera):
    urls = iez_database(galera, "iez_many")
    # 1 GiB free, 150 MiB each: 6 fit (900 MiB), the 7th would over-reserve
    race = AllocationRace(urls, writers=16, free_bytes=1024 * MiB, file_bytes=150 * MiB)
    try:
        runs = [race.run() for _ in range(3)]
    finally:
        race.close()
    print(f"16 writers over 3 nodes: placed {[r.placed for r in runs]}, over-reserved "
          f"{[r.over_reserved_bytes for r in runs]} bytes, retried {[r.retries for r in runs]} transactions, "
          f"slowest allocator {max(max(r.latencies_s) for r in runs):.2f} s")
    assert [r.errors for r in runs] == [[]] * 3
    assert [r.over_reserved_bytes for r in runs] == [0] * 3
    assert [(r.placed, r.reserved_bytes) for r in runs] == [(6, 900 * MiB)] * 3
    assert all(r.retries >= 1 for r in runs)


def test_an_mds_whose_lease_was_taken_over_on_another_node_has_its_allocation_refused(galera):
    urls = iez_database(galera, "iez_fence")
    old_engine, new_engine = (make_engine(database_url(u)) for u in urls[:2])
    try:
        old, new = MdsLease(old_engine, 1.0), MdsLease(new_engine, 1.0)
        assert old.claim() is None
        write_transaction(old_engine, lambda s: upsert_requests(s, "job", [RequestIn("/lustre/job/a", MiB, 1)]))
        # the old holder's heartbeat stops (paused past the lease): its record goes stale
        with old_engine.begin() as conn:
            conn.execute(update(MdsLeaseRow).values(expires=utcnow() - timedelta(seconds=10)))
        assert new.claim() is None and new.generation == old.generation + 1  # on node 2
        with pytest.raises(LeaseLost, match=f"generation {old.generation}.*holds generation {new.generation}"):
            place_app(old_engine, "job", PlacementSettings(), 3600, 3600, fence=old.fence)  # on node 1
        assert old.lost is not None and old.lost.generation == new.generation
        # nothing stored by the refused pass; the new holder's pass runs as usual
        with new_engine.connect() as conn:
            assert conn.execute(text("SET STATEMENT wsrep_sync_wait=15 FOR SELECT COUNT(*) FROM allocations")
                                ).scalar_one() == 0
        assert read_holder(new_engine).generation == new.generation
        assert place_app(new_engine, "job", PlacementSettings(), 3600, 3600, fence=new.fence).app == "job"
    finally:
        old_engine.dispose()
        new_engine.dispose()
