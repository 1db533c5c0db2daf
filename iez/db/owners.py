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

from iez.db.lookup import CHUNK, LayoutReader, layout, many_statement, newest_per_path, one_statement
from iez.db.models import Application

_OWNER = ", p.owner"
_JOINS = " LEFT JOIN write_requests r ON r.id = a.request_id LEFT JOIN applications p ON p.id = r.app_id"


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
        self._one_owned = one_statement(self._sqlite, _OWNER, _JOINS)

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
            rows = []
            for start in range(0, len(unique), CHUNK):
                part = unique[start : start + CHUNK]
                cursor.execute(many_statement(self._sqlite, len(part), _OWNER, _JOINS), part)
                rows += cursor.fetchall()
            cursor.close()
            return {path: layout(row[1:8]) for path, row in newest_per_path(rows).items() if row[8] == owner}

        return self._run(query)
