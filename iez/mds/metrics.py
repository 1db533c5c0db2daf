"""The MDS's Prometheus metrics: its live view, ingest and allocation, served on ``--metrics-bind``.

A registry of its own (never the process-global one), read at scrape time from
the service's view and :class:`~iez.mds.service.Counters`, so the control loop
pays nothing between scrapes; only the allocation latency is observed as it
happens (a histogram). Names (all ``iez_mds_``; deploy/grafana/iez-mds.json
uses them):

- per OST (labels ``ost``, ``oss``): ``ost_fill`` (0..1), ``ost_kbytes_total``,
  ``ost_kbytes_avail``, ``ost_reserved_kbytes`` (Lustre's reserved space),
  ``ost_reservations_bytes`` (what iez's allocations hold until written; one
  grouped DB query by the control loop every 10 s and after each allocation pass, never by a scrape),
  ``ost_load_bytes_per_second`` (read+write rate now), ``ost_state`` (1 for the
  label ``state`` it has: active, degraded, readonly, nocreate, inactive)
- per OSS (label ``oss``): ``oss_fresh`` (1/0, :mod:`iez.freshness`), ``oss_age_seconds``
- ``messages_accepted_total``, ``messages_stored_total``,
  ``messages_dropped_total{cause}``, ``ost_reports_dropped_total{cause}``,
  ``handshakes_refused_total`` (CURVE handshakes with a key not in the authorised directory)
- ``allocation_seconds`` (histogram, one application's placement),
  ``allocation_passes_total``, ``files_allocated_total``, ``files_refused_total``,
  ``allocations_total{outcome=done|deferred|forced|failed}`` (forced: a pass run despite the CPU/memory
  gate, after deferring ``--defer-max`` seconds), ``allocation_deferring_seconds`` (how long the gate has
  held pending requests back; 0 while it is open), ``allocation_gate_limit_seconds`` (``--defer-max``)
- ``db_up`` (1 while the DB answers; 0 when an operation failed or has waited over 10 s),
  ``db_seconds_since_success``; a scrape never queries the DB (reservations are the loop's last reading)
- ``up`` (1), ``start_time_seconds``, ``ingest_insecure`` (1 when ingest is unauthenticated)
"""

from __future__ import annotations

import socket
import time

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from iez.mds.messages import CAUSES

#: ``--metrics-bind`` in the shipped unit; ``iez mds`` alone serves none unless asked.
DEFAULT_METRICS_BIND = "127.0.0.1:9555"
STATES = ("active", "degraded", "readonly", "nocreate", "inactive")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) as (host, port); ValueError naming the option otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--metrics-bind {text!r}: expected HOST:PORT, e.g. {DEFAULT_METRICS_BIND}")
    return host.strip("[]") or "0.0.0.0", int(port)


class _ServiceCollector:
    """Reads the service at scrape time (the scrape runs in the HTTP server's thread: copies, no iteration
    over dictionaries the control loop is changing)."""

    def __init__(self, service):
        self.service = service

    def collect(self):
        s, now = self.service, time.time()
        view, c = s.view, s.counters
        osses = list(view.osses.values())
        osts = sorted(list(view.osts.values()), key=lambda o: o.index)
        prefix = "iez_mds_"

        up = GaugeMetricFamily(prefix + "up", "1 while the MDS control loop runs")
        up.add_metric([], 1)
        started = GaugeMetricFamily(prefix + "start_time_seconds", "when the MDS started (Unix time)")
        started.add_metric([], s.started)
        insecure = GaugeMetricFamily(prefix + "ingest_insecure", "1 when reports are accepted without CURVE keys")
        insecure.add_metric([], 1 if getattr(s.config, "insecure", False) or not s.config.curve_secret_key else 0)
        active = GaugeMetricFamily(prefix + "active", "1 while this service holds the active-MDS lease and "
                                   "allocates, 0 while it stands by (ingesting only)")
        active.add_metric([], 1 if getattr(s, "active", True) else 0)
        since = GaugeMetricFamily(prefix + "active_since_seconds", "when this service became the active one "
                                  "(Unix time; 0 while it stands by)")
        since.add_metric([], getattr(s, "active_since", None) or 0)
        generation = GaugeMetricFamily(prefix + "lease_generation", "the active-MDS lease generation this "
                                       "service holds (0 while it stands by)")
        generation.add_metric([], (getattr(s, "lease_generation", None) or 0) if getattr(s, "active", True) else 0)
        yield from (up, started, insecure, active, since, generation)
        health = getattr(s, "db", None)  # iez.mds.dbhealth.DbHealth
        if health is not None:
            db_up = GaugeMetricFamily(prefix + "db_up", "1 while the DB answers the MDS (0: its last operation "
                                      "failed, or one has waited over 10 s)")
            db_up.add_metric([], 1 if health.up(now) else 0)
            yield db_up
            since_ok = health.seconds_since_success(now)
            if since_ok is not None:
                db_age = GaugeMetricFamily(prefix + "db_seconds_since_success", "seconds since a DB operation "
                                           "of the MDS last succeeded")
                db_age.add_metric([], since_ok)
                yield db_age

        fill = GaugeMetricFamily(prefix + "ost_fill", "share of the OST in use (0..1)", labels=["ost", "oss"])
        total = GaugeMetricFamily(prefix + "ost_kbytes_total", "OST size, KiB", labels=["ost", "oss"])
        avail = GaugeMetricFamily(prefix + "ost_kbytes_avail", "OST free space, KiB", labels=["ost", "oss"])
        reserved = GaugeMetricFamily(prefix + "ost_reserved_kbytes", "space Lustre keeps back on the OST "
                                     "(osp.*.reserved_mb_low), KiB", labels=["ost", "oss"])
        load = GaugeMetricFamily(prefix + "ost_load_bytes_per_second", "read+write rate on the OST between its "
                                 "last two reports", labels=["ost", "oss"])
        state = GaugeMetricFamily(prefix + "ost_state", "1 for the OST's state (the most restrictive of its OSS's "
                                  "and the MDS's)", labels=["ost", "oss", "state"])
        for o in osts:
            labels = [str(o.index), o.oss_id]
            fill.add_metric(labels, 1.0 - min(o.kbytes_avail, o.kbytes_total) / o.kbytes_total if o.kbytes_total else 0.0)
            total.add_metric(labels, o.kbytes_total)
            avail.add_metric(labels, o.kbytes_avail)
            reserved.add_metric(labels, o.lustre.reserved_kbytes or 0)
            load.add_metric(labels, o.rate)
            current = o.state
            for name in STATES if current in STATES else (*STATES, current):
                state.add_metric([*labels, name], 1 if name == current else 0)
        yield from (fill, total, avail, reserved, load, state)
        tracker = getattr(s, "jobs", None)
        if tracker is not None:  # job labels: at most iez.mds.jobs.TOP_PER_OST per OST, so a bounded cardinality
            job_load = GaugeMetricFamily(prefix + "ost_job_bytes_per_second", "read+write rate of one of the OST's "
                                         "top jobs (job_stats) over the load window", labels=["ost", "oss", "job"])
            for index, jobs in tracker.top_per_ost().items():
                for job in jobs:
                    job_load.add_metric([str(index), tracker.oss_of.get(index, ""), job["job_id"]], job["bytes_s"])
            yield job_load
        held = self._reservations()
        if held is not None:
            reservations = GaugeMetricFamily(prefix + "ost_reservations_bytes", "space iez's allocations hold on "
                                             "the OST until the reports show it written", labels=["ost", "oss"])
            for o in osts:
                reservations.add_metric([str(o.index), o.oss_id], held.get(o.index, 0))
            yield reservations

        fresh = GaugeMetricFamily(prefix + "oss_fresh", "1 while the OSS reports within 3 of its intervals",
                                  labels=["oss"])
        age = GaugeMetricFamily(prefix + "oss_age_seconds", "seconds since the OSS's last accepted report",
                                labels=["oss"])
        for o in osses:
            age_s = max(0.0, now - o.received)
            fresh.add_metric([o.oss_id], 1 if view.rule.fresh(age_s, o.interval_s) else 0)
            age.add_metric([o.oss_id], age_s)
        yield from (fresh, age)

        def counter(name, doc, value):
            family = CounterMetricFamily(prefix + name, doc)
            family.add_metric([], value)
            return family

        yield counter("messages_accepted", "agent messages accepted", c.accepted)
        yield counter("messages_stored", "agent messages stored in the DB", c.stored)
        dropped = CounterMetricFamily(prefix + "messages_dropped", "agent messages dropped, per cause",
                                      labels=["cause"])
        counts = dict(c.dropped)
        for cause in sorted(set(CAUSES) | set(counts)):
            dropped.add_metric([cause], counts.get(cause, 0))
        yield dropped
        ost_counts = dict(getattr(c, "ost_dropped", None) or {})
        ost_dropped = CounterMetricFamily(prefix + "ost_reports_dropped", "OSTs left out of accepted messages, "
                                          "per cause", labels=["cause"])
        from iez.mds import messages

        for cause in sorted(set(getattr(messages, "OST_CAUSES", ())) | set(ost_counts)):
            ost_dropped.add_metric([cause], ost_counts.get(cause, 0))
        yield ost_dropped
        keys = getattr(s, "keys", None)  # iez.mds.keys.OssKeys with CURVE
        yield counter("handshakes_refused", "CURVE handshakes refused: keys not in the authorised directory",
                      keys.refused if keys is not None else 0)
        yield counter("allocation_passes", "allocation passes run", c.allocation_passes)
        yield counter("files_allocated", "files given a layout", c.allocated)
        yield counter("files_refused", "files the policy could not place (left pending)", c.refused)
        outcomes = CounterMetricFamily(prefix + "allocations", "allocation attempts per outcome: done (a pass "
                                       "ran), deferred (MDS CPU or memory over its limit), failed (an "
                                       "application's placement failed)", labels=["outcome"])
        outcomes.add_metric(["done"], c.allocation_passes)
        outcomes.add_metric(["deferred"], c.deferred)
        outcomes.add_metric(["failed"], c.failed)
        outcomes.add_metric(["forced"], getattr(c, "forced", 0))
        yield outcomes
        gate = s.gate_status() if hasattr(s, "gate_status") else {}
        deferring = GaugeMetricFamily(prefix + "allocation_deferring_seconds", "how long the CPU/memory gate has "
                                      "held pending requests back (0 while it is open); allocation goes on anyway "
                                      "once this reaches allocation_gate_limit_seconds")
        deferring.add_metric([], gate.get("deferring_s") or 0)
        limit = GaugeMetricFamily(prefix + "allocation_gate_limit_seconds", "the longest the CPU/memory gate "
                                  "defers allocation (--defer-max)")
        limit.add_metric([], gate.get("defer_max_s") or 0)
        yield from (deferring, limit)


    def _reservations(self) -> dict[int, int] | None:
        """The reservations the control loop last read (a scrape never touches the DB: it answers while the DB
        stalls, issue 30 item 4)."""
        cached = getattr(self.service, "reservations_cache", None)
        return dict(cached) if cached is not None else None


class MdsMetrics:
    """The registry of one MDS service; :meth:`serve` starts the HTTP endpoint (a daemon thread)."""

    def __init__(self, service):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_ServiceCollector(service))
        self.allocation_seconds = Histogram("iez_mds_allocation_seconds", "time to place one application's "
                                            "pending files (policy and DB transaction)", buckets=LATENCY_BUCKETS,
                                            registry=self.registry)
        self.server = None
        self.address: tuple[str, int] | None = None

    def serve(self, bind: str) -> tuple[str, int]:
        """Listen on ``HOST:PORT``; OSError "cannot bind http://HOST:PORT: why" when the address is busy or
        cannot be resolved (one line, exit 2, from the command)."""
        host, port = parse_bind(bind)
        try:
            self.server, _ = start_http_server(port, host, registry=self.registry)
        except (OSError, socket.gaierror) as err:
            raise OSError(f"cannot bind http://{bind} (--metrics-bind): {err.strerror or err}") from None
        bound = self.server.server_address
        self.address = (str(bound[0]), int(bound[1]))
        return self.address

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
