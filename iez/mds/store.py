"""Writing reports to the interaction DB in batches.

One transaction per batch: every report goes to the time series
(``oss_stats``, ``ost_stats``), the latest report per OSS and OST to the live
rows (an upsert each, whatever arrived first in the batch is superseded), and
the OSTs that now show their reserved bytes written release those
reservations. One row-by-row ORM transaction per message would cap ingest at a
few hundred messages a second; batches sustain thousands.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Sequence

from sqlalchemy import Engine, delete, insert, select
from sqlalchemy.dialects import mysql, sqlite

from iez.db.engine import is_sqlite, write_session
from iez.db.models import OssRow, OssStat, OstRow, OstStat, Reservation, utcnow
from iez.db.stats import OssReport, release_caught_up


def _upsert(engine: Engine, model, key: str, rows: list[dict]):
    if is_sqlite(engine):
        stmt = sqlite.insert(model)
        return stmt.on_conflict_do_update(index_elements=[key], set_={c: stmt.excluded[c] for c in rows[0] if c != key})
    stmt = mysql.insert(model)
    return stmt.on_duplicate_key_update({c: stmt.inserted[c] for c in rows[0] if c != key})


def store_batch(engine: Engine, reports: Sequence[tuple[OssReport, datetime]]) -> int:
    """Store ``(report, received)`` pairs; returns the number of reservations they ended."""
    if not reports:
        return 0
    oss_series, ost_series = [], []
    oss_latest: dict[str, dict] = {}
    ost_latest: dict[int, dict] = {}
    for report, received in reports:
        oss_series.append({"oss_id": report.oss_id, "seq": report.seq, "sample_time": report.time,
                           "cpu_pct": report.cpu_pct, "mem_pct": report.mem_pct})
        oss_latest[report.oss_id] = {"oss_id": report.oss_id, "seq": report.seq, "sample_time": report.time,
                                     "received": received, "cpu_pct": report.cpu_pct, "mem_pct": report.mem_pct,
                                     "interval_s": report.interval_s}
        for o in report.osts:
            values = {"ost_index": o.index, "oss_id": report.oss_id, "kbytes_total": o.kbytes_total,
                      "kbytes_avail": o.kbytes_avail, "read_bytes": o.read_bytes, "write_bytes": o.write_bytes,
                      "sample_time": report.time}
            ost_series.append(values)
            ost_latest[o.index] = {**values, "name": o.name}
    ended = 0
    with write_session(engine) as session:
        session.execute(insert(OssStat), oss_series)
        if ost_series:
            session.execute(insert(OstStat), ost_series)
        latest = list(oss_latest.values())
        session.execute(_upsert(engine, OssRow, "oss_id", latest), latest)
        if ost_latest:
            rows = list(ost_latest.values())
            session.execute(_upsert(engine, OstRow, "ost_index", rows), rows)
            waiting = set(session.execute(
                select(Reservation.ost_index).where(Reservation.avail_kb_at.is_not(None)).distinct()).scalars())
            for index in waiting & set(ost_latest):
                ended += release_caught_up(session, index, ost_latest[index]["kbytes_avail"])
    return ended


def prune(engine: Engine, keep: timedelta) -> None:
    """Drop time-series rows older than ``keep``, and expired reservations."""
    cutoff = utcnow() - keep
    with write_session(engine) as session:
        session.execute(delete(OssStat).where(OssStat.sample_time < cutoff))
        session.execute(delete(OstStat).where(OstStat.sample_time < cutoff))
        session.execute(delete(Reservation).where(Reservation.expires < utcnow()))
