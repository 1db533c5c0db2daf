"""When the balancing service must hold back: a pool with degraded OSTs, or OSTs busy with jobs.

Ceph's balancer backs off while the cluster is degraded; moving data then adds
load to servers that are rebuilding and may land stripes on OSTs about to be
replaced. So a pool with an OST ``degraded``, ``inactive`` or ``readonly``
pauses the service (``nocreate`` does not: that is how an OST is drained, and
the planner already never moves stripes onto it).

Busy is measured, never configured (ARCHITECTURE, "The live view is measured"):
on an emulated cluster from its servers' traffic counters (the ``stats`` the
running emulator rewrites in each OSS's tree, as an agent reads them), through
the interaction DB from the load the MDS computed from the agents' counters
(``osts.load_bytes_s``, :func:`iez.db.stats.ost_loads`). Those counters count
the service's own moves too, so its own bytes over the same window are taken
off: what is left is jobs' traffic, and an OST with more than the threshold of
it is busy. (Lustre's ``job_stats`` would name the jobs; until the agents report
them per job, the subtraction is the service's own bookkeeping.)
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

from iez.model import raid0_bytes

#: States that pause a pool's balancing.
PAUSING_STATES = ("degraded", "inactive", "readonly")
MiB = 1 << 20


class OwnTraffic:
    """The service's own moves: bytes read from each source OST and written to each destination over each
    move's span, to take off the measured load."""

    def __init__(self, keep_s: float = 3600.0):
        self.moves: deque[tuple[float, float, dict[int, int]]] = deque()
        self.keep_s = keep_s

    def add(self, start: float, end: float, move: dict) -> None:
        per: dict[int, int] = {}
        for osts in (move.get("from") or [], move.get("to") or []):
            if osts:
                for j, n in zip(osts, raid0_bytes(move["bytes"], move.get("stripe_size") or MiB, len(osts))):
                    per[j] = per.get(j, 0) + n
        self.moves.append((start, max(end, start + 1e-6), per))
        while self.moves and self.moves[0][1] < end - self.keep_s:
            self.moves.popleft()

    def bytes_between(self, t0: float, t1: float) -> dict[int, float]:
        """Bytes per OST of the moves over ``[t0, t1]`` (a move's bytes spread evenly over its span)."""
        out: dict[int, float] = {}
        for start, end, per in self.moves:
            overlap = min(end, t1) - max(start, t0)
            if overlap <= 0:
                continue
            share = overlap / (end - start)
            for j, n in per.items():
                out[j] = out.get(j, 0.0) + n * share
        return out


class EmulatedView:
    """An emulated cluster's OST states (its trees now) and traffic (its servers' counters)."""

    def __init__(self, root: str | Path, window_s: float = 3.0, min_span_s: float = 1.0):
        self.root = str(root)
        self.window_s, self.min_span_s = window_s, min_span_s
        self.samples: deque[tuple[float, dict[int, int]]] = deque()

    def states(self) -> dict[int, str]:
        from iez.emulate.cluster import ClusterLayout, tree_states

        return tree_states(ClusterLayout.load(self.root))

    def _counters(self) -> dict[int, int]:
        from agents.lctl import collect_osts
        from agents.procfs import read_tree
        from iez.emulate.cluster import ClusterLayout

        layout = ClusterLayout.load(self.root)
        out = {}
        for oss_id in layout.oss_ids:
            for reading in collect_osts(read_tree((str(layout.oss_root(oss_id)),))).values():
                if reading.fsname == layout.fsname:
                    out[reading.index] = (reading.read_bytes or 0) + (reading.write_bytes or 0)
        return out

    def _sample(self) -> None:
        self.samples.append((time.time(), self._counters()))

    def jobs_rates(self, own: OwnTraffic) -> dict[int, float]:
        """Bytes/s of other traffic on each OST over the last ``window_s`` seconds at most and ``min_span_s`` at
        least (a call with no reading that recent waits that long between two)."""
        while self.samples and self.samples[0][0] < time.time() - self.window_s:
            self.samples.popleft()
        self._sample()
        span = self.samples[-1][0] - self.samples[0][0]
        if span < self.min_span_s:
            time.sleep(self.min_span_s - span)
            self._sample()
        (t0, first), (t1, last) = self.samples[0], self.samples[-1]
        mine = own.bytes_between(t0, t1)
        return {j: max(0.0, (last[j] - first.get(j, 0) - mine.get(j, 0.0))) / (t1 - t0)
                for j in last if last[j] >= first.get(j, 0)}


class DbView:
    """The interaction DB's live view (what ``iez status`` prints): states, and the MDS's measured loads."""

    def __init__(self, settings):
        self.settings = settings
        self._engine = None

    def _view(self) -> dict:
        from iez.db import open_db
        from iez.db.engine import read
        from iez.db.models import utcnow
        from iez.db.stats import live_view

        if self._engine is None:
            self._engine = open_db(self.settings)
        return read(self._engine, lambda conn: live_view(conn, utcnow(), self.settings.oss_stale_s))

    def states(self) -> dict[int, str]:
        return {o["index"]: o["state"] for o in self._view()["osts"]}

    def jobs_rates(self, own: OwnTraffic) -> dict[int, float]:
        from iez.traffic import WINDOW_REPORTS

        view = self._view()
        interval = {o["id"]: o.get("interval_s") or 60.0 for o in view["oss"]}
        now = time.time()
        out = {}
        for o in view["osts"]:
            window = (WINDOW_REPORTS - 1) * interval.get(o["oss"], 60.0)
            mine = own.bytes_between(now - window, now).get(o["index"], 0.0) / window
            out[o["index"]] = max(0.0, o["load_mib_s"] * MiB - mine)
        return out

    def wait_fresh(self, since: float, stop) -> None:
        """Until every OST's latest report was sampled one of its OSS's intervals after ``since`` (so the space
        moves freed shows in the DB before the next plan reads it), four intervals at most, or ``stop`` is set."""
        from datetime import datetime, timezone

        def epoch(text: str) -> float:
            return datetime.fromisoformat(text.rstrip("Z")).replace(tzinfo=timezone.utc).timestamp()

        deadline = None
        while not stop.is_set():
            view = self._view()
            interval = {o["id"]: o.get("interval_s") or 60.0 for o in view["oss"]}
            if deadline is None:
                deadline = since + 4 * max(interval.values(), default=60.0) + 5
            if all(epoch(o["sample_time"]) >= since + interval.get(o["oss"], 60.0) for o in view["osts"]) \
                    or time.time() > deadline:
                return
            stop.wait(0.5)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def degraded(states: dict[int, str], members: list[int]) -> str | None:
    """Why a pool of ``members`` must pause for its OSTs' states (None: it need not)."""
    odd = [f"{j} {states[j]}" for j in sorted(members) if states.get(j) in PAUSING_STATES]
    return f"degraded OSTs in the pool: {', '.join(odd)}" if odd else None


def busy(rates: dict[int, float], osts: set[int], threshold_mib_s: float) -> str | None:
    """Why moves touching ``osts`` must wait for jobs (None: they need not)."""
    hot = [(j, rates[j] / MiB) for j in sorted(osts) if rates.get(j, 0.0) > threshold_mib_s * MiB]
    if not hot:
        return None
    return ("busy: jobs drive " + ", ".join(f"OST {j} at {r:.1f} MiB/s" for j, r in hot)
            + f" (threshold {threshold_mib_s:g} MiB/s)")
