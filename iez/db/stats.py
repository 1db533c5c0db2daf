"""OSS and OST statistics: store an agent's report, and build the cluster the allocators see.

Each OST row also carries Lustre's policy for it (migration 0005): its ``state``
(the most restrictive of what its OSS and the MDS say), its ``pools``
(space-separated, from the MDS's ``lod.*.pools.*``) and ``reserved_kbytes``
(``osp.*.reserved_mb_low``: space Lustre keeps back, which iez never counts as free).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, Sequence

from sqlalchemy import Connection, delete, func, select
from sqlalchemy.orm import Session

from iez.db.models import OssRow, OssStat, OstRow, OstStat, Reservation, utcnow
from iez.freshness import StaleRule
from iez.model import DEFAULT_OSS_BANDWIDTH, DEFAULT_OST_BANDWIDTH, OSS, OST, ClusterState, usable_kbytes


@dataclass(frozen=True)
class OstReport:
    """One OST of an agent message; ``state`` is what the OSS says (message version 2; ``active`` in version 1)
    and the switches it read (None: not read)."""

    name: str
    index: int
    kbytes_total: int
    kbytes_avail: int
    read_bytes: int | None = None
    write_bytes: int | None = None
    state: str = "active"
    degraded: bool | None = None
    no_precreate: bool | None = None
    readonly: bool | None = None


class OstFields(Protocol):
    """An OST of a report as :func:`record` and the MDS read it: an :class:`OstReport`, or the OST of an agent
    message as decoded (``iez.mds.messages.Ost``, whose ``state`` the MDS's check has set)."""

    @property
    def name(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def kbytes_total(self) -> int: ...
    @property
    def kbytes_avail(self) -> int: ...
    @property
    def read_bytes(self) -> int | None: ...
    @property
    def write_bytes(self) -> int | None: ...
    @property
    def state(self) -> str | None: ...
    @property
    def degraded(self) -> bool | None: ...
    @property
    def no_precreate(self) -> bool | None: ...
    @property
    def readonly(self) -> bool | None: ...


@dataclass(frozen=True)
class OssReport:
    """One agent message (``iez-agent --json`` prints the same shape)."""

    oss_id: str
    seq: int
    time: datetime  # naive UTC
    cpu_pct: float
    mem_pct: float
    osts: Sequence[OstFields] = ()
    interval_s: float | None = None
    #: ``job_stats`` of the message: OST index -> ``[(job_id, read_bytes, write_bytes)]`` (cumulative sums,
    #: the OSS's top jobs); None when the message had none. Kept in the MDS's memory only (iez.mds.jobs).
    jobs: dict[int, list[tuple[str, int, int]]] | None = None


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
        # the OSS's own state; the MDS merges in its view (osp.*) on its next pass, and pools and
        # Lustre's reserved space come from the MDS only, so a pushed report leaves them as they are
        session.merge(OstRow(name=ost.name, state=ost.state, **values))
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


def writers(conn: Connection | Session, now: datetime, exclude_app: int | None = None
            ) -> tuple[dict[int, int], dict[str, int]]:
    """Jobs (applications) writing on each OST and each OSS now: those holding unexpired reservations there
    (an allocation placed and not yet written), ``exclude_app`` left out. CEFT's fair share of a server for a
    new job is its bandwidth over these plus one."""
    from iez.db.models import AllocationRow, WriteRequestRow

    query = (select(Reservation.ost_index, OstRow.oss_id, WriteRequestRow.app_id)
             .join(AllocationRow, AllocationRow.id == Reservation.allocation_id)
             .join(WriteRequestRow, WriteRequestRow.id == AllocationRow.request_id)
             .join(OstRow, OstRow.ost_index == Reservation.ost_index)
             .where(Reservation.expires > now).distinct())
    if exclude_app is not None:
        query = query.where(WriteRequestRow.app_id != exclude_app)
    per_ost: dict[int, set[int]] = {}
    per_oss: dict[str, set[int]] = {}
    for ost, oss, app in conn.execute(query):
        per_ost.setdefault(int(ost), set()).add(app)
        per_oss.setdefault(oss, set()).add(app)
    return {k: len(v) for k, v in per_ost.items()}, {k: len(v) for k, v in per_oss.items()}


def with_writers(cluster: ClusterState, per_ost: dict[int, int], per_oss: dict[str, int]) -> ClusterState:
    """``cluster`` with the jobs writing on each OST and OSS (:func:`writers`)."""
    if not per_ost and not per_oss:
        return cluster
    from dataclasses import replace

    osts = tuple(replace(o, writers=per_ost.get(o.index, 0)) if per_ost.get(o.index) else o for o in cluster.osts)
    osses = {k: replace(v, writers=per_oss.get(k, 0)) if per_oss.get(k) else v for k, v in cluster.osses.items()}
    return ClusterState(osts, osses, cluster.fill_cap)


def stale_cutoff(now: datetime, stale_s: float) -> datetime:
    return now - timedelta(seconds=stale_s)


def _is_stale(now: datetime, received: datetime, interval_s: float | None, stale: "float | StaleRule") -> bool:
    """A fixed limit in seconds, or :class:`iez.freshness.StaleRule` (per OSS interval, the MDS's rule)."""
    if isinstance(stale, StaleRule):
        return not stale.fresh(max(0.0, _epoch_s(now) - _epoch_s(received)), interval_s)
    return received < stale_cutoff(now, stale)


def split_pools(text: str | None) -> tuple[str, ...]:
    """The ``osts.pools`` column (space-separated names, NULL for none) as a tuple."""
    return tuple(text.split()) if text else ()


def join_pools(pools) -> str | None:
    """A pool list as the ``osts.pools`` column: sorted names, space-separated; None when empty."""
    names = sorted(set(pools))
    return " ".join(names) if names else None


def allocatable_kbytes(kbytes_avail: int, kbytes_total: int, reserved_bytes: int,
                       lustre_reserved_kbytes: int | None) -> int:
    """Free space as allocation sees it: what the OST reported, less what iez's reservations hold
    (:func:`iez.model.usable_kbytes`) and less Lustre's own reserved space, which iez never uses."""
    return usable_kbytes(kbytes_avail, kbytes_total, reserved_bytes + (lustre_reserved_kbytes or 0) * 1024)


def usable_cluster(session: Session, now: datetime, stale_s: "float | StaleRule", ost_bandwidth: float = DEFAULT_OST_BANDWIDTH,
                   oss_bandwidth: float = DEFAULT_OSS_BANDWIDTH, with_load: bool = False) -> ClusterState:
    """OSTs whose OSS reported within ``stale_s``, with their state and pools, their free space less active
    reservations and Lustre's reserved space (:func:`allocatable_kbytes`), and the configured bandwidths;
    with ``with_load``, each OST's live load as the MDS computes it from the stored counters (:func:`ost_loads`)."""
    reserved = reserved_bytes(session, now)
    loads = ost_loads(session) if with_load else {}
    query = select(OstRow, OssRow).join(OssRow, OssRow.oss_id == OstRow.oss_id).order_by(OstRow.ost_index)
    if not isinstance(stale_s, StaleRule):
        query = query.where(OssRow.received >= stale_cutoff(now, stale_s))
    rows = session.execute(query).all()
    osts, osses = [], {}
    for ost, oss in rows:
        if isinstance(stale_s, StaleRule) and _is_stale(now, oss.received, oss.interval_s, stale_s):
            continue
        avail = allocatable_kbytes(ost.kbytes_avail, ost.kbytes_total, reserved.get(ost.ost_index, 0),
                                   ost.reserved_kbytes)
        osts.append(OST(ost.ost_index, ost.oss_id, ost.kbytes_total, avail, bandwidth=ost_bandwidth,
                        load=loads.get(ost.ost_index, 0.0), state=ost.state or "active", pools=split_pools(ost.pools)))
        osses[oss.oss_id] = OSS(oss.oss_id, _pct(oss.cpu_pct), _pct(oss.mem_pct), bandwidth=oss_bandwidth)
    return ClusterState.build(osts, list(osses.values()))


def _pct(value: float) -> float:
    return min(100.0, max(0.0, value))


def ost_rows(conn: Connection, now: datetime) -> list[dict]:
    reserved = reserved_bytes(conn, now)
    out = []
    for ost in conn.execute(select(OstRow).order_by(OstRow.ost_index)).mappings().all():
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
                "state": ost["state"] or "active",
                "pools": list(split_pools(ost["pools"])),
                "reserved_kbytes": ost["reserved_kbytes"] or 0,
            }
        )
    return out


def oss_rows(conn: Connection, now: datetime, stale_s: "float | StaleRule") -> list[dict]:
    counts = dict(conn.execute(select(OstRow.oss_id, func.count()).group_by(OstRow.oss_id)).all())
    return [
        {
            "oss_id": oss.oss_id,
            "seq": oss.seq,
            "cpu_pct": oss.cpu_pct,
            "mem_pct": oss.mem_pct,
            "sample_time": oss.sample_time.isoformat() + "Z",
            "received": oss.received.isoformat() + "Z",
            "stale": _is_stale(now, oss.received, oss.interval_s, stale_s),
            "age_s": round(max(0.0, _epoch_s(now) - _epoch_s(oss.received)), 1),
            "osts": counts.get(oss.oss_id, 0),
        }
        for oss in conn.execute(select(OssRow).order_by(OssRow.oss_id)).all()
    ]


def stale_reasons(conn: Connection, now: datetime, rule: StaleRule) -> list[str]:
    """One line per stale OSS (:meth:`iez.freshness.StaleRule.describe`): 'OSS oss1: no report for 42 s (stale
    after 9 s)', for refusals that must name staleness as their cause."""
    rows = conn.execute(select(OssRow.oss_id, OssRow.received, OssRow.interval_s).order_by(OssRow.oss_id)).all()
    out = []
    for oss_id, received, interval in rows:
        age = max(0.0, _epoch_s(now) - _epoch_s(received))
        if not rule.fresh(age, interval):
            out.append(rule.describe(oss_id, age, interval))
    return out


def stale_oss_count(conn: Connection, now: datetime, stale_s: "float | StaleRule") -> int:
    if isinstance(stale_s, StaleRule):
        rows = conn.execute(select(OssRow.received, OssRow.interval_s)).all()
        return sum(_is_stale(now, received, interval, stale_s) for received, interval in rows)
    stale = select(func.count()).select_from(OssRow).where(OssRow.received < stale_cutoff(now, stale_s))
    return int(conn.execute(stale).scalar_one())


def _epoch_s(dt: datetime) -> float:
    return (dt - datetime(1970, 1, 1)).total_seconds()


def ost_loads(conn: Connection | Session) -> dict[int, float]:
    """Each OST's live load (read+write bytes/s) as the MDS's view computed it from the agents' counters
    (:mod:`iez.traffic`) when it stored the OST's latest report; 0 where no MDS has computed one."""
    return {int(index): float(load or 0.0)
            for index, load in conn.execute(select(OstRow.ost_index, OstRow.load_bytes_s)).all()}


def live_view(conn: Connection, now: datetime, default_stale_s: float, stale_intervals: int = 3) -> dict:
    """The cluster as the DB last saw it, for ``iez status``: every OST with its state, pools, space and load,
    every OSS with its age and whether it is fresh.

    An OSS is fresh while its last report is at most ``stale_intervals`` of its own report intervals old
    (the MDS's rule), or ``default_stale_s`` when its reports give no interval. An OST's load is the
    MDS's figure (:func:`ost_loads`: read+write bytes/s over its last reports, resets left out).
    """
    rule = StaleRule(stale_intervals, default_stale_s / stale_intervals)
    reserved = reserved_bytes(conn, now)
    loads = ost_loads(conn)
    osts: dict[int, dict] = {}
    for row in conn.execute(select(OstRow).order_by(OstRow.ost_index)).all():
        load = loads.get(row.ost_index, 0.0) / (1 << 20)
        lustre_kb = row.reserved_kbytes or 0
        osts[row.ost_index] = {
            "index": row.ost_index,
            "name": row.name,
            "oss": row.oss_id,
            "state": row.state or "active",
            "pools": list(split_pools(row.pools)),
            "kbytes_total": row.kbytes_total,
            "kbytes_avail": row.kbytes_avail,
            "reserved_kbytes": lustre_kb,
            "kbytes_usable": allocatable_kbytes(row.kbytes_avail, row.kbytes_total, reserved.get(row.ost_index, 0),
                                                lustre_kb),
            "fill": round(1.0 - min(row.kbytes_avail, row.kbytes_total) / row.kbytes_total, 4),
            "load_mib_s": round(load, 3),
            "sample_time": row.sample_time.isoformat() + "Z",
        }
    counts: dict[str, int] = {}
    for ost in osts.values():
        counts[ost["oss"]] = counts.get(ost["oss"], 0) + 1
    osses = []
    for oss in conn.execute(select(OssRow).order_by(OssRow.oss_id)).all():
        age = max(0.0, _epoch_s(now) - _epoch_s(oss.received))
        osses.append({"id": oss.oss_id, "fresh": rule.fresh(age, oss.interval_s), "age_s": round(age, 3), "interval_s": oss.interval_s,
                      "cpu_pct": oss.cpu_pct, "mem_pct": oss.mem_pct, "osts": counts.get(oss.oss_id, 0)})
    return {"osts": list(osts.values()), "oss": osses}
