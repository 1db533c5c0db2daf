"""``iez mds``: the control loop on the metadata server.

Every agent message is decoded and validated (drops are counted per cause and
logged once per cause), applied to the live view and stored with its batch.
Once a second the loop looks for applications with pending write requests and
allocates them with the live view when there are new requests or the
statistics changed materially, but only while the MDS node has room (CPU and
memory under their limits, paper III-B2); otherwise it says it defers. Every
``lustre_params_interval_s`` it reads the MDS node's own Lustre parameters
(pools, ``osp.*`` states, reserved space, qos settings; :mod:`iez.mds.lustre_params`),
merges them into the view and stores each OST's resulting policy.
Allocations go through :func:`iez.placement.place_app`, whose
transaction serialises with every other writer, so two triggers at once never
reserve the same free space twice. SIGTERM finishes the step under way
(an allocation included), stores what was received, and exits.

A standby service (``iez mds --standby`` while another holds the lease,
:mod:`iez.mds.lease`) runs the same loop with :attr:`MdsService.active` false: it binds,
decodes and validates every agent report and applies it to its own live view
(and reads the MDT parameters), so that a takeover places with fresh data; it
stores nothing, allocates nothing and writes no status file. :meth:`MdsService.promote`
(called once the lease is claimed) makes it the active service at the loop's next turn.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import zmq
from sqlalchemy import Engine

from iez.allocate import AllocationError
from iez.db.allocations import pending_counts
from iez.db.engine import read
from iez.db.stats import reserved_bytes
from agents import AgentError
from iez.mds.lease import LeaseLost
from iez.mds.lustre_params import LustreParamsReader
from iez.mds.messages import CAUSES, MAX_FRAME_BYTES, OST_CAUSES, Rejected, decode
from iez.mds.dbhealth import DbHealth
from iez.mds.resources import DEFAULT_DEFER_MAX_S, NodeSampler, Usage
from iez.db.ingest import prune, store_batch
from iez.mds.jobs import JobTracker, own_job_ids
from iez.mds.view import ClusterView, epoch
from iez.placement import PlacementSettings, place_app
from iez.errors import ConfigError

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from iez.mds.keys import OssAuthenticator, OssKeys
    from iez.mds.metrics import MdsMetrics

log = logging.getLogger("iez.mds")

#: ZMQ_MAXMSGSIZE: libzmq drops the connection of a peer announcing a bigger frame before buffering it
#: (the CURVE box adds a few dozen bytes to the largest valid message).
MAX_WIRE_BYTES = MAX_FRAME_BYTES + 4096
DEFAULT_MAX_SKEW_S = 300.0
LOG_EVERY_S = 60.0
RESERVATIONS_EVERY_S = 10.0  # how often the loop reads iez's reservations for /metrics  # a refusal that repeats (same OSS, same cause) is logged once a minute


class IngestConfigError(ConfigError):
    """The MDS cannot listen as configured (no keys and no --insecure, a bad key directory)."""


@dataclass
class MdsConfig:
    bind: str = "tcp://*:5555"
    interval_s: float = 60.0  # agents' default interval, for OSSs whose messages do not say
    stale_intervals: int = 3
    cpu_max: float = 70.0
    mem_max: float = 50.0
    # The CPU/memory gate defers an allocation at most this long, then allocates anyway (a busy MDS node is
    # busy exactly when jobs start; deferring for as long as the load lasts left every job on the default
    # layout). 0: never defer.
    defer_max_s: float = DEFAULT_DEFER_MAX_S
    placement: PlacementSettings = field(default_factory=PlacementSettings)
    reservation_ttl_s: float = 86400.0
    poll_s: float = 1.0  # how often pending requests and resources are checked
    flush_s: float = 5.0  # longest a received report waits before it is stored (allocation flushes first)
    batch_max: int = 5000
    retain: timedelta = timedelta(days=7)
    # One time-series row per OSS (and its OSTs) per this many seconds; the live view and the
    # live rows take every message. Agents at the 60 s default are stored in full; 1,000 OSS at 1 s
    # would otherwise add 8,000 rows a second to the DB for no allocation's benefit.
    series_interval_s: float = 60.0
    allowed_oss: frozenset[str] | None = None
    curve_secret_key: Path | None = None  # the MDS's certificate (zmq.auth format)
    curve_authorized: Path | None = None  # directory of authorised agents' public certificates
    insecure: bool = False  # listen without CURVE: anyone reaching the port may report for any OSS
    max_skew_s: float = DEFAULT_MAX_SKEW_S  # a message's time may be this far ahead of the MDS clock
    fsname: str | None = None  # the file system this MDS serves; None: learnt from the first accepted OST
    status_file: Path | None = None
    lustre_params: LustreParamsReader | None = None  # the MDS node's Lustre parameters; None: not read
    lustre_params_interval_s: float | None = None  # default: interval_s
    maps_dir: Path | None = None  # where each allocated application's layout map is written (None: not)


@dataclass
class Counters:
    accepted: int = 0
    dropped: Counter = field(default_factory=Counter)
    stored: int = 0
    reservations_ended: int = 0
    allocation_passes: int = 0
    allocated: int = 0
    deferred: int = 0
    forced: int = 0  # passes run despite the gate, after deferring defer_max_s
    failed: int = 0
    refused: int = 0
    ost_dropped: Counter = field(default_factory=Counter)  # OSTs left out of accepted messages, per OST_CAUSES


class MdsService:
    def __init__(self, engine: Engine, config: MdsConfig, sampler: NodeSampler | None = None):
        self.engine = engine
        self.config = config
        self.sampler = sampler or NodeSampler()
        self.counters = Counters()
        self.view = ClusterView.from_db(engine, config.interval_s, config.stale_intervals)
        self.jobs = JobTracker()  # per-job rates from the agents' job_stats (iez.mds.jobs)
        self.usage = Usage(0.0, 0.0)
        self._stop = threading.Event()
        self._logged_causes: set[str] = set()
        self._failed_apps: dict[str, str] = {}
        self._last_pending: frozenset = frozenset()
        self.db = DbHealth()  # the DB's health, for /metrics and one log line per outage (iez.mds.dbhealth)
        # what iez's allocations hold per OST, read by the control loop for /metrics (never by a scrape)
        self.reservations_cache: dict[int, int] | None = None
        self._deferring_since: float | None = None  # the current gate episode (first deferred pass)
        self._deferring_reason: str | None = None
        self._gate_forced = False  # this episode's limit was reached: allocations go on despite the gate
        self._batch: list = []
        self._batch_policies: dict[int, tuple] = {}  # OST policies to store with the next batch
        self._batch_since = 0.0
        self.lustre_status: dict = {"source": config.lustre_params.kind if config.lustre_params else "none"}
        self._lustre_error: str | None = None
        self._warned_no_osts = False  # said once until a reading finds OSTs again
        self._series_at: dict[str, float] = {}  # when each OSS last went into the time series
        self._store_queue: queue.Queue = queue.Queue(maxsize=8)
        self._abandon = threading.Event()  # set when stopping: a DB still down after the grace time loses the rest
        self._writer_thread = threading.Thread(target=self._writer, name="iez-mds-writer", daemon=True)
        self._writer_thread.start()
        self.endpoint: str | None = None
        self.started = time.time()
        self._last_allocation: float | None = None
        self._auth: OssAuthenticator | None = None
        self.metrics: MdsMetrics | None = None  # when --metrics-bind serves them
        self.keys: OssKeys | None = None  # with CURVE
        self.fsname: str | None = config.fsname or self.view.fsname()
        self._limited: dict[tuple, float] = {}  # (cause, oss, detail) -> when last logged
        # the active-MDS lease (iez.mds.lease): ``fence`` runs in each allocation's transaction and raises
        # LeaseLost when this MDS's generation is no longer the current one; ``fenced`` is then told (and stops it)
        self.fence: Callable[[Session], None] | None = None
        self.fenced: Callable[[LeaseLost], None] | None = None
        # a standby (issue 25) ingests into its view only; promote() makes it the active service
        self.active = True
        self.active_since: float | None = time.time()
        self.lease_generation: int | None = None
        self._promote = threading.Event()
        self._standby_status_file: Path | None = None

    def stand_by(self) -> None:
        """Start as a standby: ingest into the view, store and allocate nothing, write no status file."""
        self.active, self.active_since = False, None
        self._standby_status_file, self.config.status_file = self.config.status_file, None

    def promote(self, generation: int | None = None) -> None:
        """This service now holds the lease: become the active one at the loop's next turn (any thread)."""
        self.lease_generation = generation
        self._promote.set()

    def _become_active(self) -> None:
        self._promote.clear()
        self.active, self.active_since = True, time.time()
        if self._standby_status_file is not None:
            self.config.status_file = self._standby_status_file
        self._last_pending = frozenset()  # every pending request gets a pass at once
        self.view.refresh()
        log.info("active now (lease generation %s), placing with the view the standby kept: %d OSS(s) fresh, "
                 "%d stale, %d OST(s); %d report(s) taken in while standing by", self.lease_generation,
                 len(self.view.fresh()), len(self.view.stale()), len(self.view.osts), self.counters.accepted)
        self.write_status()

    # -- lifecycle ------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    @property
    def ingest(self) -> str:
        return "curve" if self.config.curve_secret_key else "insecure"

    def check_ingest(self):
        """The MDS's key pair and the OSS keys, or :class:`IngestConfigError`; None when insecure by choice."""
        cfg = self.config
        if not cfg.curve_secret_key:
            if cfg.insecure:
                return None
            raise IngestConfigError("iez mds needs CURVE keys: give --curve-secret-key FILE and --curve-authorized DIR "
                                    "(iez-agent keys DIR NAME makes them), or --insecure to accept any sender")
        from iez.mds.keys import OssKeys, load_server_key

        if not cfg.curve_authorized:
            raise IngestConfigError("--curve-secret-key needs --curve-authorized DIR with one OSS_ID.key per OSS")
        pair = load_server_key(cfg.curve_secret_key)
        secrets = sorted(p.name for p in Path(cfg.curve_authorized).glob("*.key_secret")) \
            if Path(cfg.curve_authorized).is_dir() else []
        if secrets:  # a secret key copied here is a key that has left its agent, and is no OSS's public key
            raise IngestConfigError(f"--curve-authorized {cfg.curve_authorized} holds secret keys "
                                    f"({', '.join(secrets[:3])}{', ...' if len(secrets) > 3 else ''}): it takes "
                                    "only the OSSs' public OSS_ID.key files; keep each .key_secret on its own OSS "
                                    "and remove these")
        self.keys = OssKeys(cfg.curve_authorized)
        return pair

    def _socket(self, ctx: zmq.Context) -> zmq.Socket:
        pair = self.check_ingest()
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_WIRE_BYTES)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        if pair is not None and self.keys is not None:  # check_ingest sets both with CURVE, neither without
            from iez.mds.keys import OssAuthenticator

            public, secret = pair
            self._auth = OssAuthenticator(ctx, self.keys)
            self._auth.start()
            sock.curve_secretkey, sock.curve_publickey, sock.curve_server = secret, public, True
        try:
            sock.bind(self.config.bind)
        except zmq.ZMQError as err:  # busy or unresolvable: one line from the command, exit 2
            sock.close(linger=0)
            raise OSError(f"cannot bind {self.config.bind}: {err.strerror}") from None
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        return sock

    def run(self, install_signals: bool = True) -> int:
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        ctx = zmq.Context()
        try:
            sock = self._socket(ctx)
        except BaseException:
            if self._auth:
                self._auth.stop()
            ctx.destroy(linger=0)
            self._stop_writer()
            raise
        log.info("%s on %s; %d OSS(s), %d OST(s) known from the DB (%d stale)",
                 "listening" if self.active else "standby: ingesting (not storing, not allocating)", self.endpoint,
                 len(self.view.osses), len(self.view.osts), len(self.view.stale()))
        if self.keys is not None and not self.keys.oss_ids():
            log.warning("NO OSS KEY in %s (--curve-authorized): every agent's handshake is refused and no report "
                        "is accepted until OSS_ID.key files are added there (iez-agent keys DIR OSS_ID writes one; "
                        "the directory is read again when it changes)", self.config.curve_authorized)
        elif self.keys is not None:
            log.info("ingest authenticated (CURVE): %d OSS key(s) in %s", len(self.keys.oss_ids()),
                     self.config.curve_authorized)
        else:
            log.warning("ingest is INSECURE (--insecure): anyone who reaches %s can report for any OSS%s",
                        self.endpoint, "" if self.config.allowed_oss is None else
                        f" of the {len(self.config.allowed_oss)} in --oss-list")
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        next_check = next_status = next_params = time.monotonic()
        next_prune = time.monotonic() + 60
        next_reservations = time.monotonic()
        self.db.start()
        params_every = self.config.lustre_params_interval_s or self.config.interval_s
        try:
            while not self._stop.is_set():
                if self._promote.is_set():
                    self._become_active()
                if poller.poll(timeout=250 if self.active else 100):
                    self._drain(sock)
                now = time.monotonic()
                if now >= next_params and self.config.lustre_params is not None:
                    next_params = now + params_every
                    self.read_lustre_params()
                pending = self._batch or self._batch_policies
                if pending and (now - self._batch_since >= self.config.flush_s or len(self._batch) >= self.config.batch_max):
                    self._flush()
                if now >= next_check:
                    next_check = now + self.config.poll_s
                    self._check_staleness()
                    if self.active:
                        self.allocate_if_due()
                if now >= next_prune and self.active:
                    next_prune = now + 3600
                    try:
                        with self.db.attempt("pruning old statistics"):
                            prune(self.engine, self.config.retain)
                    except Exception:  # logged once per outage by self.db; tried again in an hour
                        pass
                if now >= next_reservations and self.active:
                    next_reservations = now + RESERVATIONS_EVERY_S
                    self._refresh_reservations()
                if now >= next_status:
                    next_status = now + 2.0
                    self.write_status()
        finally:
            self._flush()
            self._stop_writer()
            self.write_status()
            self.db.stop()
            sock.close(linger=0)
            if self._auth:
                self._auth.stop()
            ctx.term()
            log.info("stopped: %d messages accepted, %d dropped", self.counters.accepted,
                     sum(self.counters.dropped.values()))
        return 0

    def _stop_writer(self, grace_s: float = 30.0) -> None:
        self._store_queue.put(None)
        self._writer_thread.join(timeout=grace_s)
        if self._writer_thread.is_alive():
            self._abandon.set()
            self._writer_thread.join(timeout=5)

    # -- messages ---------------------------------------------------------------------
    def _drain(self, sock: zmq.Socket) -> None:
        for _ in range(self.config.batch_max):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            # with CURVE, ZAP set the User-Id to the oss_id the sending key is bound to (iez.mds.keys)
            # (Frame.get gives a metadata property, such as User-Id, as str; an int only for a socket option)
            sender = frames[0].get("User-Id") if self.keys is not None else None
            self.receive([f.bytes for f in frames], sender=sender if isinstance(sender, str) else None)

    def receive(self, frames: list[bytes], sender: str | None = None) -> bool:
        """Validate one message and queue it for storing; False when it was dropped.

        ``sender``: the oss_id the CURVE key of the connection is bound to (None without CURVE).
        """
        now = time.time()
        try:
            report = decode(frames)
            if self.keys is not None and report.oss_id != sender:
                raise Rejected("wrong_key", f"message for OSS {report.oss_id!r} sent with the key of "
                                            f"{sender or 'no OSS'!r}")
            if self.config.allowed_oss is not None and report.oss_id not in self.config.allowed_oss:
                raise Rejected("unknown_oss", f"OSS {report.oss_id!r} is not in the configured list")
            sample = epoch(report.time)
            if sample > now + self.config.max_skew_s:
                raise Rejected("future", f"OSS {report.oss_id!r} time {sample:.3f} is {sample - now:.0f} s ahead of "
                                         f"the MDS clock (at most {self.config.max_skew_s:g} s)")
            last = self.view.last_position(report.oss_id)
            if last is not None and (sample, report.seq) <= last:
                raise Rejected("replayed", f"OSS {report.oss_id!r} time {sample:.3f} seq {report.seq} is not after "
                                           f"time {last[0]:.3f} seq {last[1]}")
        except Rejected as err:
            self.counters.dropped[err.cause] += 1
            if err.cause in ("wrong_key", "future"):  # an OSS's misconfiguration or an attack: say it per OSS
                self._log_limited((err.cause, sender), "dropping message (%s)", err)
            elif err.cause not in self._logged_causes:
                self._logged_causes.add(err.cause)
                log.warning("dropping message (%s); further drops of this cause are only counted", err)
            return False
        report = self._claim_osts(report)
        received = datetime.fromtimestamp(now, timezone.utc).replace(tzinfo=None)
        old = self.view.osses.get(report.oss_id)
        was_stale = old is not None and old.stale
        self.view.apply(report, now)
        if report.jobs is not None:  # only the OSTs the report kept (_claim_osts may leave some out)
            kept = {o.index for o in report.osts}
            self.jobs.apply(report.oss_id, sample, {i: j for i, j in report.jobs.items() if i in kept})
        if was_stale:
            self.view.refresh()
            log.info("OSS %s reports again: its OSTs are back in allocation", report.oss_id)
        if not self._batch and not self._batch_policies:
            self._batch_since = time.monotonic()
        self._batch_policies.update(self.view.policies(o.index for o in report.osts))
        last_series = self._series_at.get(report.oss_id)
        in_series = last_series is None or now - last_series >= self.config.series_interval_s
        if in_series:
            self._series_at[report.oss_id] = now
        self._batch.append((report, received, in_series))
        self.counters.accepted += 1
        return True

    def _log_limited(self, key: tuple, fmt: str, *args) -> None:
        now = time.monotonic()
        last = self._limited.get(key)
        if last is not None and now - last < LOG_EVERY_S:
            return
        if len(self._limited) > 10_000:
            self._limited = {k: t for k, t in self._limited.items() if now - t < LOG_EVERY_S}
        self._limited[key] = now
        log.warning(fmt + " (logged once a minute)", *args)

    def _claim_osts(self, report):
        """The report with only the OSTs this OSS may speak for: of the MDS's file system, named as their index,
        and not held by another OSS that is still fresh. A stale holder's OST is taken over (failover)."""
        from agents.lctl import ost_index

        kept = []
        for o in report.osts:
            ident = ost_index(o.name)
            if ident is None or ident[1] != o.index:
                cause, why = "bad_name", f"name {o.name!r} is not FS-OSTxxxx with index {o.index}"
            elif self.fsname is None:
                self.fsname = ident[0]
                log.info("serving file system %s (learnt from OSS %s)", self.fsname, report.oss_id)
                cause = None
            elif ident[0] != self.fsname:
                cause, why = "other_fs", f"{o.name} is of file system {ident[0]}, this MDS serves {self.fsname}"
            else:
                cause = None
            if cause is None:
                holder = self.view.osts.get(o.index)
                if holder is not None and holder.oss_id != report.oss_id:
                    old = self.view.osses.get(holder.oss_id)
                    if old is not None and not old.stale and o.index in old.osts:
                        cause, why = "conflict", f"OST {o.index} ({o.name}) is held by OSS {holder.oss_id}, which is fresh"
                    else:  # the holder is stale, or its last report no longer lists the OST
                        log.warning("OST %d (%s) moves from OSS %s (%s) to OSS %s: failover", o.index, o.name,
                                    holder.oss_id, "stale" if old is None or old.stale else "no longer reports it",
                                    report.oss_id)
                        if old is not None:
                            old.osts = tuple(i for i in old.osts if i != o.index)
            if cause is None:
                kept.append(o)
                continue
            self.counters.ost_dropped[cause] += 1
            self._log_limited((cause, report.oss_id, o.index), "refusing OST %d of OSS %s (%s): %s", o.index,
                              report.oss_id, cause, why)
        return report if len(kept) == len(report.osts) else replace(report, osts=kept)

    def _flush(self) -> None:
        """Hand the received reports to the writer thread (it stores while this thread decodes)."""
        if not self._batch and not self._batch_policies:
            return
        if not self.active:  # a standby's reports went to its view; the active service stores them
            self._batch, self._batch_policies = [], {}
            return
        batch, self._batch = self._batch, []
        policies, self._batch_policies = self._batch_policies, {}
        # each reported OST's row carries the load the view computed (iez status and the mover read it)
        loads = {o.index: self.view.osts[o.index].rate for item in batch for o in item[0].osts
                 if o.index in self.view.osts}
        self._store_queue.put((batch, policies, loads))  # bounded: a DB slower than the agents slows intake

    def flush_and_wait(self) -> None:
        """Everything received so far is in the DB (allocation needs the latest free space there)."""
        self._flush()
        self._store_queue.join()

    def _writer(self) -> None:
        """Store batches in order; a DB that is down is retried every second, keeping the batch."""
        while True:
            item = self._store_queue.get()
            if item is None:
                self._store_queue.task_done()
                return
            batch, policies, loads = item
            failing = False
            while True:
                try:
                    with self.db.attempt("storing reports"):
                        self.counters.reservations_ended += store_batch(self.engine, batch, policies, loads)
                    self.counters.stored += len(batch)
                    break
                except Exception as err:
                    if not failing:
                        log.error("cannot store %d report(s), retrying every second: %s", len(batch),
                                  str(err).splitlines()[0][:200])
                    failing = True
                    if self._abandon.wait(1.0):
                        log.error("stopping with %d report(s) not stored", len(batch))
                        break
            if failing:
                log.info("storing reports again")
            self._store_queue.task_done()

    # -- the MDS's own Lustre parameters --------------------------------------------------
    def read_lustre_params(self) -> bool:
        """Read the MDS node's parameters into the view and queue the OSTs' policies for storing.

        A reading that fails is logged once per distinct error and leaves the
        previous reading in force (Lustre did not change because lctl failed).
        """
        reader = self.config.lustre_params
        if reader is None:
            return False
        try:
            params = reader.read()
        except (AgentError, OSError, ValueError) as err:
            message = str(err).splitlines()[0][:300]
            if message != self._lustre_error:
                log.error("cannot read the MDS's Lustre parameters from %s: %s", reader.describe(), message)
            self._lustre_error = message
            self.lustre_status["error"] = message
            return False
        if params is None:
            return False
        if self._lustre_error is not None:
            log.info("reading the MDS's Lustre parameters again")
            self._lustre_error = None
        if not params.osts and not self._warned_no_osts:
            log.warning("no osp.*-OST* parameters in %s: no OST states, pools or reserved space from the MDS",
                        reader.describe())
        self._warned_no_osts = not params.osts
        for change in self.view.apply_lustre(params):
            log.info("Lustre policy: %s", change)
        if not self._batch and not self._batch_policies:
            self._batch_since = time.monotonic()
        self._batch_policies.update(self.view.policies())
        self.lustre_status = {"source": reader.kind, "read": time.time(), **params.to_json()}
        self._apply_qos(params.qos)
        return True

    def _apply_qos(self, qos: dict) -> None:
        """The qos baseline allocates with the site's own qos_threshold_rr and qos_prio_free."""
        placement = self.config.placement
        threshold = qos.get("threshold_rr_pct")
        prio = qos.get("prio_free_pct")
        changes = {}
        if threshold is not None and 0 <= threshold <= 100 and threshold / 100 != placement.threshold_rr:
            changes["threshold_rr"] = threshold / 100
        if prio is not None and 0 <= prio <= 100 and prio / 100 != placement.prio_free:
            changes["prio_free"] = prio / 100
        if changes:
            self.config.placement = replace(placement, **changes)
            if placement.policy == "qos":
                log.info("qos settings from Lustre: threshold_rr %.2f, prio_free %.2f",
                         self.config.placement.threshold_rr, self.config.placement.prio_free)

    def _check_staleness(self) -> None:
        went_stale, came_back = self.view.refresh()
        for oss in went_stale:
            log.warning("OSS %s missed %d report intervals: its OSTs are left out of allocation",
                        oss, self.config.stale_intervals)

    # -- allocation ---------------------------------------------------------------------
    def pending_apps(self) -> frozenset[tuple[str, int]]:
        """Applications with requests that have no live allocation, and how many (one plain query a second)."""
        with self.db.attempt("reading pending requests"):
            return read(self.engine, pending_counts)

    def _refresh_reservations(self) -> None:
        """What iez's allocations hold per OST, for /metrics (a scrape never waits for the DB)."""
        from iez.db.models import utcnow

        try:
            with self.db.attempt("reading reservations"):
                self.reservations_cache = read(self.engine, lambda conn: reserved_bytes(conn, utcnow()))
        except Exception:  # logged once per outage by self.db; the last figures stay
            pass

    def allocate_if_due(self) -> int:
        """Allocate pending requests when something changed and the node has room; returns files placed."""
        try:
            pending = self.pending_apps()
        except Exception:  # logged once per outage by self.db (iez.mds.dbhealth), not once a second
            return 0
        if not pending:
            self._last_pending = pending
            return 0
        if pending == self._last_pending and not self.view.changed:
            return 0  # nothing new since the last pass (which may have failed for lack of space)
        self.usage = self.sampler.sample()
        # a limit of 100 % switches that gate off
        over = (self.config.cpu_max < 100 and self.usage.cpu_pct >= self.config.cpu_max) or \
            (self.config.mem_max < 100 and self.usage.mem_pct >= self.config.mem_max)
        if not self._gate_allows(over, len(pending)):
            return 0
        self.flush_and_wait()  # allocate against everything received so far
        placed = self.allocate(sorted(name for name, _ in pending))
        self._refresh_reservations()  # /metrics shows what this pass reserved
        # settled: what this pass saw and left as it was (e.g. no room). Requests stored during the pass
        # (another application, or more of one) differ from what it saw and get a pass of their own.
        self._last_pending = self.pending_apps() & pending
        return placed

    def _gate_allows(self, over: bool, apps: int) -> bool:
        """The CPU/memory gate: defers while the node is over a limit, but at most ``defer_max_s`` per episode;
        logs once when an episode starts, once when its limit is reached, and once when it ends."""
        now = time.monotonic()
        reason = (f"MDS cpu {self.usage.cpu_pct:.0f}% (limit {self.config.cpu_max:.0f}%), memory "
                  f"{self.usage.mem_pct:.0f}% (limit {self.config.mem_max:.0f}%)")
        if not over:
            if self._deferring_since is not None:
                log.info("allocation gate open again after %.0f s: %s", now - self._deferring_since, reason)
            self._deferring_since, self._deferring_reason, self._gate_forced = None, None, False
            return True
        self._deferring_reason = reason
        if self._deferring_since is None:
            self._deferring_since = now
            if self.config.defer_max_s > 0:
                log.warning("deferring allocation of %d application(s) for at most %.0f s (--defer-max): %s",
                            apps, self.config.defer_max_s, reason)
        if now - self._deferring_since >= self.config.defer_max_s:
            if not self._gate_forced:
                self._gate_forced = True
                log.warning("allocating despite the node's load: deferred %.0f s (--defer-max %.0f s); %s",
                            now - self._deferring_since, self.config.defer_max_s, reason)
            self.counters.forced += 1
            return True
        self.counters.deferred += 1
        return False

    def gate_status(self) -> dict:
        """The CPU/memory gate for ``iez status``: ``state`` open, deferring (since how long) or forced."""
        since = self._deferring_since
        state = "open" if since is None else ("forced" if self._gate_forced else "deferring")
        return {"state": state, "defer_max_s": self.config.defer_max_s,
                "deferring_s": round(time.monotonic() - since, 1) if since is not None else None,
                "reason": self._deferring_reason, "forced_passes": self.counters.forced}

    def allocate(self, apps: list[str]) -> int:
        placed = 0
        self.counters.allocation_passes += 1
        placement = self.config.placement

        def cluster_for(app: str):
            own = self.jobs.rates_of(own_job_ids(app))  # the app's own job's load does not steer it

            def cluster_of(session, now):
                return self.view.cluster(reserved_bytes(session, now), placement.ost_bandwidth,
                                         placement.oss_bandwidth, placement.ost_bandwidths, placement.oss_bandwidths,
                                         own_load=own)
            return cluster_of

        for app in apps:
            started = time.perf_counter()
            try:
                done = place_app(self.engine, app, placement, stale_s=self.view.rule,
                                 reservation_ttl_s=self.config.reservation_ttl_s, cluster_of=cluster_for(app),
                                 fence=self.fence)
            except LeaseLost as err:  # another MDS is the active one now: nothing was stored; stop
                self.counters.failed += 1
                log.error("allocation of %s refused: %s; stopping", app, err)
                if self.fenced is not None:
                    self.fenced(err)
                self.stop()
                break
            except AllocationError as err:
                self.counters.failed += 1
                log.error("allocation of %s refused by the capacity guard: %s", app, err)
                continue
            except Exception as err:
                self.counters.failed += 1
                log.error("allocation of %s failed: %s", app, str(err).splitlines()[0][:200])
                continue
            finally:
                if self.metrics is not None:
                    self.metrics.allocation_seconds.observe(time.perf_counter() - started)
            if done.refused:
                self.counters.refused += len(done.refused)
                why = f"{len(done.refused)} file(s) refused, first {done.refused[0][0]}: {done.refused[0][1]}"
                if self._failed_apps.get(app) != why:
                    self._failed_apps[app] = why
                    log.warning("cannot place every file of %s yet: %s", app, why)
            else:
                self._failed_apps.pop(app, None)
            if done.placed:
                placed += len(done.placed)
                log.info("allocated %d file(s) of %s with %s", len(done.placed), app, placement.policy)
                self._write_map(app)
        self.counters.allocated += placed
        self._last_allocation = time.time()
        self.view.allocated()
        return placed

    def _write_map(self, app: str) -> None:
        """The app's layout map (iez.maps) for jobs started with IEZ_MAP=MAPS_DIR/<app>.cdb; never fatal."""
        if not self.config.maps_dir:
            return
        from iez.maps import write_app_map

        try:
            info = write_app_map(self.engine, app, self.config.maps_dir)
            log.info("wrote the layout map of %s: %s (%d layouts)", app, info["path"], info["entries"])
        except Exception as err:
            log.error("cannot write the layout map of %s: %s", app, str(err).splitlines()[0][:200])

    # -- status ---------------------------------------------------------------------------
    def status(self) -> dict:
        c = self.counters
        return {
            "pid": os.getpid(),
            "endpoint": self.endpoint,
            "role": "active" if self.active else "standby",
            "active_since": self.active_since,
            "lease_generation": self.lease_generation,
            "started": self.started,
            "time": time.time(),
            "ingest": self.ingest,
            "fsname": self.fsname,
            "messages": {"accepted": c.accepted, "stored": c.stored,
                         "dropped": {cause: c.dropped.get(cause, 0) for cause in CAUSES},
                         "osts_refused": {cause: c.ost_dropped.get(cause, 0) for cause in OST_CAUSES},
                         "handshakes_refused": self.keys.refused if self.keys is not None else 0},
            "osses": {"fresh": self.view.fresh(), "stale": self.view.stale(),
                      "last_seen": {o.oss_id: round(o.received, 3) for o in self.view.osses.values()},
                      "stale_since": {o.oss_id: round(o.stale_since, 3) for o in self.view.osses.values()
                                      if o.stale and o.stale_since}},
            "osts": len(self.view.osts),
            "ost_states": self._ost_states(),
            # what placement sees as other jobs' traffic (iez.traffic), the busy OSTs only
            "loads_mib_s": {str(i): round(rate / (1 << 20), 3) for i, rate in sorted(self.view.loads().items())
                            if rate >= 1024},
            # which jobs drive each OST and OSS (job_stats; the top few, bytes/s over the window)
            "jobs": self.jobs.status(),
            "lustre": self.lustre_status,
            "allocation": {"passes": c.allocation_passes, "files": c.allocated, "deferred": c.deferred,
                           "failed": c.failed, "refused": c.refused, "last": self._last_allocation,
                           "refusals": dict(self._failed_apps)},
            "reservations_ended": c.reservations_ended,
            "resources": {"cpu_pct": round(self.usage.cpu_pct, 1), "mem_pct": round(self.usage.mem_pct, 1),
                          "cpu_max": self.config.cpu_max, "mem_max": self.config.mem_max},
            "gate": self.gate_status(),
            "db": self.db.status(),
        }

    def _ost_states(self) -> dict[str, list[int]]:
        """OST indices per state, the active ones left out."""
        states: dict[str, list[int]] = {}
        for o in sorted(self.view.osts.values(), key=lambda o: o.index):
            if o.state != "active":
                states.setdefault(o.state, []).append(o.index)
        return states

    def write_status(self) -> None:
        path = self.config.status_file
        if not path:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(self.status(), separators=(",", ":")))
            os.replace(tmp, path)
        except OSError as err:
            log.error("cannot write %s: %s", path, err)
