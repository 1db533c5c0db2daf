"""``iez learn --darshan-dir DIR [--watch]``: learn from a site's Darshan log tree as logs appear.

Darshan writes one log per job under ``DIR/YYYY/M/D/`` (``darshan-mk-log-dirs``), named
``<user>_<exe>_id<jobid>_<month>-<day>-<seconds>-<hash>.darshan``; a log being written is
``*.darshan_partial`` and renamed when complete, so only ``*.darshan`` files are read.

Each pass walks the tree and imports the logs it has not imported yet. A log is known by its path, size
and modification time (``st_mtime_ns``) in the state database (SQLite, :mod:`iez.db.darshan_state`, default
``$IEZ_STATE_DIR/darshan-imports.sqlite``): a log with the same three is never read again, whatever its
outcome was (a corrupt log is one line on stderr and is recorded as such, not retried); a log rewritten
in place (another size or time) is read again. The state holds, per imported log, its requests, so the
next run of an application is predicted from all its runs without re-reading an old log.

Grouping (documented rule): the **application** is the base name of the executable the log records
(its metadata ``exe``, first word), else the ``<exe>`` of the file name; the **user** is the ``<user>``
of the file name, else ``uid<N>`` of the log's job record. A group's runs are ordered by (job start in
the name's ``<seconds>``, mtime, path). The requests are stored under the application name
``<exe>.<user>`` (Lustre's default job id ``%e.%u``), owned by that user, after each pass for every group
that got a new log (the AIPA prediction of :mod:`iez.predict.aipa`, as ``iez learn APP --trace``).

A pass is restartable at any point: a log's row and its requests are committed together, and a group
is predicted again at the next pass when the pass that imported its log stopped before predicting
(``pending`` groups are kept in the state).
"""

from __future__ import annotations

import os
import re
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from iez.db import darshan_state as state

#: ``<user>_<exe>_id<jobid>_<month>-<day>-<seconds>-<hash>.darshan`` (the exe may hold underscores).
_NAME = re.compile(r"^(?P<user>[^_]+)_(?P<exe>.+)_id(?P<jobid>\d+)_(?P<month>\d+)-(?P<day>\d+)-(?P<secs>\d+)")
STATE_FILE = "darshan-imports.sqlite"


@dataclass
class PassResult:
    seen: int = 0
    imported: int = 0
    corrupt: int = 0
    skipped: int = 0  # known already
    groups: int = 0
    stored: int = 0
    seconds: float = 0.0
    read_seconds: float = 0.0

    def to_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def find_logs(root: Path) -> list[Path]:
    """The complete logs below ``root`` (``*.darshan``; ``*.darshan_partial`` are still being written)."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        out.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".darshan"))
    return out


def identify(path: Path, exe: str, uid: int | None) -> tuple[str, str, float]:
    """(application, user, start key) of a log, by the rule in the module text."""
    m = _NAME.match(path.name)
    app = os.path.basename(exe.split()[0]) if exe and exe.split() else ""
    if not app and m:
        app = m.group("exe")
    user = m.group("user") if m else (f"uid{uid}" if uid is not None else "unknown")
    start = float(m.group("secs")) if m else 0.0
    return app or "unknown", user, start


def _read(path: Path):
    """(app, user, jobid, start, requests as PRequest.to_dict objects) of one log; ValueError for a bad log."""
    from iez.predict.series import from_request
    from iez.trace.darshan import read_log

    imported = read_log(path)
    uid = None
    app, user, start = identify(path, imported.exe, uid)
    requests = [from_request(r).to_dict() for r in imported.requests]  # the file's policy (pool, PFL, mirrors) too
    m = _NAME.match(path.name)  # the scheduler's job id of the name, else the log's own
    return app, user, m.group("jobid") if m else str(imported.jobid or ""), start, requests


def import_new(conn: sqlite3.Connection, root: Path, say=print) -> tuple[PassResult, set[tuple[str, str]]]:
    """Import the logs not imported yet; returns the pass's counts and the groups that got a new log."""
    result = PassResult()
    touched: set[tuple[str, str]] = set()
    known = state.known_logs(conn)
    for path in find_logs(root):
        result.seen += 1
        try:
            st = path.stat()
        except OSError:
            continue  # removed under us
        key = str(path)
        if known.get(key) == (st.st_size, st.st_mtime_ns):
            result.skipped += 1
            continue
        started = time.perf_counter()
        try:
            app, user, jobid, start, requests = _read(path)
        except (ValueError, OSError) as err:
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
            why = why if why.startswith(key) else f"{key}: {why}"
            say(f"iez learn: skipping a corrupt Darshan log: {why[:400]}", file=sys.stderr)
            state.record_corrupt(conn, key, st.st_size, st.st_mtime_ns, str(err))
            result.corrupt += 1
            result.read_seconds += time.perf_counter() - started
            continue
        result.read_seconds += time.perf_counter() - started
        state.record_imported(conn, key, st.st_size, st.st_mtime_ns, app, user, jobid, start, requests)
        result.imported += 1
        touched.add((app, user))
    return result, touched


def group_runs(conn: sqlite3.Connection, app: str, user: str):
    """The group's runs, oldest first, from the state (no log is read again)."""
    from iez.predict.series import from_dict, make_run

    runs = []
    for path, jobid, requests in state.group_logs(conn, app, user):
        reqs = [from_dict(r, f"{path} (Darshan import state)") for r in requests]
        if reqs:
            runs.append(make_run(jobid or Path(path).name, reqs))
    return runs


def learn_pending(conn: sqlite3.Connection, settings, selection: str = "fast", say=print) -> tuple[int, int]:
    """Predict and store every pending group; returns (groups, requests stored)."""
    from iez.predict.aipa import predict
    from iez.predict.learn import record_learning

    groups = stored = 0
    for app, user in state.pending_groups(conn):
        runs = group_runs(conn, app, user)
        if runs:
            prediction = predict(runs, selection)
            done = record_learning(settings, f"{app}.{user}", prediction, owner=user)
            stored += done["stored"]
            groups += 1
        state.group_done(conn, app, user)
    return groups, stored


def one_pass(conn: sqlite3.Connection, root: Path, settings, selection: str = "fast", say=print) -> PassResult:
    started = time.perf_counter()
    result, _ = import_new(conn, root, say)
    result.groups, result.stored = learn_pending(conn, settings, selection, say)
    result.seconds = time.perf_counter() - started
    return result
