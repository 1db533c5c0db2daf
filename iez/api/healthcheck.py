"""What ``/healthz`` checks: the interaction DB answers, takes a write, and (SQLite) has room, in bounded time.

Three parts, each named in the answer so an operator sees which one broke:

- ``reachable``: a new connection (not a pooled one, which may outlive a dropped
  database or a restarted server) answers ``SELECT 1``;
- ``writable``: a real write commits: ``alembic_version``'s one row is updated
  to itself, in a write transaction (SQLite writes the page; MariaDB checks the
  UPDATE privilege and the server's read-only state). It is a table only
  ``iez db upgrade`` otherwise writes, so no writer ever waits on it;
- ``disk`` (SQLite): the file system holding the DB has at least
  ``IEZ_API_MIN_FREE`` (default 16 MiB) free for the WAL and new rows.

The whole check runs in a thread and is given ``TIMEOUT_S``: a stalled server
(connected, never answering) is reported as ``stalled`` when that passes. The
probe engine gives up by itself soon after (:func:`iez.db.engine.make_probe`), and
callers that come while a check runs share it, so a stalled DB cannot pile threads up.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from iez.config import DEFAULT_MIN_FREE, Settings, describe, variable
from iez.db import health
from iez.db.engine import DatabaseUnavailable, make_probe, unavailable

TIMEOUT_S = 3.0


def min_free_from_env(env: dict[str, str] | None = None) -> int:
    """``IEZ_API_MIN_FREE`` in bytes (default 16 MiB, 0: no disk check; :class:`iez.config.Settings`)."""
    return Settings.from_env(env=env).api_min_free


def _reason(err: BaseException) -> str:
    orig = getattr(err, "orig", None)
    return str(orig or err).strip().splitlines()[0] if str(orig or err).strip() else type(err).__name__


class HealthCheck:
    """Checks the DB of ``engine`` on a probe engine of its own; :meth:`run` gives ``(healthy, answer)``."""

    def __init__(self, engine: Engine, min_free: int | None = None, timeout_s: float = TIMEOUT_S):
        self.url = engine.url
        self.sqlite = engine.dialect.name == "sqlite"
        self.probe = make_probe(engine.url, timeout_s=max(1, int(timeout_s) - 1))
        self.min_free = DEFAULT_MIN_FREE if min_free is None else min_free
        self.timeout_s = timeout_s
        self._running: asyncio.Future | None = None

    async def run(self) -> tuple[bool, dict]:
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._bounded())
        return await asyncio.shield(self._running)

    async def _bounded(self) -> tuple[bool, dict]:
        start = time.monotonic()
        try:
            checks = await asyncio.wait_for(asyncio.to_thread(self.check), self.timeout_s)
        except asyncio.TimeoutError:
            checks = {"reachable": {"ok": False, "detail": f"stalled: interaction DB {describe(self.url)} "
                                                           f"did not answer within {self.timeout_s:g} s"}}
        healthy = all(part["ok"] for part in checks.values())
        answer = {"status": "ok" if healthy else "unhealthy", "db": describe(self.url), "checks": checks,
                  "seconds": round(time.monotonic() - start, 3)}
        if not healthy:
            answer["detail"] = "; ".join(f"{name}: {part['detail']}" for name, part in checks.items()
                                         if not part["ok"])
        return healthy, answer

    def check(self) -> dict[str, dict]:
        """The parts, in order; a part that cannot be reached is not tried."""
        checks: dict[str, dict] = {}
        try:
            with self.probe.connect() as conn:
                health.answers(conn)
                conn.commit()
                checks["reachable"] = {"ok": True}
                checks["writable"] = self._write(conn)
        except DatabaseUnavailable as err:  # a missing SQLite file or MariaDB database
            checks["reachable"] = {"ok": False, "detail": str(err)}
        except DBAPIError as err:
            if "reachable" in checks:  # lost while writing
                checks["writable"] = {"ok": False, "detail": _reason(err)}
            else:
                checks["reachable"] = {"ok": False, "detail": str(unavailable(self.probe, err))}
        if self.sqlite and self.url.database:  # a file's (iez.config refuses an in-memory DB)
            checks["disk"] = self._disk(self.url.database)
        return checks

    def _write(self, conn) -> dict:
        try:
            conn.execution_options(iez_write=True)  # SQLite: BEGIN IMMEDIATE, the write lock up front
            health.write_probe(conn)
            conn.commit()
        except SQLAlchemyError as err:
            try:
                conn.rollback()
            except SQLAlchemyError:
                pass
            return {"ok": False, "detail": f"interaction DB {describe(self.url)} refuses writes: {_reason(err)}"}
        return {"ok": True}

    def _disk(self, database: str) -> dict:
        folder = Path(database).parent
        try:
            info = os.statvfs(folder)
        except OSError as err:
            return {"ok": False, "detail": f"cannot check the free space of {folder}: {err.strerror}"}
        free = info.f_bavail * info.f_frsize
        part: dict[str, object] = {"ok": free >= self.min_free, "free_bytes": free}
        if not part["ok"]:
            part["detail"] = (f"{folder} has {free} bytes free, less than {self.min_free} "
                              f"({variable('api_min_free')}): the interaction DB cannot grow")
        return part

    def dispose(self) -> None:
        self.probe.dispose()
