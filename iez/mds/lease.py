"""Which ``iez mds`` is the active one on an interaction DB: one record, claimed, renewed, released.

Two MDS services on one database would both allocate and both write the live
view. So ``iez mds`` claims the ``mds_lease`` record (:class:`iez.db.models.MdsLeaseRow`)
before it binds or allocates:

- **claim** at start: the record is taken when there is none, when its holder
  released it, or when it is *stale*; otherwise the holder (pid, host, since)
  is returned and the command says so in one line and exits 2, or with
  ``--standby`` waits (:meth:`MdsLease.wait`), saying so once, and claims it as
  soon as it is released or goes stale.
- **heartbeat**: the holder renews the record every ``--interval`` seconds
  (a thread of its own, so a long allocation pass does not starve it). Should a
  renewal find the record taken over (this MDS missed its heartbeats, e.g. the
  database was out of reach for longer than the lease), the MDS stops: it no
  longer is the active one.
- **release** on a clean exit (SIGTERM, SIGINT), after the last allocation and
  the last stored report: a standby takes over at its next poll (1 s).
- **stale**: a record whose last heartbeat is more than 3 of the holder's own
  intervals old (``expires``; :data:`STALE_INTERVALS`), on the *database's*
  clock (MariaDB's ``UTC_TIMESTAMP``; SQLite's is the node's), so clocks of
  different MDS nodes never matter. A holder killed with SIGKILL therefore
  blocks the next MDS for at most 3 intervals, and not at all on its own node:
  a process on the same node (same boot, same PID namespace) sees that the
  holder's process is gone (``instance``: boot id, PID namespace, start time,
  so a reused PID is not mistaken for it) and takes over at once.

A claim is atomic on SQLite and MariaDB alike, under concurrent starts: it is
a compare-and-swap on the record's ``version`` (an ``INSERT`` of the one
primary key when there is no record), so of two MDSs starting at the same
instant exactly one wins and the other sees it as the holder. On SQLite it
runs in a ``BEGIN IMMEDIATE`` transaction; on MariaDB every statement commits
by itself, so a paused or vanished MDS never holds the record's row lock.
It does not take the allocation lock (``iez_lock``), so a start never waits
for an allocation pass.

``generation`` counts claims, and it is the fencing token (issue 25): every
allocation pass of the MDS checks, first thing in the allocation's own
transaction (:meth:`MdsLease.fence`), that the record still names this process
and the generation it claimed. An MDS paused longer than the lease (SIGSTOP, a
VM frozen, a network partition) whose record another MDS has taken over in the
meantime may wake in the middle of its loop, before its heartbeat notices: its
allocation transaction is then refused (:class:`LeaseLost`, nothing stored)
and it stops. Since the check is in the transaction that stores the
allocations, and allocations are serialised by the write lock, there is no
moment at which two MDSs both allocate: a pass either ran before the takeover
committed or sees it. On a Galera cluster the check is a causal read
(``wsrep_sync_wait``), so a takeover committed on another node is seen too.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterator

from sqlalchemy import Connection, Engine, insert, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from iez.db.clock import db_now
from iez.db.engine import error_code, is_sqlite, read, unavailable
from iez.db.galera import causal_read, is_galera
from iez.db.models import MdsLeaseRow
from iez.errors import StorageUnavailable

log = logging.getLogger("iez.mds")

#: The record of the MDS service (one per database; issue 25 may key others, e.g. per file system).
SERVICE = "mds"
#: A record whose heartbeat is more than this many of its holder's intervals old is stale.
STALE_INTERVALS = 3
#: MariaDB's deadlock and lock wait time-out: a concurrent claim got in first, look again.
_RACE_CODES = (1213, 1205)

#: The lease's Table (``MdsLeaseRow.__table__``, which SQLAlchemy types as any FromClause).
_table = MdsLeaseRow.metadata.tables[MdsLeaseRow.__tablename__]


class LeaseLost(StorageUnavailable, RuntimeError):
    """This MDS's lease generation is no longer the current one (another MDS took the record over, or it was
    released): its allocation is refused, and it must stop."""

    def __init__(self, generation: int | None, holder: "Holder | None"):
        self.generation, self.holder = generation, holder
        now = (f"{holder.who()} holds generation {holder.generation}" if holder is not None and holder.held
               else f"no MDS holds it (generation {holder.generation})" if holder is not None else "no record")
        super().__init__(f"this MDS's lease (generation {generation}) is no longer the current one: {now}")


def _boot_and_pidns() -> str:
    """This node and PID namespace ('' where /proc does not tell: then no holder is judged by its PID)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}:{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat from the state on (state, ..., starttime at index 19), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state is field 3, starttime field 22
    return fields if len(fields) >= 20 else None


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks after boot), or None if /proc does not say."""
    fields = _stat(pid)
    return fields[19] if fields else None


def _gone(pid: int, started: str) -> bool:
    """Whether process ``pid`` that started at ``started`` no longer runs on this node (exited, a zombie, or
    the PID reused); a process this one may not see (another user's, /proc mounted hidepid) counts as running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, as another user's process
    fields = _stat(pid)
    if fields is None:
        return False  # hidden from us: leave it to the heartbeat's age
    return fields[0] in ("Z", "X", "x") or fields[19] != started


def _local(moment: datetime) -> str:
    return moment.replace(tzinfo=timezone.utc).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


@dataclass(frozen=True)
class Holder:
    """The lease record as read at ``now`` (the database's clock)."""

    owner: str | None
    generation: int
    version: int
    pid: int
    host: str
    instance: str
    endpoint: str | None
    since: datetime
    renewed: datetime
    expires: datetime
    now: datetime

    @property
    def held(self) -> bool:
        """Someone holds it (released: no one), stale or not."""
        return self.owner is not None

    @property
    def stale(self) -> bool:
        return self.now > self.expires

    @property
    def heartbeat_age_s(self) -> float:
        return max(0.0, (self.now - self.renewed).total_seconds())

    @property
    def stale_after_s(self) -> float:
        return (self.expires - self.renewed).total_seconds()

    def died_here(self) -> bool:
        """The holder ran on this node, in this PID namespace, and its process is gone."""
        node, _, started = self.instance.rpartition(":")
        if not node or node != _boot_and_pidns():
            return False
        return _gone(self.pid, started)

    def free(self) -> bool:
        """The record may be claimed: released, stale, or its holder died on this node."""
        return not self.held or self.stale or self.died_here()

    def who(self) -> str:
        """'pid 4242 on host mds1 (tcp://*:5555) since 2026-11-26 14:00:01 UTC'"""
        where = f" ({self.endpoint})" if self.endpoint else ""
        return f"pid {self.pid} on host {self.host}{where} since {_local(self.since)}"

    def describe(self) -> str:
        """The record in one phrase, for ``iez mds --status`` and the logs."""
        if not self.held:
            return f"none (the last, {self.who()}, released it at {_local(self.renewed)})"
        if self.stale:
            return (f"none: {self.who()} stopped renewing it {self.heartbeat_age_s:.1f} s ago "
                    f"(stale after {self.stale_after_s:g} s; the next MDS takes over)")
        return (f"{self.who()}, heartbeat {self.heartbeat_age_s:.1f} s ago (stale after {self.stale_after_s:g} s), "
                f"generation {self.generation}")

    def to_json(self) -> dict:
        def epoch(moment: datetime) -> float:
            return round(moment.replace(tzinfo=timezone.utc).timestamp(), 3)

        return {"active": self.held and not self.stale, "released": not self.held, "pid": self.pid,
                "host": self.host, "endpoint": self.endpoint, "since": epoch(self.since),
                "renewed": epoch(self.renewed), "heartbeat_age_s": round(self.heartbeat_age_s, 3),
                "stale_after_s": self.stale_after_s, "generation": self.generation}


def _holder(row, now: datetime) -> Holder:
    return Holder(row.owner, row.generation, row.version, row.pid, row.host, row.instance, row.endpoint,
                  row.since, row.renewed, row.expires, now)


def read_holder(engine: Engine, service: str = SERVICE) -> Holder | None:
    """The record of ``service`` (None: no MDS ever claimed it on this database)."""

    def query(conn: Connection) -> Holder | None:
        now = db_now(conn)
        row = conn.execute(select(_table).where(_table.c.service == service)).one_or_none()
        return None if row is None else _holder(row, now)

    return read(engine, query)


class MdsLease:
    """This process's claim on the active-MDS record of ``engine``'s database."""

    def __init__(self, engine: Engine, interval_s: float, endpoint: str | None = None, service: str = SERVICE):
        if not interval_s > 0:
            raise ValueError(f"lease interval {interval_s} must be positive")
        self.engine = engine
        self.interval_s = interval_s
        self.ttl = timedelta(seconds=STALE_INTERVALS * interval_s)
        self.endpoint = endpoint
        self.service = service
        self.owner = uuid.uuid4().hex
        self.pid = os.getpid()
        self.host = socket.gethostname()
        node, started = _boot_and_pidns(), _start_time(self.pid)
        self.instance = f"{node}:{started}" if node and started else ""
        self.generation: int | None = None  # set while this process holds the record
        self.previous: Holder | None = None  # the record as this process found it when it claimed it
        self.lost: Holder | None = None  # who holds it after a renewal found it taken over
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._wsrep: bool | None = None  # the database is a Galera node (asked by the first fence)

    @property
    def held(self) -> bool:
        return self.generation is not None and self.lost is None

    # -- fencing ----------------------------------------------------------------------------
    def fence(self, session: Session) -> None:
        """Refuse (:class:`LeaseLost`, and :attr:`lost` set) the transaction of ``session`` unless the record still
        names this process with the generation it claimed. Run inside the allocation's transaction (after the
        write lock), so the check and what the transaction stores commit together; on Galera a causal read."""
        conn = session.connection()
        query = select(_table).where(_table.c.service == self.service)
        if not is_sqlite(conn) and self._galera(conn):
            row = causal_read(conn, query).one_or_none()
        else:
            row = conn.execute(query).one_or_none()
        if row is not None and row.owner == self.owner and row.generation == self.generation:
            return
        holder = None if row is None else _holder(row, db_now(conn))
        self.lost = holder if holder is not None else self.lost
        raise LeaseLost(self.generation, holder)

    def _galera(self, conn: Connection) -> bool:
        """Whether the database is a Galera node (wsrep on); asked once."""
        if self._wsrep is None:
            self._wsrep = is_galera(conn)
        return self._wsrep

    # -- claiming -----------------------------------------------------------------------
    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """Where the record is written: on SQLite a short ``BEGIN IMMEDIATE`` transaction; on MariaDB
        autocommit, each statement atomic by itself, so no client (one paused mid-way, or a node that
        vanished with its connection open) can hold the record's row lock between two statements."""
        try:
            with self.engine.connect() as conn:
                if is_sqlite(conn):
                    conn.execution_options(iez_write=True)
                    with conn.begin():
                        yield conn
                else:
                    conn.execution_options(isolation_level="AUTOCOMMIT")
                    yield conn
        except OperationalError as err:
            if error_code(err.orig) in _RACE_CODES:
                raise
            raise unavailable(self.engine, err) from err

    def claim(self) -> Holder | None:
        """Take the record if it is free; None when this process holds it now, else the live holder."""
        for _ in range(20):
            try:
                with self._writing() as conn:
                    now = db_now(conn)
                    row = conn.execute(select(_table).where(_table.c.service == self.service)).one_or_none()
                    seen = None if row is None else _holder(row, now)
                    if seen is not None and seen.owner != self.owner and not seen.free():
                        return seen
                    mine = {"owner": self.owner, "pid": self.pid, "host": self.host, "instance": self.instance,
                            "endpoint": self.endpoint, "since": now, "renewed": now, "expires": now + self.ttl}
                    if seen is None:
                        generation = 1
                        conn.execute(insert(_table).values(service=self.service, generation=1, version=1, **mine))
                    else:
                        generation = seen.generation + 1
                        done = conn.execute(update(_table).where(_table.c.service == self.service,
                                                                 _table.c.version == seen.version)
                                            .values(generation=generation, version=seen.version + 1, **mine))
                        if done.rowcount != 1:
                            continue  # changed since we read it: look again
            except IntegrityError:
                continue  # another MDS inserted the first record at the same instant
            except OperationalError as err:  # a deadlock or lock wait on MariaDB: another claim got in first
                log.debug("claim raced another MDS (%s); reading the record again", err.orig)
                continue
            self.generation, self.lost = generation, None
            self.previous = seen
            return None
        raise RuntimeError(f"could not claim the {self.service} lease: it kept changing under 20 attempts")

    def wait(self, stop: threading.Event, on_holder: Callable[[Holder], None] | None = None,
             poll_s: float | None = None) -> bool:
        """Stand by until this process claims the record (True) or ``stop`` is set (False).

        The record is read every ``poll_s`` (default: 1 s, or the interval if shorter) and claimed as soon
        as it is released or stale; ``on_holder`` is told of each new holder seen meanwhile.
        """
        poll_s = poll_s if poll_s is not None else min(1.0, self.interval_s)
        seen_owner, failing = None, False
        while not stop.is_set():
            try:
                holder = read_holder(self.engine, self.service)
                if holder is None or holder.free():
                    holder = self.claim()
                    if holder is None:
                        return True
                if failing:
                    log.info("standby: the interaction DB answers again")
                failing = False
                if holder.owner != seen_owner:
                    seen_owner = holder.owner
                    if on_holder is not None:
                        on_holder(holder)
            except Exception as err:  # the DB is down: keep standing by
                if not failing:
                    log.error("standby: cannot read the active MDS record, retrying: %s", str(err).splitlines()[0])
                failing = True
            stop.wait(poll_s)
        return False

    # -- heartbeat ------------------------------------------------------------------------
    def renew(self) -> bool:
        """Push ``expires`` on by the lease time; False (and :attr:`lost`) when another MDS holds it now."""
        with self._writing() as conn:
            now = db_now(conn)
            done = conn.execute(update(_table).where(_table.c.service == self.service, _table.c.owner == self.owner)
                                .values(renewed=now, expires=now + self.ttl, endpoint=self.endpoint,
                                        version=_table.c.version + 1))
            if done.rowcount == 1:
                return True
        self.lost = read_holder(self.engine, self.service)
        return False

    def start_heartbeat(self, on_lost: Callable[[], None], endpoint: Callable[[], str | None] | None = None) -> None:
        """Renew every interval in a thread; on finding the record taken over, log it and call ``on_lost``.

        ``endpoint``: the address the service bound, once it knows it (recorded from the next heartbeat on).
        """
        assert self.generation is not None, "claim the lease first"

        def beat() -> None:
            failing_since = None
            while not self._halt.wait(self.interval_s):
                self.endpoint = (endpoint() if endpoint is not None else None) or self.endpoint
                try:
                    renewed = self.renew()
                except Exception as err:
                    if failing_since is None:
                        failing_since = datetime.now()
                        log.error("cannot renew the active MDS lease, retrying every %g s (another MDS may take "
                                  "over after %g s without a heartbeat): %s", self.interval_s,
                                  self.ttl.total_seconds(), str(err).splitlines()[0][:200])
                    continue
                if renewed:
                    if failing_since is not None:
                        log.info("renewing the active MDS lease again")
                    failing_since = None
                    continue
                log.error("lost the active MDS lease: %s holds it now; stopping",
                          self.lost.who() if self.lost and self.lost.held else "no MDS")
                on_lost()
                return

        self._thread = threading.Thread(target=beat, name="iez-mds-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop the heartbeat and give the record up (kept for the record: who held it, until when)."""
        self._halt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        if self.generation is None or self.lost is not None:
            return
        try:
            with self._writing() as conn:
                now = db_now(conn)
                conn.execute(update(_table).where(_table.c.service == self.service, _table.c.owner == self.owner)
                             .values(owner=None, renewed=now, expires=now, version=_table.c.version + 1))
        except Exception as err:
            log.error("cannot release the active MDS lease (another MDS takes over once it is %g s old): %s",
                      self.ttl.total_seconds(), str(err).splitlines()[0][:200])
        self.generation = None


def start_as_active(lease: MdsLease, standby: bool, stop: threading.Event) -> int | None:
    """What ``iez mds`` does at start: None once ``lease`` is held; else the exit code.

    Another MDS active: one line naming it and 2, or with ``standby`` a wait (said once) until this
    process takes over (None) or ``stop`` is set (0).
    """
    holder = lease.claim()
    if holder is not None:
        if not standby:
            print(f"iez mds: another MDS is active on this DB: {holder.who()}, heartbeat "
                  f"{holder.heartbeat_age_s:.1f} s ago; not starting (stop it, or give --standby to take over when it stops or misses its heartbeat "
                  f"for {holder.stale_after_s:g} s)", file=sys.stderr)
            return 2
        log.warning("standing by: another MDS is active on this DB: %s; taking over when it stops or misses its "
                    "heartbeat for %g s", holder.who(), holder.stale_after_s)

        def changed(now: Holder) -> None:
            if now.owner != holder.owner:
                log.info("standing by: the active MDS is now %s", now.who())

        if not lease.wait(stop, on_holder=changed):
            return 0
    log_active(lease)
    return None


def log_active(lease: MdsLease) -> None:
    """Say that ``lease`` is held now, and after whom."""
    log.info("active MDS of this DB (lease generation %d, renewed every %g s, stale after %g s)%s", lease.generation,
             lease.interval_s, lease.ttl.total_seconds(), _after(lease.previous))


def _after(previous: Holder | None) -> str:
    if previous is None:
        return ""
    if not previous.held:
        return f", after {previous.who()}, which released it"
    why = f"no heartbeat for {previous.heartbeat_age_s:.1f} s" if previous.stale else "its process is gone"
    return f"; taking over from {previous.who()}: {why}"
