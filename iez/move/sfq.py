"""Start-time fair queuing with bounded depth, SFQ(D) (seed 002, vPFS; Jin, Chase and Kaur 2004).

One :class:`SfqD` stands in front of one server (an OST): every request carries its flow (a movement),
the flow's weight and its cost (bytes). A request gets the start tag ``max(v, F_flow)`` and the finish
tag ``start + cost / weight``, where ``v`` is the start tag of the request dispatched last and
``F_flow`` the finish tag of the flow's previous request; requests are dispatched in order of start
tags, at most ``depth`` at once. So flows that keep the server busy get it in proportion to their
weights, a flow that was idle comes back without credit it did not use, and the depth bounds how far
any flow can get ahead (vPFS's unfairness bound grows with D).

Threads use it as ``with sched.slot(flow, weight, cost): do the I/O``: the call blocks until the
request is dispatched, and leaving the block completes it. :func:`unfairness` is vPFS's measure.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(order=True)
class _Request:
    start: float
    order: int  # arrival order breaks ties: first come, first served
    flow: str = field(compare=False)
    dispatched: bool = field(default=False, compare=False)


class SfqD:
    """SFQ(D) for one server: thread-safe; ``depth`` requests in service at most."""

    def __init__(self, depth: int = 8):
        if depth < 1:
            raise ValueError(f"SFQ depth {depth}: at least 1")
        self.depth = depth
        self._cond = threading.Condition()
        self._queue: list[_Request] = []
        self._finish: dict[str, float] = {}  # each flow's last finish tag
        self._v = 0.0  # virtual time: the start tag of the last dispatched request
        self._busy = 0
        self._order = itertools.count()
        self.served: dict[str, float] = {}  # cost completed per flow

    def _dispatch(self) -> None:
        while self._busy < self.depth and self._queue:
            request = heapq.heappop(self._queue)
            self._v = request.start
            request.dispatched = True
            self._busy += 1
        self._cond.notify_all()

    def acquire(self, flow: str, weight: float, cost: float) -> None:
        """Waits until this request is dispatched."""
        if weight <= 0:
            raise ValueError(f"flow {flow!r}: weight {weight} must be positive")
        with self._cond:
            start = max(self._v, self._finish.get(flow, 0.0))
            self._finish[flow] = start + cost / weight
            request = _Request(start, next(self._order), flow)
            heapq.heappush(self._queue, request)
            self._dispatch()
            while not request.dispatched:
                self._cond.wait()

    def release(self, flow: str, cost: float) -> None:
        """The dispatched request of ``flow`` is done."""
        with self._cond:
            self._busy -= 1
            self.served[flow] = self.served.get(flow, 0.0) + cost
            self._dispatch()

    @contextmanager
    def slot(self, flow: str, weight: float, cost: float):
        self.acquire(flow, weight, cost)
        try:
            yield
        finally:
            self.release(flow, cost)


class Schedulers:
    """One :class:`SfqD` per server (OST index), made on first use."""

    def __init__(self, depth: int = 8):
        self.depth = depth
        self._lock = threading.Lock()
        self._by_server: dict[int, SfqD] = {}

    def __getitem__(self, server: int) -> SfqD:
        with self._lock:
            sched = self._by_server.get(server)
            if sched is None:
                sched = self._by_server[server] = SfqD(self.depth)
            return sched

    def served(self) -> dict[str, float]:
        total: dict[str, float] = {}
        with self._lock:
            for sched in self._by_server.values():
                for flow, cost in sched.served.items():
                    total[flow] = total.get(flow, 0.0) + cost
        return total


def unfairness(throughput: dict[str, float], weights: dict[str, float]) -> float:
    """vPFS's unfairness among applications in one window: the sum of |throughput share - weight
    share|, 0 (perfectly proportional) to 2."""
    flows = [f for f in weights if f in throughput]
    total_t = sum(throughput[f] for f in flows)
    total_w = sum(weights[f] for f in flows)
    if total_t <= 0 or total_w <= 0:
        return 0.0
    return sum(abs(throughput[f] / total_t - weights[f] / total_w) for f in flows)
