"""What the balancing service is doing, for ``iez status`` and Prometheus.

The service rewrites a status file (default ``$IEZ_STATE_DIR/balance-status.json``,
beside the MDS's ``mds-status.json``) atomically (a temporary renamed over it)
whenever a pool's state changes and every half second while moving, so a
reader never sees half of it: per pool its state (``idle``, ``moving``,
``paused``) and why, its fills, the bytes its plan has left and an ETA from
the rate of this run. ``iez status`` shows it; a restarted service reads back
which pools were in a pass. With ``--metrics-bind`` the same figures are
served as Prometheus metrics (names in :class:`Collector`).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

FILE = "balance-status.json"


class StatusFile:
    def __init__(self, path: Path, balancer):
        self.path, self.balancer = Path(path), balancer

    def previous_pools(self) -> list[dict]:
        doc = read(self.path)
        return [p for p in (doc or {}).get("pools", []) if isinstance(p, dict)]

    def document(self) -> dict:
        b = self.balancer
        s = b.settings
        return {"pid": os.getpid(), "host": socket.gethostname(), "started": round(b.started, 3),
                "updated": round(time.time(), 3), "action": b.last_action, "error": b.error or None,
                "dry_run": b.dry_run,
                "root": s.root, "state_dir": str(b.state_dir),
                "settings": {"high_water": s.high_water, "low_water": s.low_water, "target": s.target,
                             "hysteresis": s.hysteresis, "share": s.share, "busy_mib_s": s.busy_mib_s,
                             "interval": s.interval},
                "pools": [p.to_json() for p in b.pools.values()]}

    def write(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.document(), separators=(",", ":")))
            os.replace(tmp, self.path)
        except OSError as err:
            b = self.balancer
            b.log(f"cannot write {self.path}: {err.strerror or err}")


def read(path: Path) -> dict | None:
    """The status file as written (None when there is none or it is not one), with ``age_s`` and ``running``
    (its process is alive on this host and has not stopped)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    doc["age_s"] = round(max(0.0, time.time() - float(doc.get("updated") or 0)), 1)
    alive = False
    if doc.get("host") == socket.gethostname() and isinstance(doc.get("pid"), int):
        try:
            os.kill(doc["pid"], 0)
            alive = True
        except ProcessLookupError:
            alive = False
        except PermissionError:
            alive = True
    doc["running"] = alive and doc.get("action") != "stopped"
    return doc


def text(doc: dict) -> str:
    """A few lines for ``iez status``."""
    head = (f"Balancer ({'running, pid ' + str(doc.get('pid')) if doc.get('running') else 'not running'}; "
            f"updated {doc.get('age_s', 0):.0f} s ago):")
    lines = [head] + ([f"  last look failed: {doc['error']}"] if doc.get("error") else [])
    for p in doc.get("pools", []):
        name = p.get("pool") or "(all)"
        line = f"  pool {name}: {p.get('state')}"
        if p.get("state") == "moving":
            eta = p.get("eta_s")
            line += f", {p.get('bytes_left', 0) / (1 << 20):.1f} MiB left" + (f", ETA {eta:.0f} s" if eta else "")
        line += f"; max fill {p.get('max_fill', 0):.1%}, spread {p.get('spread', 0):.3f}"
        if p.get("reason"):
            line += f" ({p['reason']})"
        lines.append(line)
    return "\n".join(lines)


class Collector:
    """Prometheus metrics (all ``iez_balance_``), read from the service at scrape time: ``up``,
    ``pool_state{pool,state}`` (1 for its state), ``pool_paused{pool}``, ``pool_bytes_left{pool}``,
    ``pool_eta_seconds{pool}`` (absent while unknown), ``pool_max_fill{pool}``, ``pool_spread{pool}``,
    ``bytes_moved_total{pool}``, ``files_moved_total{pool}``, ``passes_total{pool}``."""

    def __init__(self, balancer):
        self.balancer = balancer

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        prefix = "iez_balance_"
        up = GaugeMetricFamily(prefix + "up", "1 while the balancing service runs")
        up.add_metric([], 1)
        yield up
        pools = [p.to_json() for p in list(self.balancer.pools.values())]
        state = GaugeMetricFamily(prefix + "pool_state", "1 for the pool's state", labels=["pool", "state"])
        gauges = {k: GaugeMetricFamily(prefix + name, doc, labels=["pool"]) for k, name, doc in (
            ("bytes_left", "pool_bytes_left", "bytes the pool's current plan has still to move"),
            ("eta_s", "pool_eta_seconds", "seconds until the current plan is done, at this run's rate"),
            ("max_fill", "pool_max_fill", "fill of the pool's fullest OST (0..1)"),
            ("spread", "pool_spread", "largest less smallest OST fill in the pool"))}
        counters = {k: CounterMetricFamily(prefix + name, doc, labels=["pool"]) for k, name, doc in (
            ("bytes_moved_total", "bytes_moved", "bytes the service moved in the pool"),
            ("files_moved_total", "files_moved", "files the service moved in the pool"),
            ("passes", "passes", "balancing passes started in the pool"))}
        paused = GaugeMetricFamily(prefix + "pool_paused", "1 while the pool's balancing is paused", labels=["pool"])
        for p in pools:
            label = p["pool"] or ""
            for name in ("idle", "moving", "paused"):
                state.add_metric([label, name], 1 if p["state"] == name else 0)
            paused.add_metric([label], 1 if p["state"] == "paused" else 0)
            for k, gauge in gauges.items():
                if p.get(k) is not None:
                    gauge.add_metric([label], p[k])
            for k, counter in counters.items():
                counter.add_metric([label], p[k])
        yield state
        yield paused
        yield from gauges.values()
        yield from counters.values()


def serve_metrics(balancer, bind: str):
    """Serve the metrics on ``HOST:PORT`` (a daemon thread); the server."""
    from prometheus_client import CollectorRegistry, start_http_server

    from iez.mds.metrics import parse_bind

    host, port = parse_bind(bind)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(balancer))
    try:
        server, _ = start_http_server(port, host, registry=registry)
    except (OSError, socket.gaierror) as err:
        raise OSError(f"cannot bind http://{bind} (--metrics-bind): {err.strerror or err}") from None
    return server
