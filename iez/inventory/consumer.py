"""The changelog consumer: records applied in order, in batches, each batch committed with its position.

One batch is one transaction: the namespace changes (creates, renames, unlinks, directories) in record
order, then every file a record says changed is looked at once (``lstat`` and its layout; on Lustre its
path from ``lfs fid2path``), then the consumer's position (the batch's last record) is written in the same
transaction. Only after the commit is ``lfs changelog_clear MDT USER ENDREC`` run with that position: a
consumer killed at any point restarts from its committed position, re-reads at most the uncleared batch
(records at or below the position are skipped), and applies no record twice nor loses one. A batch MariaDB/Galera
refuses (certification failure, deadlock, lock wait time-out: :func:`store.write`) is run again whole; it
changes nothing outside its transaction before the commit (the directory map is reloaded after a refusal),
and the report and the clear follow the commit.

Batches are large (:data:`BATCH`, 100,000 records): the records of a batch are coalesced per FID before
anything is read (a file created, written, closed and set-attributed is one ``lstat``, one layout read and
one row; one created and unlinked in the batch is neither looked at nor written), and a file that could not
be found (renamed or unlinked later in the log) is looked at again once per batch, so fewer batches are
fewer looks: measured 20,000 -> 100,000 records a batch, 21,000 -> 30,000 records/s into SQLite. Applying a
record twice would be harmless anyway: every row written is an upsert from the file as it is now.

A file that moved or vanished before it was looked at is marked ``stale`` and looked at again with every
batch until a later record (its rename or unlink) settles it.

**The high-water rule.** A changelog that fills makes the MDT (or ``changelog_gc``) drop records a consumer
has not cleared, and inotify drops events when its queue overflows. The consumer never trusts a hole:

- a *gap* in record numbers (the next record is beyond position + 1), or
- a ``MARK`` record named ``iez-lost-events`` (the emulated MDT lost events: queue overflow, or it was not
  running), or
- a backlog of more than ``max_lag`` records (default :data:`MAX_LAG`: replaying would take longer than a
  scan; where the reader can tell the log's last record)

each makes it say so (a note on its position row, the report's ``rescans``) and rescan its roots
(:func:`iez.inventory.scan.scan`, which also drops what no longer exists) before it goes on: records after
the hole are still applied, harmlessly, since each restates a file as it now is.
"""

from __future__ import annotations

import os
import shutil
import stat as statmod
import subprocess
import time
from dataclasses import dataclass, field

from sqlalchemy import Engine, func, select, update

from iez.inventory import store
from iez.inventory.changelog import LAST_LINK, LOST_EVENTS, ZERO_FID, Record, fid_of_inode, parse_many
from iez.inventory.scan import file_row, scan
from iez.inventory.tables import InvFile, InvRoot
from iez.layout.read import LayoutReader
from iez.move.temps import is_temporary

#: Records per batch (one transaction, one clear).
BATCH = 100_000
#: A backlog beyond this many records is rescanned rather than replayed (see the module text).
MAX_LAG = 10_000_000
#: Records after which the file is looked at again (its data, size, layout or attributes changed).
_RESTAT = frozenset(("CLOSE", "TRUNC", "SATTR", "LYOUT", "MIGRT", "XATTR", "MTIME", "CTIME", "FLRW", "RESYNC",
                     "HSM"))


@dataclass
class FollowReport:
    mdt: str
    user: str
    records: int = 0
    position: int = 0
    files_written: int = 0
    files_removed: int = 0
    rescans: int = 0
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"mdt": self.mdt, "user": self.user, "records": self.records, "position": self.position,
                "files_written": self.files_written, "files_removed": self.files_removed,
                "rescans": self.rescans, "notes": self.notes, "seconds": round(self.seconds, 3),
                "records_per_s": round(self.records / self.seconds) if self.seconds > 0 else None}


class Rescan(Exception):
    """A hole in the changelog: the roots must be rescanned (the message says why)."""


class Consumer:
    """Reads ``reader``'s records for ``mdt``/``user`` and keeps the inventory of ``roots`` current.

    ``lustre_mount``: files are found through ``lfs fid2path MOUNT`` (on Lustre); None: through the
    inventory's own directory rows (emulation, where FIDs come from inode numbers and are checked).
    """

    def __init__(self, engine: Engine, reader, mdt: str, user: str, roots: list[str], batch: int = BATCH,
                 max_lag: int = MAX_LAG, lustre_mount: str | None = None):
        self.engine, self.reader, self.mdt, self.user = engine, reader, mdt, user
        self.roots = [os.path.abspath(r) for r in roots]
        self.batch, self.max_lag, self.mount = batch, max_lag, lustre_mount
        self.layouts = LayoutReader()
        self.paths: store.Paths | None = None  # kept between reads while no scan has run
        self._scans = None

    # -- the loop ---------------------------------------------------------------------------------------------
    def run_once(self) -> FollowReport:
        """Apply every record there is now; the report says how many and where the consumer stands."""
        started = time.monotonic()
        report = FollowReport(self.mdt, self.user)
        def start(conn) -> tuple[int, list[str]]:
            seeded = store.seeded_roots(conn)
            return (store.lock_position(conn, self.mdt, self.user, self.roots),
                    [r for r in self.roots if r not in seeded and os.path.isdir(r)])

        position, unseeded = store.write(self.engine, start)
        if unseeded:  # records only say what changed: the tree they change must be known first
            scan(self.engine, unseeded)
            report.notes.append(f"seeded {', '.join(unseeded)} by a scan first (it had never been scanned)")
        with store.transaction(self.engine) as conn:
            scans = conn.execute(select(func.sum(InvRoot.generation), func.count())).one()
            if self.paths is None or scans != self._scans:  # directories as a scan left them
                self.paths, self._scans = store.Paths.load(conn), scans
        report.position = position
        last = self.reader.last_index()
        if last is not None and last - position > self.max_lag:
            self._rescan(report, f"{last - position} records behind (more than --max-lag {self.max_lag}): rescanned "
                                 "instead of replayed", last)
            position = last
        expected = position + 1
        pending: list[Record] = []
        lines: list[str] = []
        read = 0

        def take(chunk: list[str]) -> None:
            nonlocal expected, pending, position
            for rec in parse_many(chunk, f"{self.mdt} changelog after record {expected - 1}"):
                if rec.index < expected:
                    continue  # committed before (a log read from its start, or a clear not yet done)
                hole = rec.index > expected and position > 0
                lost = rec.type == "MARK" and rec.name == LOST_EVENTS
                if hole or lost:
                    if pending:
                        self._commit(pending, report)
                        pending = []
                    why = (f"records {expected}..{rec.index - 1} are missing (cleared or purged before this "
                           "consumer read them)" if hole else f"the MDT lost events before record {rec.index}")
                    self._rescan(report, why, rec.index - (0 if lost else 1))
                pending.append(rec)
                expected = rec.index + 1
                position = max(position, 1)
                if len(pending) >= self.batch:
                    self._commit(pending, report)
                    pending = []

        for line in self.reader.lines(position + 1):
            lines.append(line if line.endswith("\n") else line + "\n")
            read += 1
            if len(lines) >= 4096:
                take(lines)
                lines = []
        if lines:
            take(lines)
        if pending:
            self._commit(pending, report)
        report.seconds = time.monotonic() - started
        return report

    def follow(self, interval: float, stop) -> FollowReport:
        """:meth:`run_once` every ``interval`` seconds until ``stop`` (a threading.Event) is set."""
        total = FollowReport(self.mdt, self.user)
        while not stop.is_set():
            one = self.run_once()
            for name in ("records", "files_written", "files_removed", "rescans"):
                setattr(total, name, getattr(total, name) + getattr(one, name))
            total.position, total.notes = one.position or total.position, total.notes + one.notes
            total.seconds += one.seconds
            stop.wait(interval)
        return total

    def _rescan(self, report: FollowReport, why: str, position: int) -> None:
        report.notes.append(why)
        report.rescans += 1
        roots = [r for r in self.roots if os.path.isdir(r)]
        scan(self.engine, roots)
        def note(conn) -> store.Paths:
            store.lock_position(conn, self.mdt, self.user, self.roots)
            store.save_position(conn, self.mdt, self.user, position, 0, rescans=1, note=why)
            return store.Paths.load(conn)

        self.paths = store.write(self.engine, note)
        report.position = position

    # -- one batch --------------------------------------------------------------------------------------------
    def _commit(self, records: list[Record], report: FollowReport) -> None:
        """One batch, one transaction (re-run whole when Galera refuses it: :func:`store.write`). The body
        changes nothing outside the transaction but the directory map, which is dropped (and reloaded from
        the DB) whenever the transaction does not commit; the report and the clear follow the commit."""

        def body(conn) -> tuple[list[Record], int, int]:
            if self.paths is None:
                self.paths = store.Paths.load(conn)
            position = store.lock_position(conn, self.mdt, self.user, self.roots)
            todo = [r for r in records if r.index > position]  # another consumer got there first
            if not todo:
                return todo, 0, 0
            try:
                written, removed = self._apply(conn, todo)
                store.save_position(conn, self.mdt, self.user, todo[-1].index, len(todo))
            except BaseException:
                self.paths = None  # the batch's directory changes are rolled back: reload them next time
                raise
            return todo, written, removed

        def forget() -> None:
            self.paths = None

        try:
            done, written, removed = store.write(self.engine, body, on_retry=forget)
        except BaseException:
            self.paths = None  # a failed commit rolls back the directory changes too
            raise
        if not done:
            return
        self.reader.clear(done[-1].index)
        report.records += len(done)
        report.position = done[-1].index
        report.files_written += written
        report.files_removed += removed

    def _apply(self, conn, records: list[Record]) -> tuple[int, int]:
        paths = self.paths
        dirs_put: dict[str, tuple[str | None, str]] = {}
        dirs_gone: set[str] = set()
        names: dict[str, tuple[str, str]] = {}  # file fid -> (parent, name) as of the batch's end
        gone: set[str] = set()
        look: set[str] = set()
        renaming: str | None = None  # an old-style RENME waiting for its RNMTO

        def drop(fid: str) -> None:
            if fid in paths.dirs:
                dirs_gone.add(fid)
                dirs_put.pop(fid, None)
                paths.remove(fid)
            else:
                gone.add(fid)
                names.pop(fid, None)
                look.discard(fid)

        def moved(fid: str, parent: str, name: str) -> None:
            if fid in paths.dirs:
                if parent in paths.dirs:
                    paths.set(fid, parent, name, paths.root_of(parent))
                    dirs_put[fid] = (parent, name)
                else:  # moved out of every root
                    drop(fid)
            else:
                names[fid] = (parent, name)
                gone.discard(fid)
                look.add(fid)

        for r in records:
            kind, t = r.type, r.target
            if kind in ("CREAT", "MKNOD", "HLINK"):
                if r.parent in paths.dirs:
                    names[t] = (r.parent, r.name)
                    gone.discard(t)
                    look.add(t)
            elif kind == "MKDIR":
                if r.parent in paths.dirs:
                    paths.set(t, r.parent, r.name, paths.root_of(r.parent))
                    dirs_put[t] = (r.parent, r.name)
                    dirs_gone.discard(t)
            elif kind == "UNLNK":
                if r.flags & LAST_LINK:
                    drop(t)
                else:
                    look.add(t)  # one of its names went; the others stay
            elif kind == "RMDIR":
                drop(t)
            elif kind == "RENME" and r.source is not None:
                if t != ZERO_FID and t != r.source:
                    drop(t)  # the name it took was another file's
                moved(r.source, r.parent, r.name)
            elif kind == "RENME":
                renaming = t
            elif kind == "RNMTO" and renaming is not None:
                if t != ZERO_FID and t != renaming:
                    drop(t)
                moved(renaming, r.parent, r.name)
                renaming = None
            elif kind in _RESTAT and t not in paths.dirs:
                look.add(t)
        # directories: rows written, removed ones take their files (and subdirectories) with them
        if dirs_gone:
            below = set(dirs_gone)
            children = paths.children()
            stack = list(dirs_gone)
            while stack:
                for child in children.get(stack.pop(), ()):
                    if child not in below:
                        below.add(child)
                        stack.append(child)
            for fid in below:
                paths.remove(fid)
            for part in store._chunks(sorted(below)):
                gone |= {fid for (fid,) in conn.execute(select(InvFile.fid).where(InvFile.parent.in_(part)))}
            store.delete_dirs(conn, below)
            dirs_put = {k: v for k, v in dirs_put.items() if k not in below}
        store.put_dirs(conn, [{"fid": fid, "parent": parent, "name": name, "root_id": paths.root_of(parent) or 0,
                               "gen": 0} for fid, (parent, name) in dirs_put.items()])
        # files: looked at once each, where they are now
        look -= gone
        look |= {fid for (fid,) in conn.execute(select(InvFile.fid).where(InvFile.stale == 1))} - gone
        known = {}
        want = sorted(look)
        mark = "?" if conn.dialect.name == "sqlite" else "%s"
        for part in store._chunks(want, 900):  # through the driver: no statement compiled per batch of keys
            for fid, parent, name in conn.exec_driver_sql(
                    f"SELECT fid, parent, name FROM inv_files WHERE fid IN ({', '.join([mark] * len(part))})",
                    tuple(part)):
                known[fid] = (parent, name)
        where = {**known, **{fid: names[fid] for fid in look if fid in names}}
        rows, objects, stale, dropped = self._look(where)
        gone |= dropped | {fid for fid in look if fid not in where}  # never created below a root: not ours
        store.delete_files(conn, gone)
        store.put_files(conn, rows, objects, existing=set(known))
        fresh = [_placeholder(fid, parent, name, paths.root_of(parent)) for fid, (parent, name) in stale.items()
                 if fid not in known]
        store.put_files(conn, fresh, {})  # a file we have not seen yet, waiting for its next record
        store.mark_stale(conn, [fid for fid in stale if fid in known])
        for fid in stale:
            if fid in names and fid in known:  # renamed: its new name, even before we could look at it
                conn.execute(update(InvFile.__table__).where(InvFile.fid == fid)
                             .values(parent=names[fid][0], name=names[fid][1]))
        return len(rows), len(gone)

    def _look(self, where: dict[str, tuple[str, str]]):
        """Rows for the files in ``where`` (fid → (parent, name)) as they are now; those not found there
        (stale: moved or gone before we looked); those to drop (not regular, a mover's temporary, or outside
        every root)."""
        rows, objects, stale, dropped = [], {}, {}, set()
        located = self._locate(where)
        todo = []
        for fid, (parent, name) in where.items():
            root_id = self.paths.root_of(parent)
            if root_id is None or is_temporary(name):
                dropped.add(fid)
            else:
                todo.append((fid, parent, name, root_id, located.get(fid)))
        # lstat in this thread: a pool of 4 lstat threads was measured 3.7x slower on a local disk (2 CPUs; each
        # lstat is microseconds, the GIL hand-offs cost more). On Lustre, where each is a round trip, it may pay.
        for (fid, parent, name, root_id, path), st in zip(todo, map(_lstat, [t[4] for t in todo])):
            if st is None or (self.mount is None and fid_of_inode(st.st_ino) != fid):
                stale[fid] = (parent, name)  # gone, or the name holds another file now: later records say more
                continue
            if not statmod.S_ISREG(st.st_mode):
                dropped.add(fid)
                continue
            row, pairs, _ = file_row(path, st, fid, parent, name, root_id, 0, self.layouts)
            rows.append(row)
            objects[fid] = pairs
        return rows, objects, stale, dropped

    def _locate(self, where: dict[str, tuple[str, str]]) -> dict[str, str]:
        if self.mount is None:
            out = {}
            for fid, (parent, name) in where.items():
                directory = self.paths.path(parent)
                if directory is not None:
                    out[fid] = f"{directory}/{name}"
            return out
        return fid2path(self.mount, list(where))


def _lstat(path: str | None) -> os.stat_result | None:
    try:
        return os.lstat(path) if path is not None else None
    except OSError:
        return None


def _placeholder(fid: str, parent: str, name: str, root_id: int) -> dict:
    return {"fid": fid, "parent": parent, "name": name, "root_id": root_id, "size": 0, "layout": None, "uid": 0,
            "gid": 0, "mode": 0o100000, "nlink": 1, "ino": 0, "mtime_ns": 0, "ctime_ns": 0, "atime_ns": 0,
            "stale": 1, "gen": 0}


def fid2path(mount: str, fids: list[str], lfs: str | None = None) -> dict[str, str]:
    """``lfs fid2path MOUNT FID...``: each FID's current path (FIDs it cannot resolve are left out)."""
    lfs = lfs or shutil.which("lfs")
    if lfs is None:
        raise OSError("there is no lfs command on PATH (lfs fid2path)")
    out: dict[str, str] = {}
    for n in range(0, len(fids), 500):
        part = fids[n:n + 500]
        done = subprocess.run([lfs, "fid2path", mount, *[f"[{f}]" for f in part]], capture_output=True, text=True,
                              errors="surrogateescape")
        lines = done.stdout.splitlines()
        for k, line in enumerate(lines):
            if line.startswith("[") and "] " in line:  # several FIDs: each path after its FID
                fid, _, path = line[1:].partition("] ")
            elif len(part) == len(lines):
                fid, path = part[k], line
            else:
                continue
            out[fid] = path if path.startswith("/") else os.path.join(mount, path)
    return out
