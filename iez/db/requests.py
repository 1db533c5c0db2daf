"""Applications and their write requests: one row per (application, file), updated in place.

A request carries its file's Lustre policy: ``pool``, ``components`` (the PFL
template, stored as the contract's JSON text, NULL for none) and
``default_layout`` (the canonical template text of the directory default it
was learnt under: ``''`` none, NULL unknown).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from sqlalchemy import Connection, delete, select, update
from sqlalchemy.orm import Session

from iez.db.models import (
    STALE,
    AllocationRow,
    Application,
    Reservation,
    Run,
    WriteRequestRow,
    path_hash,
    utcnow,
)
from iez import errors
from iez.db.lookup import allocation as stored_allocation
from iez.layout.model import components_text, request_policy
from iez.model import Component, Layout

if TYPE_CHECKING:  # the trace package's protocol, for the annotation only: storage needs nothing of it
    from iez.trace.csvformat import LearntRequest

CHUNK = 500  # bound on IN (...) lists


@dataclass(frozen=True)
class RequestIn:
    """A request as stored: its row's values (``source``: traced, darshan or predicted)."""

    file: str
    write_bytes: int
    stripe_count: int
    rank: int = 0
    stripe_size: int | None = None
    source: str = "predicted"
    pool: str | None = None
    components: tuple[Component, ...] = ()  # PFL template (no OSTs)
    default_layout: str | None = None  # canonical template text of the directory default; "" none, None unknown
    mirror_count: int = 1  # copies of the file (FLR mirrors)

    @classmethod
    def learnt(cls, file: str, r: LearntRequest, source: str, stripe_size: int | None = None) -> RequestIn:
        """``r`` stored as ``file`` (a prediction's may have none), with the stripe size its run saw, if any:
        the one place a learnt request's fields become a row's."""
        return cls(file, r.write_bytes, r.stripe_count, r.rank, stripe_size, source, r.pool, r.components,
                   r.default_layout, r.mirror_count)


def row_policy(row: WriteRequestRow | dict[str, Any]) -> tuple[str | None, tuple[Component, ...]]:
    """``(pool, components)`` of a stored request row (an ORM row or a mapping with ``pool``, ``components``,
    ``path``): what :class:`~iez.model.WriteRequest` takes. A stored template that no longer parses is an
    error naming the file."""
    if isinstance(row, dict):  # the path only names the file in messages (a missing one: "None")
        return request_policy(row.get("pool"), row.get("components"), str(row.get("path")))
    return request_policy(row.pool, row.components, row.path)


def policy_json(pool: str | None, components_column: str | None) -> dict:
    """``{"pool", "components"}`` of a stored row for JSON answers (components as the contract's list, or null)."""
    return {"pool": pool, "components": json.loads(components_column) if components_column else None}


class NotFound(errors.NotFound):
    """A named thing is not in the database; the message says which."""


def chunks(items: Sequence, size: int = CHUNK) -> Iterable[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def application(session: Session, name: str, fingerprint: str | None = None, create: bool = False,
                owner: str | None = None) -> Application:
    """The application named ``name``; with ``create``, made when missing, owned by ``owner`` (an existing
    application keeps its owner: only :func:`set_owner` changes it)."""
    app = session.scalar(select(Application).where(Application.name == name))
    if app is None:
        if not create:
            raise NotFound(f"no application named {name!r}")
        app = Application(name=name, fingerprint=fingerprint, owner=owner)
        session.add(app)
        session.flush()
    elif fingerprint and app.fingerprint != fingerprint:
        app.fingerprint = fingerprint
    return app


def set_owner(session: Session, name: str, owner: str | None) -> None:
    """Give the application named ``name`` to ``owner`` (None: nobody; only the service credential reads it)."""
    application(session, name).owner = owner


def retire(session: Session, allocation_ids: Sequence[int]) -> None:
    """Mark allocations stale and free their reservations."""
    for ids in chunks(list(allocation_ids)):
        session.execute(delete(Reservation).where(Reservation.allocation_id.in_(ids)))
        session.execute(update(AllocationRow).where(AllocationRow.id.in_(ids)).values(state=STALE))


def upsert_requests(
    session: Session, app_name: str, requests: Sequence[RequestIn], fingerprint: str | None = None,
    owner: str | None = None,
) -> list[int]:
    """Store the requests; the same (application, file) again updates its row. Returns ids in input order.

    A request whose size, stripe count, stripe size, rank, pool, template or
    learnt directory default changed loses its allocation (it becomes stale
    and its reservations are freed), so the next ``allocate`` places it again.
    A new application is owned by ``owner`` (the user whose requests created it).
    """
    app = application(session, app_name, fingerprint, create=True, owner=owner)
    hashes = [path_hash(r.file) for r in requests]
    existing: dict[str, WriteRequestRow] = {}
    for part in chunks(sorted(set(hashes))):
        for found in session.scalars(
            select(WriteRequestRow).where(WriteRequestRow.app_id == app.id, WriteRequestRow.path_hash.in_(part))
        ):
            existing[found.path_hash] = found
    now = utcnow()
    changed: list[WriteRequestRow] = []
    ids: list[WriteRequestRow] = []
    for request, digest in zip(requests, hashes):
        row = existing.get(digest)
        values = dict(
            write_bytes=request.write_bytes,
            stripe_count=request.stripe_count,
            stripe_size=request.stripe_size,
            rank=request.rank,
            source=request.source,
            pool=request.pool,
            components=components_text(request.components) or None,
            default_layout=request.default_layout,
            mirror_count=request.mirror_count,
        )
        if row is None:
            row = WriteRequestRow(app_id=app.id, path=request.file, path_hash=digest, created=now, updated=now, **values)
            session.add(row)
            existing[digest] = row
        elif any(getattr(row, k) != v for k, v in values.items()):
            for key, value in values.items():
                setattr(row, key, value)
            row.updated = now
            changed.append(row)
        ids.append(row)
    session.flush()
    if changed:
        request_ids = [row.id for row in changed]
        live: list[int] = []
        for part in chunks(request_ids):
            live += session.scalars(
                select(AllocationRow.id).where(AllocationRow.request_id.in_(part), AllocationRow.state != STALE)
            ).all()
        retire(session, live)
    return [row.id for row in ids]


def app_summary(conn: Connection, name: str) -> dict:
    """An application with its requests (and their live allocations) and runs."""
    app = conn.execute(select(Application).where(Application.name == name)).mappings().first()
    if app is None:
        raise NotFound(f"no application named {name!r}")
    live = (
        select(AllocationRow.request_id, AllocationRow.stripe_size, AllocationRow.stripe_count,
               AllocationRow.osts, AllocationRow.policy, AllocationRow.state,
               AllocationRow.pool.label("allocation_pool"), AllocationRow.layout.label("allocation_layout"))
        .where(AllocationRow.state != STALE)
        .subquery()
    )
    rows = conn.execute(
        select(WriteRequestRow, live)
        .outerjoin(live, live.c.request_id == WriteRequestRow.id)
        .where(WriteRequestRow.app_id == app["id"])
        .order_by(WriteRequestRow.rank, WriteRequestRow.id)
    ).all()
    requests = []
    for row in rows:
        m = row._mapping
        allocation = None
        if m["osts"] is not None:  # the layout's one JSON form, its policy and state after the plain fields
            shown = Layout.to_json(stored_allocation((m["path"], m["stripe_size_1"], m["stripe_count_1"], m["osts"],
                                                      m["allocation_pool"], m["allocation_layout"])))
            plain = {key: shown.pop(key) for key in ("stripe_size", "stripe_count", "osts")}
            allocation = {**plain, "policy": m["policy"], "state": m["state"], **shown}
        requests.append(
            {
                "id": m["id"],
                "file": m["path"],
                "write_bytes": m["write_bytes"],
                "stripe_count": m["stripe_count"],
                "stripe_size": m["stripe_size"],
                "rank": m["rank"],
                "source": m["source"],
                **policy_json(m["pool"], m["components"]),
                "default_layout": m["default_layout"],
                "allocation": allocation,
            }
        )
    runs = [
        {
            "id": run.id,
            "started": run.started.isoformat() + "Z",
            "ended": run.ended.isoformat() + "Z" if run.ended else None,
            "files_found": run.files_found,
            "files_missed": run.files_missed,
            "files_skipped": run.files_skipped,
        }
        for run in conn.execute(select(Run).where(Run.app_id == app["id"]).order_by(Run.id)).all()
    ]
    return {
        "name": app["name"],
        "owner": app["owner"],
        "fingerprint": app["fingerprint"],
        "created": app["created"].isoformat() + "Z",
        "requests": requests,
        "pending": sum(1 for r in requests if r["allocation"] is None),
        "runs": runs,
    }
