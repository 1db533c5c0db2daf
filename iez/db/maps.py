"""What a layout map holds (:mod:`iez.maps`): an application's live layouts, read in one pass for the export.

The map replaces per-file lookups for a whole job, so it must answer exactly
what a lookup would: each path's live allocation (:func:`~iez.db.lookup.newest_per_path`),
with the columns the placement library reads.
"""

from __future__ import annotations

from sqlalchemy import Connection, select

from iez.db.lookup import newest_per_path
from iez.db.models import STALE, AllocationRow, Application, WriteRequestRow

_COLUMNS = (AllocationRow.id, AllocationRow.path, AllocationRow.stripe_size, AllocationRow.stripe_count,
            AllocationRow.osts, AllocationRow.layout, AllocationRow.default_layout)
_APP_ROWS = (
    select(*_COLUMNS)
    .join(WriteRequestRow, AllocationRow.request_id == WriteRequestRow.id)
    .join(Application, WriteRequestRow.app_id == Application.id)
)
_PINNED_ROWS = select(*_COLUMNS).where(AllocationRow.request_id.is_(None), AllocationRow.state != STALE)


def app_layouts(conn: Connection, app: str, pinned: bool = False) -> list[tuple]:
    """``(path, stripe_size, stripe_count, osts, layout, default_layout)`` of the live layout of each of ``app``'s
    files (and, with ``pinned``, of every file pinned by hand)."""
    rows = list(conn.execute(_APP_ROWS.where(Application.name == app, AllocationRow.state != STALE)))
    if pinned:
        rows += list(conn.execute(_PINNED_ROWS))
    return [tuple(row[1:]) for row in newest_per_path(rows).values()]
