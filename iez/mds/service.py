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

import zmq
from sqlalchemy import Engine

from iez.allocate import AllocationError
from iez.db.allocations import pending_counts
from iez.db.engine import read
from iez.db.stats import reserved_bytes
from agents import AgentError
from iez.mds.lustre_params import LustreParamsReader
from iez.mds.messages import CAUSES, Rejected, decode
from iez.mds.resources import NodeSampler, Usage
from iez.mds.store import prune, store_batch
from iez.mds.view import ClusterView
from iez.placement import PlacementSettings, place_app

log = logging.getLogger("iez.mds")


@dataclass
class MdsConfig:
    bind: str = "tcp://*:5555"
    interval_s: float = 60.0  # agents' default interval, for OSSs whose messages do not say
    stale_intervals: int = 3
    cpu_max: float = 70.0
    mem_max: float = 50.0
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
    failed: int = 0
    refused: int = 0


class MdsService:
    def __init__(self, engine: Engine, config: MdsConfig, sampler: NodeSampler | None = None):
        self.engine = engine
        self.config = config
        self.sampler = sampler or NodeSampler()
        self.counters = Counters()
        self.view = ClusterView.from_db(engine, config.interval_s, config.stale_intervals)
        self.usage = Usage(0.0, 0.0)
        self._stop = threading.Event()
        self._logged_causes: set[str] = set()
        self._failed_apps: dict[str, str] = {}
        self._last_pending: frozenset = frozenset()
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
        self._auth = None
        self.metrics = None  # iez.mds.metrics.MdsMetrics when --metrics-bind serves them

    # -- lifecycle ------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    def _socket(self, ctx: zmq.Context) -> zmq.Socket:
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        if self.config.curve_secret_key:
            from zmq.auth import load_certificate
            from zmq.auth.thread import ThreadAuthenticator

            public, secret = load_certificate(str(self.config.curve_secret_key))
            if secret is None:
                raise ValueError(f"{self.config.curve_secret_key}: not a secret certificate")
            if not self.config.curve_authorized or not Path(self.config.curve_authorized).is_dir():
                raise ValueError("CURVE needs --curve-authorized DIR with the agents' public certificates")
            self._auth = ThreadAuthenticator(ctx)
            self._auth.start()
            self._auth.configure_curve(domain="*", location=str(self.config.curve_authorized))
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
        sock = self._socket(ctx)
        log.info("listening on %s; %d OSS(s), %d OST(s) known from the DB (%d stale)", self.endpoint,
                 len(self.view.osses), len(self.view.osts), len(self.view.stale()))
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        next_check = next_status = next_params = time.monotonic()
        next_prune = time.monotonic() + 60
        params_every = self.config.lustre_params_interval_s or self.config.interval_s
        try:
            while not self._stop.is_set():
                if poller.poll(timeout=250):
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
                    self.allocate_if_due()
                if now >= next_prune:
                    next_prune = now + 3600
                    prune(self.engine, self.config.retain)
                if now >= next_status:
                    next_status = now + 2.0
                    self.write_status()
        finally:
            self._flush()
            self._stop_writer()
            self.write_status()
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
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.receive(frames)

    def receive(self, frames: list[bytes]) -> bool:
        """Validate one message and queue it for storing; False when it was dropped."""
        try:
            report = decode(frames)
            if self.config.allowed_oss is not None and report.oss_id not in self.config.allowed_oss:
                raise Rejected("unknown_oss", f"OSS {report.oss_id!r} is not in the configured list")
            last = self.view.last_seq(report.oss_id)
            if last is not None and report.seq <= last:
                raise Rejected("replayed", f"OSS {report.oss_id!r} seq {report.seq} after {last}")
        except Rejected as err:
            self.counters.dropped[err.cause] += 1
            if err.cause not in self._logged_causes:
                self._logged_causes.add(err.cause)
                log.warning("dropping message (%s); further drops of this cause are only counted", err)
            return False
        now = time.time()
        received = datetime.fromtimestamp(now, timezone.utc).replace(tzinfo=None)
        old = self.view.osses.get(report.oss_id)
        was_stale = old is not None and old.stale
        self.view.apply(report, now)
        if was_stale:
            self.view.refresh()
            log.info("OSS %s reports again: its OSTs are back in allocation", report.oss_id)
        if not self._batch and not self._batch_policies:
            self._batch_since = time.monotonic()
        self._batch_policies.update(self.view.policies(o.index for o in report.osts))
        last = self._series_at.get(report.oss_id)
        in_series = last is None or now - last >= self.config.series_interval_s
        if in_series:
            self._series_at[report.oss_id] = now
        self._batch.append((report, received, in_series))
        self.counters.accepted += 1
        return True

    def _flush(self) -> None:
        """Hand the received reports to the writer thread (it stores while this thread decodes)."""
        if not self._batch and not self._batch_policies:
            return
        batch, self._batch = self._batch, []
        policies, self._batch_policies = self._batch_policies, {}
        self._store_queue.put((batch, policies))  # bounded: a DB slower than the agents slows intake, nothing is lost

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
            batch, policies = item
            failing = False
            while True:
                try:
                    self.counters.reservations_ended += store_batch(self.engine, batch, policies)
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
        return read(self.engine, pending_counts)

    def allocate_if_due(self) -> int:
        """Allocate pending requests when something changed and the node has room; returns files placed."""
        try:
            pending = self.pending_apps()
        except Exception as err:
            log.error("cannot read pending requests: %s", str(err).splitlines()[0][:200])
            return 0
        if not pending:
            self._last_pending = pending
            return 0
        if pending == self._last_pending and not self.view.changed:
            return 0  # nothing new since the last pass (which may have failed for lack of space)
        self.usage = self.sampler.sample()
        # a limit of 100 % switches that gate off
        if (self.config.cpu_max < 100 and self.usage.cpu_pct >= self.config.cpu_max) or \
                (self.config.mem_max < 100 and self.usage.mem_pct >= self.config.mem_max):
            self.counters.deferred += 1
            log.info("deferring allocation of %d application(s): MDS cpu %.0f%% (limit %.0f%%), memory %.0f%% "
                     "(limit %.0f%%)", len(pending), self.usage.cpu_pct, self.config.cpu_max, self.usage.mem_pct,
                     self.config.mem_max)
            return 0
        self.flush_and_wait()  # allocate against everything received so far
        placed = self.allocate(sorted(name for name, _ in pending))
        self._last_pending = self.pending_apps()
        return placed

    def allocate(self, apps: list[str]) -> int:
        placed = 0
        self.counters.allocation_passes += 1
        placement = self.config.placement

        def cluster_of(session, now):
            return self.view.cluster(reserved_bytes(session, now), placement.ost_bandwidth, placement.oss_bandwidth)

        for app in apps:
            started = time.perf_counter()
            try:
                done = place_app(self.engine, app, placement, stale_s=self.config.interval_s * 3,
                                 reservation_ttl_s=self.config.reservation_ttl_s, cluster_of=cluster_of)
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
            "started": self.started,
            "time": time.time(),
            "messages": {"accepted": c.accepted, "stored": c.stored,
                         "dropped": {cause: c.dropped.get(cause, 0) for cause in CAUSES}},
            "osses": {"fresh": self.view.fresh(), "stale": self.view.stale(),
                      "last_seen": {o.oss_id: round(o.received, 3) for o in self.view.osses.values()},
                      "stale_since": {o.oss_id: round(o.stale_since, 3) for o in self.view.osses.values()
                                      if o.stale and o.stale_since}},
            "osts": len(self.view.osts),
            "ost_states": self._ost_states(),
            "lustre": self.lustre_status,
            "allocation": {"passes": c.allocation_passes, "files": c.allocated, "deferred": c.deferred,
                           "failed": c.failed, "refused": c.refused, "last": self._last_allocation,
                           "refusals": dict(self._failed_apps)},
            "reservations_ended": c.reservations_ended,
            "resources": {"cpu_pct": round(self.usage.cpu_pct, 1), "mem_pct": round(self.usage.mem_pct, 1),
                          "cpu_max": self.config.cpu_max, "mem_max": self.config.mem_max},
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
