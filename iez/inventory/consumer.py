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
record twice would be harmless anyway: every row written is an upsert from the file as it is now. A file
looked at again whose size and layout are as stored keeps its stripe object rows (they are a function of
the two). Batches are applied and committed here, one at a time, in order; a long read's lines are parsed
ahead by a child process (:class:`Parser`). A worker *thread* writing batches while this one parsed was
measured slower than neither (5 % on SQLite, 25 % on MariaDB): the two threads fought over the GIL, and the
writer waited for it after every round trip and ``lstat``.

A file that moved or vanished before it was looked at is marked ``stale`` and looked at again until a later
record (its rename or unlink) settles it: with the batch of that record, with a batch that renames or moves a
directory (a directory above it may be where it went), and with the first batch of every read.

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

import gc
import os
import pickle
import queue
import shutil
import stat as statmod
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import starmap
from operator import itemgetter

from sqlalchemy import Connection, Engine

from iez.db import inventory as sql
from iez.errors import IezError
from iez.inventory import store
from iez.inventory.changelog import (
    LAST_LINK,
    LOST_EVENTS,
    ZERO_FID,
    ChangelogError,
    Record,
    fid_of_inode,
    parse_rows,
    record_index,
)
from iez.inventory.scan import file_row, scan
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


class Rescan(IezError):
    """A hole in the changelog: the roots must be rescanned (the message says why)."""


#: Files looked at (and, on MariaDB, their statements sent) a part at a time.
LOOK_PART = 10_000
#: Lines parsed at a time (one block, one regular-expression scan).
BLOCK = 16384
#: The first blocks of a read are parsed here; a longer read has the rest parsed ahead by a child process.
INLINE_BLOCKS = 2


class Parser:
    """Blocks of changelog lines parsed in order, ahead of the batches that apply them (a context manager).

    A short read (at most :data:`INLINE_BLOCKS` blocks) is parsed in this process. Past that, one child
    process (``python -c``: it inherits none of this process's threads or connections and runs no
    ``__main__`` of ours) parses up to ``ahead`` blocks ahead while the records before them are applied and
    committed here, on the other CPU: parsing was a fifth to a quarter of the ingest time, and a thread
    would share the GIL. Records come back in order as field tuples (two threads of ours feed the child and
    read its replies, so neither side waits on a full pipe); a bad record's
    :class:`~iez.inventory.changelog.ChangelogError` is raised here, when its block's turn comes."""

    def __init__(self, where: str, position: int, ahead: int = 8):
        self.where, self.after, self.ahead = where, position, max(1, ahead)
        self.child: subprocess.Popen | None = None
        self.requests: queue.Queue = queue.Queue()
        self.replies: queue.Queue = queue.Queue()
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> "Parser":
        return self

    def __exit__(self, *exc) -> None:
        child = self.child
        if child is None:
            return
        self.child = None
        self.requests.put(None)  # the feeder closes the child's stdin: it ends
        if exc[0] is not None:
            child.kill()  # its replies are not wanted
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        for thread in self.threads:
            thread.join()

    def _start(self) -> None:
        top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (top, os.environ.get("PYTHONPATH")) if p)}
        self.child = subprocess.Popen([sys.executable, "-c", "from iez.inventory.changelog import serve; serve()"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        to_child, from_child = self.child.stdin, self.child.stdout
        assert to_child is not None and from_child is not None  # both are pipes

        def feed() -> None:
            try:
                while (item := self.requests.get()) is not None:
                    pickle.dump(item, to_child, protocol=pickle.HIGHEST_PROTOCOL)
                    to_child.flush()
            except OSError:
                pass  # the child is gone: its reader says so
            finally:
                try:
                    to_child.close()
                except OSError:
                    pass

        def read() -> None:
            while True:
                try:
                    self.replies.put(pickle.load(from_child))
                except Exception:  # EOF, or a reply cut short
                    self.replies.put(None)
                    return

        self.threads = [threading.Thread(target=feed, name="iez-changelog-feed", daemon=True),
                        threading.Thread(target=read, name="iez-changelog-read", daemon=True)]
        for thread in self.threads:
            thread.start()

    def _reply(self) -> list[tuple]:
        reply = self.replies.get()
        if reply is None:
            self.replies.put(None)
            code = self.child.poll() if self.child is not None else None
            raise ChangelogError(f"{self.where}: the parsing process ended (exit status {code})")
        ok, rows = reply
        if not ok:
            raise ChangelogError(rows)
        return rows

    def parse(self, blocks: Iterable[list[str]]) -> Iterator[list[Record]]:
        """The blocks' records, a block at a time."""
        for rows in self.rows(blocks):
            yield list(starmap(Record, rows))

    def rows(self, blocks: Iterable[list[str]]) -> Iterator[list[tuple]]:
        """:meth:`parse`, each record as the tuple of its fields in :class:`Record`'s order (what the child sends:
        the consumer reads them as they come, without making 100,000 objects a batch out of them)."""
        waiting = 0
        for n, block in enumerate(blocks):
            where = f"{self.where} after record {self.after}"
            last = record_index(block[-1])
            self.after = self.after if last is None else last
            if n < INLINE_BLOCKS:
                yield parse_rows(block, where)
                continue
            if self.child is None:
                self._start()
            self.requests.put((block, where))
            waiting += 1
            while waiting > self.ahead:
                waiting -= 1
                yield self._reply()
        while waiting:
            waiting -= 1
            yield self._reply()

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
        self._scans: tuple[int, int] | None = None
        #: Whether the next batch looks at every stale file again (the first batch of each read does; after
        #: that only a batch that moves a directory: see :meth:`_apply`).
        self._restale = True

    # -- the loop ---------------------------------------------------------------------------------------------
    def run_once(self) -> FollowReport:
        """Apply every record there is now; the report says how many and where the consumer stands."""
        started = time.monotonic()
        report = FollowReport(self.mdt, self.user)
        self._restale = True
        def start(conn) -> tuple[int, list[str]]:
            seeded = store.seeded_roots(conn)
            return (store.lock_position(conn, self.mdt, self.user, self.roots),
                    [r for r in self.roots if r not in seeded and os.path.isdir(r)])

        position, unseeded = store.write(self.engine, start)
        if unseeded:  # records only say what changed: the tree they change must be known first
            scan(self.engine, unseeded)
            report.notes.append(f"seeded {', '.join(unseeded)} by a scan first (it had never been scanned)")
        with store.transaction(self.engine) as conn:
            scans = sql.scan_generations(conn)
            if self.paths is None or scans != self._scans:  # directories as a scan left them
                self.paths, self._scans = store.Paths.load(conn), scans
        report.position = position
        last = self.reader.last_index()
        if last is not None and last - position > self.max_lag:
            self._rescan(report, f"{last - position} records behind (more than --max-lag {self.max_lag}): rescanned "
                                 "instead of replayed", last)
            position = last
        expected = position + 1
        pending: list[tuple] = []  # records as field tuples (Record's order: index, type, flags, target...)

        def take(records: list[tuple]) -> None:
            nonlocal expected, pending, position
            if (records and records[0][0] == expected
                    and list(map(_INDEX, records)) == list(range(expected, expected + len(records)))
                    and "MARK" not in list(map(_TYPE, records))):
                # the usual block: the next records, in order, with no hole and no mark: what the loop below
                # does, a batch's slice at a time instead of a record at a time
                position = max(position, 1)
                expected += len(records)
                at = 0
                while at < len(records):
                    room = self.batch - len(pending)
                    pending += records[at:at + room]
                    at += room
                    if len(pending) >= self.batch:
                        self._commit(pending, report)
                        pending = []
                return
            for rec in records:
                index = rec[0]
                if index < expected:
                    continue  # committed before (a log read from its start, or a clear not yet done)
                hole = index > expected and position > 0
                lost = rec[1] == "MARK" and rec[6] == LOST_EVENTS
                if hole or lost:
                    if pending:
                        self._commit(pending, report)
                        pending = []
                    why = (f"records {expected}..{index - 1} are missing (cleared or purged before this "
                           "consumer read them)" if hole else f"the MDT lost events before record {index}")
                    self._rescan(report, why, index - (0 if lost else 1))
                pending.append(rec)
                expected = index + 1
                position = max(position, 1)
                if len(pending) >= self.batch:
                    self._commit(pending, report)
                    pending = []

        first = position + 1

        # The cyclic garbage collector is off while the records are applied: its full passes walked the batch's
        # 100,000 records and 35,000 rows again and again (a tenth of the ingest's CPU), and nothing made here
        # needs it (reference counts free it all). Restored after the read, as it was (another thread's read
        # ending first turns it back on: that costs time, nothing else).
        paused = gc.isenabled()
        gc.disable()
        try:
            with Parser(f"{self.mdt} changelog", position, ahead=self.batch // BLOCK + 2) as parser:
                for records in parser.rows(self.reader.blocks(first, BLOCK)):
                    take(records)
            if pending:
                self._commit(pending, report)
        finally:
            if paused:
                gc.enable()
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
    def _commit(self, records: list[tuple], report: FollowReport) -> None:
        """One batch, one transaction (re-run whole when Galera refuses it: :func:`store.write`). The body
        changes nothing outside the transaction but the directory map, which is dropped (and reloaded from
        the DB) whenever the transaction does not commit; the report and the clear follow the commit."""

        def body(conn) -> tuple[list[tuple], int, int]:
            if self.paths is None:
                self.paths = store.Paths.load(conn)
            position = store.lock_position(conn, self.mdt, self.user, self.roots)
            # another consumer got there first (a batch's records are in increasing order)
            todo = records if records[0][0] > position else [r for r in records if r[0] > position]
            if not todo:
                return todo, 0, 0
            try:
                written, removed = self._apply(conn, todo)
                store.save_position(conn, self.mdt, self.user, todo[-1][0], len(todo))
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
        self._restale = False  # committed: its look at the stale files with it
        self.reader.clear(done[-1][0])
        report.records += len(done)
        report.position = done[-1][0]
        report.files_written += written
        report.files_removed += removed

    def _apply(self, conn: Connection, records: list[tuple]) -> tuple[int, int]:
        """A batch's records (field tuples in :class:`Record`'s order) applied; (files written, files removed)."""
        paths = self.paths
        assert paths is not None  # loaded by _commit's body
        dirs_put: dict[str, tuple[str, str]] = {}
        dirs_gone: set[str] = set()
        names: dict[str, tuple[str, str]] = {}  # file fid -> (parent, name) as of the batch's end
        gone: set[str] = set()
        look: set[str] = set()
        renaming: str | None = None  # an old-style RENME waiting for its RNMTO
        dir_moved = False  # a known directory renamed or moved: the stale files below it may be found now

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
            nonlocal dir_moved
            if fid in paths.dirs:
                dir_moved = True
                if parent in paths.dirs:
                    paths.set(fid, parent, name, paths.root_of(parent))
                    dirs_put[fid] = (parent, name)
                else:  # moved out of every root
                    drop(fid)
            else:
                names[fid] = (parent, name)
                gone.discard(fid)
                look.add(fid)

        dirs = paths.dirs
        for _, kind, flags, t, _, r_parent, r_name, source, _, _, _, _, _ in records:
            if kind in _RESTAT:  # most records (a file's CLOSE, SATTR...): asked first
                if t not in dirs:
                    look.add(t)
            elif kind in ("CREAT", "MKNOD", "HLINK"):
                if r_parent in paths.dirs:
                    names[t] = (r_parent or "", r_name or "")  # a named record has both (changelog.parse)
                    gone.discard(t)
                    look.add(t)
            elif kind == "MKDIR":
                if r_parent in paths.dirs:
                    parent, name = r_parent or "", r_name or ""
                    paths.set(t, parent, name, paths.root_of(parent))
                    dirs_put[t] = (parent, name)
                    dirs_gone.discard(t)
            elif kind == "UNLNK":
                if flags & LAST_LINK:
                    drop(t)
                else:
                    look.add(t)  # one of its names went; the others stay
            elif kind == "RMDIR":
                drop(t)
            elif kind == "RENME" and source is not None:
                if t != ZERO_FID and t != source:
                    drop(t)  # the name it took was another file's
                moved(source, r_parent or "", r_name or "")
            elif kind == "RENME":
                renaming = t
            elif kind == "RNMTO" and renaming is not None:
                if t != ZERO_FID and t != renaming:
                    drop(t)
                moved(renaming, r_parent or "", r_name or "")
                renaming = None
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
            gone |= sql.files_below(conn, sorted(below))
            store.delete_dirs(conn, below)
            dirs_put = {k: v for k, v in dirs_put.items() if k not in below}
        store.put_dirs(conn, [{"fid": fid, "parent": parent, "name": name, "root_id": paths.root_of(parent) or 0,
                               "gen": 0} for fid, (parent, name) in dirs_put.items()])
        # files: looked at once each, where they are now
        look -= gone
        if self._restale or dir_moved:
            # A stale file's name (as of this batch's end) held no such file when it was looked at: the file
            # had moved on, and the records saying where are further on. It is found only once one of them is
            # applied: its own (a rename, link or unlink: it is in ``look`` then), or a directory above it
            # renamed. Looked at again here, and not with every batch: a batch with neither cannot find it (on
            # the benchmark's tree, 38,000 of 129,000 lstats); the first batch of each read retries them all
            # anyway (a look that failed for another reason, EACCES or a Lustre fid2path refused).
            look |= sql.stale_files(conn) - gone
        known: dict[str, tuple[str, str]] = {}
        before: dict[str, tuple[int, str | None, int]] = {}  # fid -> (size, layout, stale) as stored
        for fid, parent, name, size, layout, was_stale in sql.stored_files(conn, sorted(look)):
            known[fid] = (parent, name)
            before[fid] = (size, layout, was_stale)
        where = {**known, **{fid: names[fid] for fid in look if fid in names}}
        # looked at and written a part at a time; on MariaDB a Sender's thread runs each part's statements
        # while the next part is looked at (they touch no row in common: the statements' order is kept anyway)
        sender = None if conn.dialect.name == "sqlite" else store.Sender(conn)
        items = list(where.items())
        step = LOOK_PART if sender is not None else max(1, len(items))
        existing = set(known)
        stale: dict[str, tuple[str, str]] = {}
        dropped: set[str] = set()
        written = 0
        try:
            for n in range(0, len(items), step):
                rows, objects, lost, out = self._look(dict(items[n:n + step]))
                stale.update(lost)
                dropped |= out
                # a file whose size and layout are as stored keeps its stripe objects (a CLOSE or SATTR that
                # changed neither, a rename): they are a function of the two
                same = {row["fid"] for row in rows if (b := before.get(row["fid"])) is not None and not b[2]
                        and b[0] == row["size"] and b[1] == row["layout"]}
                store.put_files(conn, rows, objects, existing=existing, unchanged=same,
                                send=None if sender is None else sender.send)
                written += len(rows)
            gone |= dropped | {fid for fid in look if fid not in where}  # never created below a root: not ours
            store.delete_files(conn, gone, send=None if sender is None else sender.send)
            fresh = [_placeholder(fid, parent, name, paths.root_of(parent) or 0)
                     for fid, (parent, name) in stale.items() if fid not in known]
            # a file we have not seen yet, waiting for its next record (no row: no stripe objects to delete either,
            # objects being written and deleted with their file's row)
            store.put_files(conn, fresh, {}, existing=existing, send=None if sender is None else sender.send)
        finally:
            if sender is not None:
                sender.close()  # every statement ran (or its error is raised) before the connection is used again
        sql.mark_stale(conn, [fid for fid in stale if fid in known and not before[fid][2]])
        for fid in stale:
            if fid in names and fid in known:  # renamed: its new name, even before we could look at it
                sql.rename_file(conn, fid, *names[fid])
        return written, len(gone)

    def _look(self, where: dict[str, tuple[str, str]]
              ) -> tuple[list[dict], dict[str, list[tuple[int, int]]], dict[str, tuple[str, str]], set[str]]:
        """Rows for the files in ``where`` (fid → (parent, name)) as they are now, their stripe objects; those not
        found there (stale: moved or gone before we looked); those to drop (not regular, a mover's temporary, or
        outside every root)."""
        paths = self.paths
        assert paths is not None  # loaded by _commit's body
        rows: list[dict] = []
        objects: dict[str, list[tuple[int, int]]] = {}
        stale: dict[str, tuple[str, str]] = {}
        dropped: set[str] = set()
        located = self._locate(where)
        emulated, layouts = self.mount is None, self.layouts
        # lstat in this thread: a pool of 4 lstat threads was measured 3.7x slower on a local disk (2 CPUs; each
        # lstat is microseconds, the GIL hand-offs cost more). On Lustre, where each is a round trip, it may pay.
        for fid, (parent, name) in where.items():
            root_id = paths.root_of(parent)
            if root_id is None or is_temporary(name):
                dropped.add(fid)
                continue
            path = located.get(fid)
            st = _lstat(path)
            if st is None or path is None or (emulated and fid_of_inode(st.st_ino) != fid):
                stale[fid] = (parent, name)  # gone, or the name holds another file now: later records say more
                continue
            if not statmod.S_ISREG(st.st_mode):
                dropped.add(fid)
                continue
            row, pairs, _ = file_row(path, st, fid, parent, name, root_id, 0, layouts)
            rows.append(row)
            objects[fid] = pairs
        return rows, objects, stale, dropped

    def _locate(self, where: dict[str, tuple[str, str]]) -> dict[str, str]:
        if self.mount is None:
            assert self.paths is not None  # loaded by _commit's body
            out = {}
            for fid, (parent, name) in where.items():
                directory = self.paths.path(parent)
                if directory is not None:
                    out[fid] = f"{directory}/{name}"
            return out
        return fid2path(self.mount, list(where))


_INDEX, _TYPE = itemgetter(0), itemgetter(1)  # a record tuple's index and type


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
