#!/usr/bin/env python
"""The write lock on a Galera cluster (issue 25, item 1): over-reservation, retries and commit latency.

One command, as root on a machine with mariadb-server, galera-4 and rsync (``scripts/test`` installs them)::

    python benchmarks/galera_lock.py [--runs 20] [--mysql mysql://root@127.0.0.1:3306/iez_bench_galera]

It starts its own 3-node Galera cluster on loopback (``tests/db/galera.py``), stops and removes it at the end,
and prints:

- the issue's reproduction: two allocators on two nodes, 100 MiB free, 60 MiB each, ``--runs`` times, with
  iez's lock (the lock row written, refused writers retried) and with the old one (``SELECT ... FOR UPDATE``
  only): runs that reserved exactly 60 MiB, bytes over-reserved, retried transactions per run;
- 16 allocators spread over the 3 nodes (1 GiB free, 150 MiB each: 6 fit), 5 runs: the same figures;
- the latency of one uncontended allocation transaction (place_app of one file, committed): median and max
  of 200, on SQLite, on the single MariaDB server ``--mysql`` names (old lock and new), and on a Galera node;
  and of the lock alone (an empty write transaction) and of a one-row write transaction, 500 times each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "db"))

from sqlalchemy import create_engine, delete, text  # noqa: E402

from galera import AllocationRace, galera_cluster, iez_database  # noqa: E402
from iez.config import database_url  # noqa: E402
from iez.db import engine as db_engine  # noqa: E402
from iez.db.engine import make_engine, write_transaction  # noqa: E402
from iez.db.models import AllocationRow, Reservation, utcnow  # noqa: E402
from iez.db.requests import RequestIn, upsert_requests  # noqa: E402
from iez.db.schema import ensure_database, upgrade  # noqa: E402
from iez.db.stats import OssReport, OstReport, record  # noqa: E402
from iez.placement import PlacementSettings, place_app  # noqa: E402

MiB = 1 << 20


def _old_lock(session) -> None:
    """The lock before issue 25: the row locked, not written (Galera does not replicate the lock)."""
    session.execute(text("SELECT id FROM iez_lock WHERE id = 1 FOR UPDATE"))


@contextmanager
def lock(kind: str):
    new = db_engine._lock_writers
    if kind == "old":
        db_engine._lock_writers = _old_lock
    try:
        yield
    finally:
        db_engine._lock_writers = new


def races(urls: list[str], writers: int, free: int, size: int, runs: int, kind: str) -> str:
    race = AllocationRace(urls, writers, free, size)
    try:
        with lock(kind):
            done = [race.run() for _ in range(runs)]
    finally:
        race.close()
    expect = (free // size) * size
    right = sum(r.reserved_bytes == expect and not r.errors for r in done)
    over = [r.over_reserved_bytes for r in done]
    retries = [r.retries for r in done]
    errors = sum(len(r.errors) for r in done)
    latency = sorted(x for r in done for x in r.latencies_s)
    return (f"  {kind} lock: {right}/{runs} runs reserved exactly {expect // MiB} MiB; over-reserved bytes per run: "
            f"max {max(over):,}, total {sum(over):,}; retried transactions per run: mean "
            f"{statistics.mean(retries):.1f}, max {max(retries)}; errors (503s) {errors}; allocator latency "
            f"median {statistics.median(latency) * 1e3:.1f} ms, max {latency[-1] * 1e3:.1f} ms")


def latency(url: str, n: int = 200) -> tuple[float, float]:
    """Median and max of ``n`` uncontended place_app calls of one file (the transaction committed), in ms."""
    engine = make_engine(database_url(url))
    try:
        def setup(session) -> None:
            session.execute(delete(Reservation))
            session.execute(delete(AllocationRow))
            record(session, OssReport("oss0", 1, utcnow(), 5.0, 5.0,
                                      [OstReport(f"fs-OST{i:04x}", i, 100 << 20, 80 << 20) for i in range(8)]))
            upsert_requests(session, "lat", [RequestIn("/lustre/lat/out", 64 * MiB, 2, rank=0)])

        write_transaction(engine, setup)
        settings, times = PlacementSettings(), []
        for i in range(n + 10):
            write_transaction(engine, lambda s: (s.execute(delete(Reservation)),
                                                 s.execute(delete(AllocationRow))))  # pending again
            started = time.perf_counter()
            assert len(place_app(engine, "lat", settings, 3600, 3600).placed) == 1
            if i >= 10:  # warmed up
                times.append(time.perf_counter() - started)
        return statistics.median(times) * 1e3, max(times) * 1e3
    finally:
        engine.dispose()


def lock_alone(url: str, n: int = 500) -> tuple[float, float, float, float]:
    """Median and max of ``n`` empty write transactions (the lock taken, committed), then of ``n`` that write one
    row (an OSS's report), in ms: the lock's own cost, and what a writer costs at least."""
    engine = make_engine(database_url(url))
    try:
        write_transaction(engine, lambda s: record(s, OssReport("oss-lat", 1, utcnow(), 5.0, 5.0, [])))
        out = []
        for body in (lambda s: None,
                     lambda s: s.execute(text("UPDATE oss SET seq = seq + 1 WHERE oss_id = 'oss-lat'"))):
            times = []
            for i in range(n + 20):
                started = time.perf_counter()
                write_transaction(engine, body)
                if i >= 20:
                    times.append(time.perf_counter() - started)
            out += [statistics.median(times) * 1e3, max(times) * 1e3]
        return tuple(out)
    finally:
        engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--mysql", default="mysql://root@127.0.0.1:3306/iez_bench_galera",
                        help="a single MariaDB server's database to compare latency with (created, then dropped)")
    args = parser.parse_args()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = str(Path(tmp) / "iez.db")
        ensure_database(database_url(sqlite))
        upgrade(make_engine(database_url(sqlite)))
        lines.append("uncontended allocation transaction (place_app, 1 file, committed), median / max of 200:")
        lines.append("  SQLite: %.2f / %.2f ms" % latency(sqlite))
        lines.append("  SQLite, the lock alone (an empty write transaction): %.2f / %.2f ms; with a one-row write: "
                     "%.2f / %.2f ms" % lock_alone(sqlite))
        single = database_url(args.mysql)
        ensure_database(single)
        engine = make_engine(single)
        upgrade(engine)
        engine.dispose()
        try:
            with lock("old"):
                lines.append("  one MariaDB server, old lock (row locked only): %.2f / %.2f ms" % latency(args.mysql))
            lines.append("  one MariaDB server, iez's lock (row locked and written): %.2f / %.2f ms"
                         % latency(args.mysql))
            with lock("old"):
                lines.append("  one MariaDB server, old lock, the lock alone (an empty write transaction): "
                             "%.2f / %.2f ms; with a one-row write: %.2f / %.2f ms" % lock_alone(args.mysql))
            lines.append("  one MariaDB server, iez's lock, the lock alone: %.2f / %.2f ms; with a one-row write: "
                         "%.2f / %.2f ms" % lock_alone(args.mysql))
        finally:
            admin = create_engine(single.set(database=""))
            with admin.begin() as conn:
                conn.execute(text(f"DROP DATABASE IF EXISTS `{single.database}`"))
            admin.dispose()
        started = time.monotonic()
        with galera_cluster(3) as cluster:
            lines.insert(0, f"3-node Galera cluster on loopback up in {time.monotonic() - started:.1f} s")
            lat = iez_database(cluster, "iez_latency")[0]
            lines.append("  Galera node (3-node cluster, iez's lock): %.2f / %.2f ms" % latency(lat))
            lines.append("  Galera node, iez's lock, the lock alone: %.2f / %.2f ms; with a one-row write: "
                         "%.2f / %.2f ms" % lock_alone(lat))
            urls = iez_database(cluster, "iez_bench")
            lines.append(f"2 allocators on 2 Galera nodes, 100 MiB free, 60 MiB each, {args.runs} runs:")
            for kind in ("old", "new"):
                lines.append(races(urls[:2], 2, 100 * MiB, 60 * MiB, args.runs, kind))
            lines.append("16 allocators over 3 Galera nodes, 1 GiB free, 150 MiB each (6 fit), 5 runs:")
            for kind in ("old", "new"):
                lines.append(races(urls, 16, 1024 * MiB, 150 * MiB, 5, kind))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
