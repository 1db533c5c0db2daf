"""Who owns what: an application's owner (migration 0007), and layout lookups that answer only an owner's files.

A file's live layout belongs to the owner of the application whose request it
was allocated for; a layout pinned by hand (``iez alloc add``, no request) and
an application without an owner belong to nobody, so only the service
credential sees them. A lookup first finds the file's live layout (the newest
non-stale row, as :class:`~iez.db.lookup.LayoutReader` does) and then checks its
owner, so an older row of the same path can never stand in for it.
"""

from __future__ import annotations

import os
import pwd
from typing import Sequence

from sqlalchemy import Connection, Engine, select

from iez.db.lookup import CHUNK, LayoutReader, layout
from iez.db.models import Application

_COLUMNS = "a.path, a.stripe_size, a.stripe_count, a.osts, a.pool, a.layout, a.note, p.owner"
_FROM = ("FROM allocations a{hint} LEFT JOIN write_requests r ON r.id = a.request_id "
         "LEFT JOIN applications p ON p.id = r.app_id")
_ONE = f"SELECT {_COLUMNS} {_FROM} WHERE a.path = {{p}} AND a.state <> 'stale' ORDER BY a.id DESC LIMIT 1"
_MANY = f"SELECT a.id, {_COLUMNS} {_FROM} WHERE a.path IN ({{ps}}) AND a.state <> 'stale'"


def login_user() -> str:
    """The user running this process, as an application's owner: what ``iez learn``, ``iez run`` and ``iez trace
    --store`` record when their requests create an application (the API names MUNGE users the same way)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def owner_of(conn: Connection, app: str) -> tuple[bool, str | None]:
    """``(exists, owner)`` of the application named ``app``."""
    row = conn.execute(select(Application.owner).where(Application.name == app)).first()
    return (False, None) if row is None else (True, row[0])


class OwnedLayoutReader(LayoutReader):
    """:class:`LayoutReader` whose answers are limited to one owner's files (the same JSON, the same
    per-thread autocommit connections and retry)."""

    def __init__(self, engine: Engine):
        super().__init__(engine)
        hint = "" if self._sqlite else " FORCE INDEX (ix_allocations_path)"
        self._one_owned = _ONE.format(hint="", p=self._mark)
        self._many_owned = _MANY.replace("{hint}", hint)

    def owned_one(self, path: str, owner: str) -> dict | None:
        """The live layout of ``path`` when ``owner`` owns it, else None (as for a path without one)."""

        def query(cursor):
            cursor.execute(self._one_owned, (path,))
            row = cursor.fetchone()
            cursor.close()
            return layout(row[:7]) if row is not None and row[7] == owner else None

        return self._run(query)

    def owned_many(self, paths: Sequence[str], owner: str) -> dict[str, dict]:
        """Live layouts of those ``paths`` that ``owner`` owns, by path."""
        unique = list(dict.fromkeys(paths))

        def query(cursor):
            best: dict[str, tuple] = {}
            for start in range(0, len(unique), CHUNK):
                part = unique[start : start + CHUNK]
                cursor.execute(self._many_owned.replace("{ps}", ",".join([self._mark] * len(part))), part)
                for row in cursor.fetchall():
                    if row[1] not in best or best[row[1]][0] < row[0]:
                        best[row[1]] = row
            cursor.close()
            return {path: layout(row[1:8]) for path, row in best.items() if row[8] == owner}

        return self._run(query)
