"""Exact solver for the balanced stripe-placement flow (the ``iez`` policy's core).

The flow problem of one stripe-size class is: ``m_g`` interchangeable requests
of group ``g`` each need ``c_g`` stripes on distinct OSTs; the ``k``-th stripe
placed on OST ``o`` costs ``a_o + k * b_o`` (increasing in ``k``: convex), and
OST ``o`` takes at most ``ub_o`` stripes. As a min-cost flow it is
source → group (capacity ``m_g c_g``) → OST (capacity ``m_g`` per group) →
sink (unit edges of increasing cost). Every cost depends only on the number
``y_o`` of stripes an OST receives, so the flow splits in two exact steps:

1. **Totals.** Choose ``y`` minimising ``Σ_o Σ_{k≤y_o} (a_o + k b_o)``. The
   ``y`` that a flow can realise are exactly the bases of the cardinality-based
   polymatroid ``y(S) ≤ g(|S|)`` with ``g(k) = Σ_g m_g min(c_g, k)`` (the ``k``
   fullest OSTs can hold at most ``min(c_g, k)`` stripes of each request),
   intersected with the box ``y_o ≤ ub_o``. Separable convex minimisation over
   such a base is solved by the decomposition algorithm (Fujishige,
   *Submodular Functions and Optimization*, §8.2; Groenevelt 1991): water-fill
   the total ignoring the set constraints, find the largest most-violated set
   (here: the fullest ``k`` OSTs), make it tight, and recurse on the
   restriction and the contraction.
2. **Requests.** Split ``y`` among the groups (largest stripe count first,
   taking from the fullest OSTs down to a common level: Ryser's construction in
   bulk) and deal each group's OST multiset out to its requests so that no
   request sees an OST twice.

Cost grows as ``O(n log n)`` per decomposition level for ``n`` OSTs, and
linearly in the number of stripes for the dealing; no graph is built.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

import numpy as np


class InfeasibleError(ValueError):
    """The stripes cannot be placed within the OST capacities and distinctness rules."""


@dataclass(frozen=True)
class Group:
    """``requests`` interchangeable requests of ``stripe_count`` stripes each."""

    requests: int
    stripe_count: int


def waterfill(base: np.ndarray, step: np.ndarray, upper: np.ndarray, total: int) -> np.ndarray:
    """Counts ``y`` with ``Σ y = total``, ``0 ≤ y ≤ upper``, taking the ``total`` cheapest units.

    Unit ``k`` (1-based) of item ``o`` costs ``base[o] + k * step[o]`` (``step > 0``);
    ties go to the lower item position. Raises :class:`InfeasibleError` when
    ``Σ upper < total``.
    """
    n = len(base)
    if total < 0:
        raise ValueError(f"total {total} is negative")
    capacity = int(upper.sum())
    if capacity < total:
        raise InfeasibleError(f"{total} stripes do not fit: the OSTs take at most {capacity}")
    if total == 0 or n == 0:
        return np.zeros(n, dtype=np.int64)
    if capacity == total:
        return upper.astype(np.int64).copy()
    live = upper > 0

    def count(level: float) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            k = np.floor((level - base) / step)
        return np.clip(np.nan_to_num(k, nan=0.0, posinf=0.0, neginf=0.0), 0, upper).astype(np.int64)

    lo = float(np.min(base[live] + step[live])) - 1.0  # below every unit's cost
    hi = float(np.max((base + upper * step)[live]))  # at or above every usable unit's cost
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid <= lo or mid >= hi:
            break
        if count(mid).sum() >= total:
            hi = mid
        else:
            lo = mid
    y = count(lo)
    missing = total - int(y.sum())
    # Finish greedily: the next-cheapest units, lowest position first on ties.
    heap = [(float(base[o] + (y[o] + 1) * step[o]), int(o)) for o in np.flatnonzero(y < upper)]
    heapq.heapify(heap)
    while missing > 0:
        _, o = heapq.heappop(heap)
        y[o] += 1
        missing -= 1
        if y[o] < upper[o]:
            heapq.heappush(heap, (float(base[o] + (y[o] + 1) * step[o]), o))
    return y


def _capacity_by_size(groups: Sequence[Group]):
    """``g(k) = Σ m_g min(c_g, k)`` for ``k = 0..max c`` as an array, flat beyond."""
    top = max(g.stripe_count for g in groups)
    ks = np.arange(top + 1)
    g = np.zeros(top + 1, dtype=np.int64)
    for group in groups:
        g += group.requests * np.minimum(group.stripe_count, ks)
    return g


def stripe_totals(
    base: np.ndarray, step: np.ndarray, upper: np.ndarray, groups: Sequence[Group]
) -> np.ndarray:
    """Step 1: the optimal number of stripes per OST (see module docstring)."""
    gk = _capacity_by_size(groups)

    def g_of(k: np.ndarray | int):
        return gk[np.minimum(k, len(gk) - 1)]

    total = int(g_of(len(base)))
    need = sum(g.requests * g.stripe_count for g in groups)
    if total < need:
        raise InfeasibleError(f"a request needs more distinct OSTs than the {len(base)} usable")
    y = np.zeros(len(base), dtype=np.int64)
    # Each job: (positions of OSTs, offset k0 into g, total to place there).
    jobs = [(np.arange(len(base)), 0, need)]
    capacity = int(upper.sum())
    while jobs:
        idx, k0, amount = jobs.pop()
        try:
            part = waterfill(base[idx], step[idx], upper[idx], amount)
        except InfeasibleError:  # say it of the whole batch, not of the sub-problem that hit it
            raise InfeasibleError(
                f"{need} stripes do not fit: the OSTs take at most {capacity} stripes of this size"
                + ("" if len(idx) == len(base) else " with each file's stripes on distinct OSTs")
            ) from None
        order = np.lexsort((idx, -part))  # fullest first, then position
        prefix = np.cumsum(part[order])
        sizes = np.arange(1, len(idx) + 1)
        violation = prefix - (g_of(k0 + sizes) - g_of(k0))
        worst = violation.max()
        if worst <= 0:
            y[idx] = part
            continue
        k = int(np.flatnonzero(violation == worst)[-1]) + 1  # the largest most-violated set
        tight = int(g_of(k0 + k) - g_of(k0))
        jobs.append((idx[order[:k]], k0, tight))
        jobs.append((idx[order[k:]], k0 + k, amount - tight))
    return y


def split_among_groups(totals: np.ndarray, groups: Sequence[Group]) -> list[np.ndarray]:
    """Step 2a: per-group stripe counts per OST, ``x_g ≤ m_g``, summing to ``totals``.

    Groups with more stripes per request go first and take from the fullest
    OSTs down to a common level, which keeps the remainder realisable (Ryser).
    """
    remaining = totals.astype(np.int64).copy()
    parts: list[np.ndarray | None] = [None] * len(groups)
    for gi in sorted(range(len(groups)), key=lambda i: -groups[i].stripe_count):
        m, c = groups[gi].requests, groups[gi].stripe_count
        want = m * c
        take = _take_from_top(remaining, m, want)
        remaining -= take
        parts[gi] = take
    if remaining.any():
        raise AssertionError("stripe totals were not realisable by the groups")
    return parts  # type: ignore[return-value]


def _take_from_top(remaining: np.ndarray, cap: int, want: int) -> np.ndarray:
    """Take ``want`` units, at most ``cap`` per OST, levelling the fullest OSTs down."""

    def taken(level: int) -> np.ndarray:
        return np.clip(remaining - level, 0, cap)

    if int(taken(0).sum()) < want:
        raise AssertionError("group asks for more stripes than remain")
    lo, hi = 0, int(remaining.max()) if len(remaining) else 0
    while lo < hi:  # the highest level that still yields ``want`` units
        mid = (lo + hi + 1) // 2
        if int(taken(mid).sum()) >= want:
            lo = mid
        else:
            hi = mid - 1
    take = taken(lo + 1)
    extra = want - int(take.sum())
    if extra:
        # OSTs that one more unit would come from at this level, fullest first.
        candidates = np.flatnonzero(taken(lo) > take)
        candidates = candidates[np.lexsort((candidates, -remaining[candidates]))]
        take[candidates[:extra]] += 1
    return take


def deal_to_requests(counts: np.ndarray, ost_order: np.ndarray, requests: int, stripe_count: int) -> np.ndarray:
    """Step 2b: an ``(requests, stripe_count)`` matrix of OST positions, no repeats in a row.

    The OSTs are laid out in ``ost_order``, each repeated ``counts[o]`` times,
    and position ``j`` goes to request ``j mod requests``: an OST appears at
    most ``requests`` times in a row of the sequence, so never twice for one
    request.
    """
    sequence = np.repeat(ost_order, counts[ost_order])
    if len(sequence) != requests * stripe_count:
        raise AssertionError("group stripe total does not match its requests")
    return sequence.reshape(stripe_count, requests).T
