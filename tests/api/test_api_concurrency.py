"""16 clients allocating for 16 applications at once never reserve more of an OST than it has."""

from __future__ import annotations

import os
import threading

import pytest
from sqlalchemy import text

from conftest import Server, fresh_db
from iez.config import database_url
from iez.db.engine import make_engine

pytestmark = pytest.mark.slow

POLICY = os.environ.get("IEZ_TEST_POLICY", "iez")
CLIENTS = 16
OST_KB = 64 * 1024  # 64 MiB free per OST


def test_concurrent_allocations_never_overbook_an_ost(backend, tmp_path):
    db = fresh_db(backend, tmp_path, "conc")
    srv = Server(db)
    try:
        with srv.client() as api:
            # 2 OSS x 4 OSTs of 64 MiB; each app wants 3 files x 2 stripes of 16 MiB = 96 MiB,
            # so the 16 apps ask for 1.5 GiB against 512 MiB: most must be refused, none may overbook.
            for oss, indices in (("oss0", range(0, 4)), ("oss1", range(4, 8))):
                api.post("/v1/stats", json={
                    "oss_id": oss, "seq": 1, "time": 1.0, "cpu_pct": 5, "mem_pct": 5,
                    "osts": [{"name": f"fs-OST{i:04x}", "index": i, "kbytes_total": OST_KB,
                              "kbytes_avail": OST_KB} for i in indices]}).raise_for_status()
            for n in range(CLIENTS):
                api.post("/v1/requests", json={"app": f"app{n}", "requests": [
                    {"file": f"/lustre/app{n}/f{k}", "write_bytes": 32 * 2**20, "stripe_count": 2, "rank": k}
                    for k in range(3)]}).raise_for_status()
        barrier = threading.Barrier(CLIENTS)
        statuses: list[int] = []

        def allocate(n: int) -> None:
            with srv.client() as client:
                barrier.wait()
                statuses.append(client.post("/v1/allocate", json={"app": f"app{n}", "policy": POLICY}).status_code)

        threads = [threading.Thread(target=allocate, args=(n,)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(set(statuses)) <= [200, 409] and len(statuses) == CLIENTS
        assert statuses.count(200) >= 1 and statuses.count(409) >= 1

        engine = make_engine(database_url(db))
        with engine.connect() as conn:
            reserved = dict(conn.execute(text(
                "SELECT ost_index, SUM(bytes) FROM reservations GROUP BY ost_index")).all())
            placed = conn.execute(text("SELECT COUNT(*) FROM allocations")).scalar()
        engine.dispose()
        assert placed == 3 * statuses.count(200)  # an app gets all of its files or none
        assert reserved and all(int(b) <= OST_KB * 1024 for b in reserved.values()), reserved
    finally:
        srv.stop()
