"""Allocations: place an application's pending requests, pin a layout by hand, look layouts up.

A path has at most one live (non-stale) allocation: storing a new one for the
same path retires the old one. Lookups are the placement library's hot path
and use lean Core statements, not ORM objects.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Callable, Sequence

from sqlalchemy import Connection, Engine, bindparam, exists, insert, select
from sqlalchemy.orm import Session

from iez.allocate import AllocationError, make_policy
from iez.db.engine import write_session
from iez.db.models import (
    MAX_PATH_BYTES,
    PLANNED,
    STALE,
    AllocationRow,
    OstRow,
    Reservation,
    WriteRequestRow,
    osts_text,
    parse_osts,
    utcnow,
)
from iez.db.requests import application, chunks, retire
from iez.db.stats import usable_cluster
from iez.model import Allocation, ClusterState, WriteRequest

MANUAL = "manual"
MAX_STRIPE_COUNT = 2000
STRIPE_ALIGNMENT = 65536
MAX_STRIPE_SIZE = 4 * 1024**3  # Lustre keeps the stripe size in 32 bits


def check_layout(path: str, stripe_size: int, osts: Sequence[int]) -> None:
    """Refuse a layout Lustre would refuse; the message names the bad part."""
    check_path(path)
    if stripe_size <= 0 or stripe_size % STRIPE_ALIGNMENT or stripe_size >= MAX_STRIPE_SIZE:
        raise ValueError(
            f"stripe size {stripe_size} must be a positive multiple of {STRIPE_ALIGNMENT} below {MAX_STRIPE_SIZE}"
        )
    if not 1 <= len(osts) <= MAX_STRIPE_COUNT:
        raise ValueError(f"OST list must name 1 to {MAX_STRIPE_COUNT} OSTs, got {len(osts)}")
    if any(o < 0 for o in osts):
        raise ValueError(f"OST indices must be >= 0, got {list(osts)}")
    if len(set(osts)) != len(osts):
        raise ValueError(f"OST list {list(osts)} names an OST twice")


def check_path(path: str) -> None:
    if not path.startswith("/"):
        raise ValueError(f"file {path!r} must be an absolute path")
    if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise ValueError(f"file path is longer than {MAX_PATH_BYTES} bytes")
    if "\x00" in path:
        raise ValueError("file path contains a NUL byte")


def _retire_paths(session: Session, paths: Sequence[str]) -> None:
    live = []
    for part in chunks(sorted(set(paths))):
        live += session.scalars(
            select(AllocationRow.id).where(AllocationRow.path.in_(part), AllocationRow.state != STALE)
        ).all()
    retire(session, live)


def pin(engine: Engine, path: str, stripe_size: int, osts: Sequence[int]) -> Allocation:
    """Store a layout chosen by hand for one file (no reservation: the administrator decides)."""
    check_layout(path, stripe_size, osts)
    with write_session(engine) as session:
        _retire_paths(session, [path])
        session.add(
            AllocationRow(path=path, stripe_size=stripe_size, stripe_count=len(osts), osts=osts_text(osts),
                          policy=MANUAL, created=utcnow())
        )
    return Allocation(path, stripe_size, tuple(osts), MANUAL)


def pending_requests(session: Session, app_id: int) -> list[WriteRequestRow]:
    live = exists().where(AllocationRow.request_id == WriteRequestRow.id, AllocationRow.state != STALE)
    return list(
        session.scalars(
            select(WriteRequestRow)
            .where(WriteRequestRow.app_id == app_id, ~live)
            .order_by(WriteRequestRow.rank, WriteRequestRow.id)
        )
    )


def allocate_app(
    engine: Engine, app_name: str, policy_name: str, stale_s: float, reservation_ttl_s: float, seed: int = 0,
    cluster_of: Callable[[Session, datetime], ClusterState] | None = None, policy_options: dict | None = None,
) -> list[Allocation]:
    """Place the application's pending requests and store allocations and reservations in one transaction.

    The policy sees the OSTs of fresh OSSs with their reported free space less
    every active reservation. Raises :class:`~iez.db.requests.NotFound` for an
    unknown application and :class:`AllocationError` when the requests do not fit
    (nothing is stored then).
    """
    policy = make_policy(policy_name, seed=seed, **(policy_options or {}))
    with write_session(engine) as session:
        app = application(session, app_name)
        pending = pending_requests(session, app.id)
        if not pending:
            return []
        now = utcnow()
        # The MDS passes its live view (per-OSS staleness, I/O congestion); the API uses the DB's.
        cluster = cluster_of(session, now) if cluster_of else usable_cluster(session, now, stale_s)
        reported = dict(session.execute(select(OstRow.ost_index, OstRow.kbytes_avail)).all())
        requests = [WriteRequest(app_name, r.path, r.write_bytes, r.stripe_count, r.rank) for r in pending]
        placed = policy.allocate(cluster, requests)
        _check_capacity(cluster, placed)
        _retire_paths(session, [a.file for a in placed])
        expires = now + timedelta(seconds=reservation_ttl_s)
        # Bulk statements: ORM objects cost about 0.5 ms per file, a real problem for 10,000-file jobs.
        ids = session.scalars(
            insert(AllocationRow).returning(AllocationRow.id, sort_by_parameter_order=True),
            [{"request_id": row.id, "path": row.path, "stripe_size": a.stripe_size, "stripe_count": a.stripe_count,
              "osts": osts_text(a.osts), "policy": policy_name, "state": PLANNED, "created": now}
             for row, a in zip(pending, placed)],
        ).all()
        reservations = [{"allocation_id": i, "ost_index": ost, "bytes": a.stripe_size, "expires": expires,
                         "avail_kb_at": reported.get(ost)} for i, a in zip(ids, placed) for ost in a.osts]
        for start in range(0, len(reservations), 10_000):
            session.execute(insert(Reservation), reservations[start:start + 10_000])
    return placed


def _check_capacity(cluster: ClusterState, placed: Sequence[Allocation]) -> None:
    """Refuse (never store) a placement that puts more on an OST than it has free."""
    wanted: dict[int, int] = defaultdict(int)
    for allocation in placed:
        for ost in allocation.osts:
            wanted[ost] += allocation.stripe_size
    free = {ost.index: ost.bytes_avail for ost in cluster.osts}
    for ost, size in wanted.items():
        if ost not in free:
            raise AllocationError(None, f"policy chose OST {ost}, which is not usable")
        if size > free[ost]:
            raise AllocationError(None, f"policy put {size} bytes on OST {ost}, which has {free[ost]} free")


_LOOKUP_COLUMNS = (AllocationRow.path, AllocationRow.stripe_size, AllocationRow.stripe_count, AllocationRow.osts)
_LOOKUP_ONE = (
    select(*_LOOKUP_COLUMNS)
    .where(AllocationRow.path == bindparam("path"), AllocationRow.state != STALE)
    .order_by(AllocationRow.id.desc())
    .limit(1)
)


def as_json(row) -> dict:
    return {"file": row[0], "stripe_size": row[1], "stripe_count": row[2], "osts": parse_osts(row[3])}


def lookup(conn: Connection, path: str) -> dict | None:
    """The live layout of ``path`` as ``{"file", "stripe_size", "stripe_count", "osts"}``, or None."""
    row = conn.execute(_LOOKUP_ONE, {"path": path}).first()
    return as_json(row) if row is not None else None


def lookup_many(conn: Connection, paths: Sequence[str]) -> dict[str, dict]:
    """Live layouts of the paths that have one, by path."""
    found: dict[str, tuple[int, tuple]] = {}
    for part in chunks(sorted(set(paths))):
        rows = conn.execute(
            select(AllocationRow.id, *_LOOKUP_COLUMNS).where(AllocationRow.path.in_(part), AllocationRow.state != STALE)
        )
        for row in rows:
            if row[1] not in found or found[row[1]][0] < row[0]:
                found[row[1]] = (row[0], tuple(row[1:]))
    return {path: as_json(row) for path, (_, row) in found.items()}
