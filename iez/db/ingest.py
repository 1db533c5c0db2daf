"""Writing the MDS's reports to the interaction DB in batches (the MDS decides what to keep; this, how).

One transaction per batch: reports go to the time series (``oss_stats``,
``ost_stats``; at most one per OSS per series interval, see the service), the
latest report per OSS and OST to the live rows (an upsert each, whatever arrived first in the batch is superseded)
with each OST's Lustre policy (state, pools, reserved space) as the live view
has it, policy changes without a report (the MDS's parameters) to the rows they
concern, and the OSTs that now show their reserved bytes written release those
reservations. One row-by-row ORM transaction per message would cap ingest at a
few hundred messages a second; batches sustain thousands.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Mapping, Sequence

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from iez.db.engine import is_sqlite, write_transaction
from iez.db.models import OssStat, OstStat, Reservation, utcnow
from iez.db.stats import release_caught_up

_OSS_SERIES = "INSERT INTO oss_stats (oss_id, seq, sample_time, cpu_pct, mem_pct) VALUES ({})"
_OST_SERIES = ("INSERT INTO ost_stats (ost_index, oss_id, kbytes_total, kbytes_avail, read_bytes, write_bytes, "
               "sample_time) VALUES ({})")
_OSS_LATEST = {
    "sqlite": "INSERT INTO oss (oss_id, seq, sample_time, received, cpu_pct, mem_pct, interval_s) VALUES ({}) "
              "ON CONFLICT (oss_id) DO UPDATE SET seq = excluded.seq, sample_time = excluded.sample_time, "
              "received = excluded.received, cpu_pct = excluded.cpu_pct, mem_pct = excluded.mem_pct, "
              "interval_s = excluded.interval_s",
    "mysql": "INSERT INTO oss (oss_id, seq, sample_time, received, cpu_pct, mem_pct, interval_s) VALUES ({}) "
             "ON DUPLICATE KEY UPDATE seq = VALUES(seq), sample_time = VALUES(sample_time), "
             "received = VALUES(received), cpu_pct = VALUES(cpu_pct), mem_pct = VALUES(mem_pct), "
             "interval_s = VALUES(interval_s)",
}
_OST_LATEST = {
    "sqlite": "INSERT INTO osts (ost_index, name, oss_id, kbytes_total, kbytes_avail, read_bytes, write_bytes, "
              "sample_time, state, pools, reserved_kbytes, load_bytes_s) VALUES ({}) "
              "ON CONFLICT (ost_index) DO UPDATE SET "
              "name = excluded.name, oss_id = excluded.oss_id, kbytes_total = excluded.kbytes_total, "
              "kbytes_avail = excluded.kbytes_avail, read_bytes = excluded.read_bytes, "
              "write_bytes = excluded.write_bytes, sample_time = excluded.sample_time, state = excluded.state, "
              "pools = excluded.pools, reserved_kbytes = excluded.reserved_kbytes, "
              "load_bytes_s = excluded.load_bytes_s",
    "mysql": "INSERT INTO osts (ost_index, name, oss_id, kbytes_total, kbytes_avail, read_bytes, write_bytes, "
             "sample_time, state, pools, reserved_kbytes, load_bytes_s) VALUES ({}) "
             "ON DUPLICATE KEY UPDATE name = VALUES(name), "
             "oss_id = VALUES(oss_id), kbytes_total = VALUES(kbytes_total), kbytes_avail = VALUES(kbytes_avail), "
             "read_bytes = VALUES(read_bytes), write_bytes = VALUES(write_bytes), sample_time = VALUES(sample_time), "
             "state = VALUES(state), pools = VALUES(pools), reserved_kbytes = VALUES(reserved_kbytes), "
             "load_bytes_s = VALUES(load_bytes_s)",
}
_OST_POLICY = "UPDATE osts SET state = {0}, pools = {0}, reserved_kbytes = {0} WHERE ost_index = {0}"
#: An OST's policy as the ``osts`` row stores it: state, pools (space-separated or None), reserved_kbytes.
Policy = tuple[str, "str | None", "int | None"]


def _sql(template: str, columns: int, sqlite_db: bool) -> str:
    return template.format(", ".join(["?" if sqlite_db else "%s"] * columns))


def _stamp(dt: datetime, sqlite_db: bool):
    # SQLAlchemy stores SQLite datetimes as ISO text with microseconds; the driver-level path must match
    return dt.isoformat(sep=" ", timespec="microseconds") if sqlite_db else dt


def store_batch(engine: Engine, reports: Sequence[tuple], policies: Mapping[int, Policy] | None = None,
                loads: Mapping[int, float] | None = None) -> int:
    """Store ``(report, received[, in_series])`` tuples; returns the number of reservations they ended.

    Every report updates the live rows; only those marked ``in_series`` (all,
    when the mark is absent) are appended to the time series. ``policies``
    (OST index -> state, pools, reserved_kbytes) is written with the OSTs'
    rows; an OST of a report without one gets the report's state and no pools
    or reserved space, and one without a report in the batch is updated alone.
    ``loads`` (OST index -> bytes/s, the MDS's live view) goes with each reported OST's row (NULL: unknown).

    Plain driver-level ``executemany`` statements: SQLAlchemy's per-row work
    cost 250 µs a message, this about 20 (benchmarks/mds_bench.py).
    """
    if not reports and not policies:
        return 0
    lite = is_sqlite(engine)
    dialect = "sqlite" if lite else "mysql"
    oss_series, ost_series = [], []
    oss_latest: dict[str, tuple] = {}
    ost_latest: dict[int, tuple] = {}
    for item in reports:
        report, received = item[0], item[1]
        in_series = item[2] if len(item) > 2 else True
        t = _stamp(report.time, lite)
        if in_series:
            oss_series.append((report.oss_id, report.seq, t, report.cpu_pct, report.mem_pct))
        oss_latest[report.oss_id] = (report.oss_id, report.seq, t, _stamp(received, lite), report.cpu_pct,
                                     report.mem_pct, report.interval_s)
        for o in report.osts:
            if in_series:
                ost_series.append((o.index, report.oss_id, o.kbytes_total, o.kbytes_avail, o.read_bytes,
                                   o.write_bytes, t))
            policy = policies.get(o.index) if policies else None
            if policy is None:
                policy = (o.state or "active", None, None)
            ost_latest[o.index] = (o.index, o.name, report.oss_id, o.kbytes_total, o.kbytes_avail, o.read_bytes,
                                   o.write_bytes, t, *policy, (loads or {}).get(o.index))
    policy_only = [(*policy, index) for index, policy in (policies or {}).items() if index not in ost_latest]

    def store(session: Session) -> int:  # may run twice (write_transaction): DB work only, its count afresh
        ended = 0
        raw = session.connection().connection.driver_connection
        assert raw is not None  # a checked-out connection always has its driver's
        cursor = raw.cursor()
        try:
            if oss_series:
                cursor.executemany(_sql(_OSS_SERIES, 5, lite), oss_series)
            if ost_series:
                cursor.executemany(_sql(_OST_SERIES, 7, lite), ost_series)
            if oss_latest:
                cursor.executemany(_sql(_OSS_LATEST[dialect], 7, lite), list(oss_latest.values()))
            if ost_latest:
                cursor.executemany(_sql(_OST_LATEST[dialect], 12, lite), list(ost_latest.values()))
            if policy_only:
                cursor.executemany(_OST_POLICY.format("?" if lite else "%s"), policy_only)
        finally:
            cursor.close()
        if ost_latest:
            waiting = set(session.execute(
                select(Reservation.ost_index).where(Reservation.avail_kb_at.is_not(None)).distinct()).scalars())
            for index in waiting & set(ost_latest):
                ended += release_caught_up(session, index, ost_latest[index][4])
        return ended

    return write_transaction(engine, store)


def prune(engine: Engine, keep: timedelta) -> None:
    """Drop time-series rows older than ``keep``, and expired reservations."""
    cutoff = utcnow() - keep

    def drop(session: Session) -> None:
        session.execute(delete(OssStat).where(OssStat.sample_time < cutoff))
        session.execute(delete(OstStat).where(OstStat.sample_time < cutoff))
        session.execute(delete(Reservation).where(Reservation.expires < utcnow()))

    write_transaction(engine, drop)
