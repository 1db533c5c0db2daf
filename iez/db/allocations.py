"""Allocations: load pending requests, save a placement pass, pin a layout by hand, look layouts up.

Deciding where files go is :mod:`iez.placement`'s job; this module only loads and saves.

A path has at most one live (non-stale) allocation: storing a new one for the
same path retires the old one. An allocation with a pool or components (PFL)
also stores its layout text (version 2, :mod:`iez.layout.emulated`), which the
placement library applies instead of the plain columns, and the directory
default its request was learnt under (``default_layout``), which the library
checks before applying. Lookups send the same statements as the API's reader
(:func:`iez.db.lookup.one_statement`), not ORM objects.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Sequence

from sqlalchemy import Connection, Engine, exists, func, insert, select
from sqlalchemy.orm import Session

from iez.lustre_limits import MAX_STRIPE_COUNT, MAX_STRIPE_SIZE, STRIPE_ALIGNMENT
from iez.db.engine import is_sqlite, write_transaction
from iez.db.models import (
    MAX_PATH_BYTES,
    PLANNED,
    STALE,
    AllocationRow,
    Application,
    OstRow,
    Reservation,
    WriteRequestRow,
    osts_text,
    utcnow,
)
from iez.db.lookup import layout, many_statement, newest_per_path, one_statement
from iez.db.requests import chunks, retire
from iez.layout.emulated import format_attr
from iez.model import Allocation, Layout

MANUAL = "manual"


def check_layout(path: str, stripe_size: int, osts: Sequence[int]) -> None:
    """Refuse a layout Lustre would refuse; the message names the bad part."""
    check_path(path)
    if stripe_size <= 0 or stripe_size % STRIPE_ALIGNMENT or stripe_size > MAX_STRIPE_SIZE:
        raise ValueError(
            f"stripe size {stripe_size} must be a positive multiple of {STRIPE_ALIGNMENT} "
            f"at most {MAX_STRIPE_SIZE} (Lustre keeps it in 32 bits)"
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
    live: list[int] = []
    for part in chunks(sorted(set(paths))):
        live += session.scalars(
            select(AllocationRow.id).where(AllocationRow.path.in_(part), AllocationRow.state != STALE)
        ).all()
    retire(session, live)


def pin(engine: Engine, path: str, stripe_size: int, osts: Sequence[int]) -> Allocation:
    """Store a layout chosen by hand for one file (no reservation: the administrator decides)."""
    check_layout(path, stripe_size, osts)
    def body(session: Session) -> None:
        _retire_paths(session, [path])
        session.add(
            AllocationRow(path=path, stripe_size=stripe_size, stripe_count=len(osts), osts=osts_text(osts),
                          policy=MANUAL, created=utcnow())
        )

    write_transaction(engine, body)
    return Allocation(path, stripe_size, tuple(osts), MANUAL)


def pin_layout(engine: Engine, path: str, layout: Layout, pool: str | None = None) -> Allocation:
    """Store a pooled or composite layout chosen by hand (``iez alloc add --pool/--layout``): the placed
    components' OSTs in the plain columns, the layout text the library applies in ``layout``, ``pool`` (default:
    the layout's). The caller has checked it against Lustre's rules (:mod:`iez.layout.rules`)."""
    check_path(path)
    if not layout.osts:
        raise ValueError("the layout places no OST: give osts to at least one component")
    allocation = Allocation.of(path, replace(layout, pool=pool or layout.pool), MANUAL)
    def body(session: Session) -> None:
        _retire_paths(session, [path])
        session.add(
            AllocationRow(path=path, stripe_size=layout.stripe_size, stripe_count=len(layout.osts),
                          osts=osts_text(layout.osts), policy=MANUAL, created=utcnow(), pool=allocation.pool,
                          layout=layout_text(allocation))
        )

    write_transaction(engine, body)
    return allocation


def pending_requests(session: Session, app_id: int) -> list[WriteRequestRow]:
    """The application's requests without a live allocation (refused ones included), rank order."""
    return list(
        session.scalars(
            select(WriteRequestRow)
            .where(WriteRequestRow.app_id == app_id, ~has_live_allocation())
            .order_by(WriteRequestRow.rank, WriteRequestRow.id)
        )
    )


def has_live_allocation():
    """The one definition of "placed": a request with a non-stale allocation."""
    return exists().where(AllocationRow.request_id == WriteRequestRow.id, AllocationRow.state != STALE)


def pending_counts(conn: Connection | Session) -> frozenset[tuple[str, int]]:
    """Applications with pending requests, and how many each (one plain query)."""
    rows = conn.execute(
        select(Application.name, func.count())
        .join(WriteRequestRow, WriteRequestRow.app_id == Application.id)
        .where(~has_live_allocation())
        .group_by(Application.name)
    )
    return frozenset((name, int(n)) for name, n in rows)


def reported_avail(session: Session) -> dict[int, int]:
    """Each OST's last reported ``kbytes_avail``: the baseline a new reservation is paid from."""
    return dict(session.execute(select(OstRow.ost_index, OstRow.kbytes_avail)).all())


def store_placement(session: Session, pending: Sequence[WriteRequestRow], outcomes: Sequence[Allocation | str],
                    policy_name: str, now: datetime, reservation_ttl_s: float) -> list[Allocation]:
    """Save a pass's outcome: allocations with their reservations, and each refused file's reason.

    ``outcomes[i]`` is the allocation of ``pending[i]`` or the reason it was refused. Returns the allocations.
    """
    placed = [(row, a) for row, a in zip(pending, outcomes) if isinstance(a, Allocation)]
    refused = [(row, why) for row, why in zip(pending, outcomes) if isinstance(why, str)]
    for row, why in refused:
        row.refusal = why[:512]
    if not placed:
        return []
    for row, _ in placed:
        row.refusal = None
    _retire_paths(session, [a.file for _, a in placed])
    reported = reported_avail(session)
    expires = now + timedelta(seconds=reservation_ttl_s)
    # Bulk statements: ORM objects cost about 0.5 ms per file, a real problem for 10,000-file jobs.
    ids = session.scalars(
        insert(AllocationRow).returning(AllocationRow.id, sort_by_parameter_order=True),
        [{"request_id": row.id, "path": row.path, "stripe_size": a.stripe_size, "stripe_count": a.stripe_count,
          "osts": osts_text(a.osts), "policy": policy_name, "state": PLANNED, "created": now,
          "pool": a.pool, "layout": layout_text(a), "default_layout": row.default_layout,
          "note": a.note[:512] or None}
         for row, a in placed],
    ).all()
    reservations = [{"allocation_id": i, "ost_index": ost, "bytes": b, "expires": expires,
                     "avail_kb_at": reported.get(ost)}
                    for i, (row, a) in zip(ids, placed)
                    for ost, b in _object_sizes(row.write_bytes, a)]
    for start in range(0, len(reservations), 10_000):
        session.execute(insert(Reservation), reservations[start:start + 10_000])
    return [a for _, a in placed]


#: The refusal of an allocation without OSTs (every byte the file reaches is in its Data-on-MDT component):
#: iez has nothing to choose, and Lustre applies the directory's default.
NOTHING_TO_PLACE = "no OST to choose: the file's predicted bytes all fall in its Data-on-MDT component"


def layout_text(allocation: Allocation) -> str | None:
    """The layout text the library applies (version 2; version 3 with the preferred copy marked for mirrors)
    when the allocation has a pool, components or mirrors, else None: the plain columns say it all."""
    if not allocation.pool and not allocation.components and not allocation.mirrors:
        return None
    return format_attr(allocation)


def _object_sizes(write_bytes: int, allocation: Allocation) -> list[tuple[int, int]]:
    """``(OST, bytes)`` each stripe object will hold (:meth:`Allocation.objects`: RAID-0 with wrap-around per
    component, every copy of a mirrored file), but at least the bytes of its extent up to one stripe: an object
    a small file leaves short or empty is reserved as if it held that much, so placements made before the next
    report never count on it staying small."""
    return [(ost, max(b, min(c.stripe_size or 0, c.bytes_in(write_bytes))))
            for c, ost, b in allocation.objects(write_bytes)]


def lookup(conn: Connection, path: str) -> dict | None:
    """The live layout of ``path`` as ``{"file", "stripe_size", "stripe_count", "osts"}`` (and ``pool``,
    ``components`` when it has them), or None."""
    row = conn.exec_driver_sql(one_statement(is_sqlite(conn)), (path,)).first()
    return layout(row) if row is not None else None


def lookup_many(conn: Connection, paths: Sequence[str]) -> dict[str, dict]:
    """Live layouts of the paths that have one, by path."""
    lite = is_sqlite(conn)
    rows: list[Sequence] = []
    for part in chunks(sorted(set(paths))):
        rows += conn.exec_driver_sql(many_statement(lite, len(part)), tuple(part)).fetchall()
    return {path: layout(row[1:]) for path, row in newest_per_path(rows).items()}
