"""OSS and OST statistics: store an agent's report, and build the cluster the allocators see."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

from sqlalchemy import Connection, delete, func, select
from sqlalchemy.orm import Session

from iez.db.models import OssRow, OssStat, OstRow, OstStat, Reservation, utcnow
from iez.model import DEFAULT_OSS_BANDWIDTH, DEFAULT_OST_BANDWIDTH, OSS, OST, ClusterState, usable_kbytes


@dataclass(frozen=True)
class OstReport:
    name: str
    index: int
    kbytes_total: int
    kbytes_avail: int
    read_bytes: int | None = None
    write_bytes: int | None = None


@dataclass(frozen=True)
class OssReport:
    """One agent message (``iez-agent --json`` prints the same shape)."""

    oss_id: str
    seq: int
    time: datetime  # naive UTC
    cpu_pct: float
    mem_pct: float
    osts: Sequence[OstReport] = ()
    interval_s: float | None = None


def record(session: Session, report: OssReport) -> None:
    """Append the report to the time series and make it the latest view of its OSS and OSTs."""
    received = utcnow()
    session.merge(
        OssRow(
            oss_id=report.oss_id,
            seq=report.seq,
            sample_time=report.time,
            received=received,
            cpu_pct=report.cpu_pct,
            mem_pct=report.mem_pct,
            interval_s=report.interval_s,
        )
    )
    session.add(
        OssStat(oss_id=report.oss_id, seq=report.seq, sample_time=report.time,
                cpu_pct=report.cpu_pct, mem_pct=report.mem_pct)
    )
    for ost in report.osts:
        values = dict(
            ost_index=ost.index,
            oss_id=report.oss_id,
            kbytes_total=ost.kbytes_total,
            kbytes_avail=ost.kbytes_avail,
            read_bytes=ost.read_bytes,
            write_bytes=ost.write_bytes,
            sample_time=report.time,
        )
        session.merge(OstRow(name=ost.name, **values))
        session.add(OstStat(**values))


def ingest(session: Session, report: OssReport) -> int:
    """Record a report and end the reservations it shows written; returns how many ended."""
    record(session, report)
    return sum(release_caught_up(session, ost.index, ost.kbytes_avail) for ost in report.osts)


def release_caught_up(session: Session, ost_index: int, kbytes_avail: int) -> int:
    """End the OST's reservations whose bytes its free space now shows as used; returns how many.

    Reservations are taken oldest first: the space used since the oldest one
    was made (its ``avail_kb_at`` less ``kbytes_avail`` now) pays for them in
    order, and a reservation ends once it is paid for in full. Reservations
    without a baseline wait for their time-out.
    """
    rows = session.execute(
        select(Reservation.id, Reservation.bytes, Reservation.avail_kb_at)
        .where(Reservation.ost_index == ost_index, Reservation.avail_kb_at.is_not(None))
        .order_by(Reservation.id)
    ).all()
    if not rows:
        return 0
    used = (rows[0].avail_kb_at - kbytes_avail) * 1024
    done: list[int] = []
    for row in rows:
        if used < row.bytes:
            break
        used -= row.bytes
        done.append(row.id)
    if done:
        session.execute(delete(Reservation).where(Reservation.id.in_(done)))
    return len(done)


def reserved_bytes(conn: Connection | Session, now: datetime) -> dict[int, int]:
    """Bytes held by unexpired reservations, per OST index."""
    rows = conn.execute(
        select(Reservation.ost_index, func.sum(Reservation.bytes))
        .where(Reservation.expires > now)
        .group_by(Reservation.ost_index)
    )
    return {int(index): int(total) for index, total in rows}


def stale_cutoff(now: datetime, stale_s: float) -> datetime:
    return now - timedelta(seconds=stale_s)


def usable_cluster(session: Session, now: datetime, stale_s: float, ost_bandwidth: float = DEFAULT_OST_BANDWIDTH,
                   oss_bandwidth: float = DEFAULT_OSS_BANDWIDTH) -> ClusterState:
    """OSTs whose OSS reported within ``stale_s``, with their free space less active reservations
    (:func:`iez.model.usable_kbytes`) and the configured bandwidths (the DB keeps no live congestion;
    the MDS's view does)."""
    reserved = reserved_bytes(session, now)
    rows = session.execute(
        select(OstRow, OssRow)
        .join(OssRow, OssRow.oss_id == OstRow.oss_id)
        .where(OssRow.received >= stale_cutoff(now, stale_s))
        .order_by(OstRow.ost_index)
    ).all()
    osts, osses = [], {}
    for ost, oss in rows:
        avail = usable_kbytes(ost.kbytes_avail, ost.kbytes_total, reserved.get(ost.ost_index, 0))
        osts.append(OST(ost.ost_index, ost.oss_id, ost.kbytes_total, avail, bandwidth=ost_bandwidth))
        osses[oss.oss_id] = OSS(oss.oss_id, _pct(oss.cpu_pct), _pct(oss.mem_pct), bandwidth=oss_bandwidth)
    return ClusterState.build(osts, list(osses.values()))


def _pct(value: float) -> float:
    return min(100.0, max(0.0, value))


def ost_rows(conn: Connection, now: datetime) -> list[dict]:
    reserved = reserved_bytes(conn, now)
    out = []
    for ost in conn.execute(select(OstRow).order_by(OstRow.ost_index)).all():
        ost = ost._mapping
        out.append(
            {
                "index": ost["ost_index"],
                "name": ost["name"],
                "oss_id": ost["oss_id"],
                "kbytes_total": ost["kbytes_total"],
                "kbytes_avail": ost["kbytes_avail"],
                "bytes_reserved": reserved.get(ost["ost_index"], 0),
                "read_bytes": ost["read_bytes"],
                "write_bytes": ost["write_bytes"],
                "sample_time": ost["sample_time"].isoformat() + "Z",
            }
        )
    return out


def oss_rows(conn: Connection, now: datetime, stale_s: float) -> list[dict]:
    cutoff = stale_cutoff(now, stale_s)
    counts = dict(conn.execute(select(OstRow.oss_id, func.count()).group_by(OstRow.oss_id)).all())
    return [
        {
            "oss_id": oss.oss_id,
            "seq": oss.seq,
            "cpu_pct": oss.cpu_pct,
            "mem_pct": oss.mem_pct,
            "sample_time": oss.sample_time.isoformat() + "Z",
            "received": oss.received.isoformat() + "Z",
            "stale": oss.received < cutoff,
            "osts": counts.get(oss.oss_id, 0),
        }
        for oss in conn.execute(select(OssRow).order_by(OssRow.oss_id)).all()
    ]


def stale_oss_count(conn: Connection, now: datetime, stale_s: float) -> int:
    return int(conn.scalar(select(func.count()).select_from(OssRow).where(OssRow.received < stale_cutoff(now, stale_s))))
