"""Balance metrics (paper eq. 7), the best OSTCost any placement can reach, and modelled I/O time.

An OST's *utilisation* is the bytes the evaluated application(s) stored on
it over the bytes it had available at the start of the run (paper IV; the
testbed figures fit that reading). ``ost_cost = max / mean`` over the OSTs
of the evaluation: every OST of the pool for FPP and concurrent runs, the
OSTs holding the file for SSF. ``fill`` is the whole-OST view: all bytes
stored over capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

import heapq

import numpy as np


@dataclass(frozen=True)
class Balance:
    ost_cost: float
    oss_cost: float
    max_ost_util: float
    mean_ost_util: float
    max_fill: float
    mean_fill: float


def _ratio(values: np.ndarray) -> float:
    mean = float(values.mean()) if len(values) else 0.0
    return float(values.max()) / mean if mean > 0 else 1.0


def balance(app_bytes: np.ndarray, avail: np.ndarray, used: np.ndarray, total: np.ndarray,
            oss_of: np.ndarray, evaluated: np.ndarray) -> Balance:
    """Metrics from per-OST arrays; ``evaluated`` masks the OSTs the OSTCost is taken over."""
    util = np.divide(app_bytes, avail, out=np.zeros(len(avail)), where=avail > 0)
    oss_ids = np.unique(oss_of[evaluated])
    oss_util = np.array([app_bytes[evaluated & (oss_of == s)].sum() / max(avail[evaluated & (oss_of == s)].sum(), 1)
                         for s in oss_ids])
    fill = (used + app_bytes) / total
    return Balance(
        ost_cost=_ratio(util[evaluated]),
        oss_cost=_ratio(oss_util),
        max_ost_util=float(util[evaluated].max()),
        mean_ost_util=float(util[evaluated].mean()),
        max_fill=float(fill.max()),
        mean_fill=float(fill.mean()),
    )


def ost_cost_bound(pieces: np.ndarray, avail: np.ndarray, max_levels: int = 4000) -> float:
    """A lower bound on the OSTCost of placing stripe objects of ``pieces`` bytes on OSTs of ``avail`` bytes.

    Take any placement and let ``M`` be its largest utilisation. Every piece is
    at least ``b`` (the smallest) and at most ``B`` (the largest) bytes, so OST
    ``o`` holds at most ``floor(M a_o / b)`` pieces and at most
    ``cap_o(M) = min(M a_o, floor(M a_o / b) * B)`` bytes. The mean utilisation
    is then at most ``F(M) / n``, where ``F(M)`` pours the bytes onto the OSTs
    with least space first, each up to its cap. Hence OSTCost ``>= M n / F(M)``,
    and the bound is the minimum of that over the feasible levels ``M``: the
    first feasible one and the values ``k b / a_o`` above it where a cap steps
    up (in between, ``M / F(M)`` only grows). Past ``max_levels`` levels the
    fractional caps ``M a_o`` take over, whose ratio only grows with ``M``.
    Equal stripes on equal OSTs give the exact answer (8 files x 8 stripes on
    15 OSTs: 5 / 4.27 = 1.17).
    """
    pieces = pieces[pieces > 0].astype(float)
    live = np.sort(avail[avail > 0].astype(float))
    if len(pieces) == 0 or len(live) == 0:
        return 1.0
    n, count, total = len(avail), len(pieces), float(pieces.sum())
    small, large = float(pieces.min()), float(pieces.max())

    def poured(caps: np.ndarray) -> float:
        """Sum of load/avail when the bytes fill the OSTs with least space first; 0 if they do not fit."""
        if caps.sum() < total * (1 - 1e-12):
            return 0.0
        before = np.concatenate(([0.0], np.cumsum(caps)[:-1]))
        return float((np.minimum(caps, np.maximum(0.0, total - before)) / live).sum())

    def stepped(level: float) -> float:
        slots = np.floor(level * live / small + 1e-9)
        if slots.sum() < count:
            return 0.0
        return poured(np.minimum(level * live, slots * large))

    lo, hi = 0.0, count * small / live.min() + total / live.sum()
    for _ in range(200):  # the first feasible level
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if stepped(mid) > 0 else (mid, hi)
    k = np.ceil(hi * live / small - 1e-6)
    heap = [(float(k[o] * small / live[o]), int(o)) for o in range(len(live))]
    heapq.heapify(heap)
    # The first feasible level itself may sit between two steps (where the byte caps first hold
    # everything), so it is a candidate too.
    def ratio(level: float) -> float:
        value = stepped(level)
        return level * n / value if value > 0 else np.inf

    best, level = ratio(hi), hi
    for _ in range(max_levels):
        level, o = heapq.heappop(heap)
        heapq.heappush(heap, (level + small / live[o], o))
        if level * n * live[0] / total >= best:  # F(M) never exceeds everything on the smallest OST
            return max(1.0, float(best))
        best = min(best, ratio(level))
    fractional = poured(level * live)
    if fractional > 0:
        best = min(best, level * n / fractional)
    return max(1.0, float(best))


def window_bound(pieces: np.ndarray, avail: np.ndarray) -> float:
    """Bound for one file whose OSTCost is taken over the OSTs holding it (SSF).

    The file's ``c`` stripes go to ``c`` distinct OSTs; for a fixed smallest
    ``avail`` in the set, the best partners are the next larger ones, so the
    optimum is a window of consecutive OSTs in order of available space.
    """
    c = len(pieces)
    order = np.sort(avail[avail > 0].astype(float))
    best = np.inf
    for start in range(len(order) - c + 1):
        window = order[start:start + c]
        if window[0] * 1.0 < pieces.max():
            continue
        best = min(best, ost_cost_bound(pieces, window))
    return float(best) if np.isfinite(best) else float("nan")


def makespan(app_bytes: np.ndarray, oss_of: np.ndarray, ost_bandwidth: float, oss_bandwidth: float) -> float:
    """Modelled I/O time: each OST streams its bytes; an OSS's OSTs share its bandwidth; the slowest sets the pace."""
    slowest = float(app_bytes.max() / ost_bandwidth) if len(app_bytes) else 0.0
    for oss in np.unique(oss_of):
        slowest = max(slowest, float(app_bytes[oss_of == oss].sum() / oss_bandwidth))
    return slowest
