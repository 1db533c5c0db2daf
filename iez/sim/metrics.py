"""Metrics of a simulated run: balance (paper eq. 7), modelled I/O time, and bounds no placement can beat.

An OST's *utilisation* is the bytes the evaluated application(s) stored on
it over the bytes it had available at the start of the run (paper IV; the
testbed figures fit that reading). ``ost_cost = max / mean`` over the OSTs
of the evaluation: every OST of the pool for FPP and concurrent runs, the
OSTs holding the file for SSF. ``fill`` is the whole-OST view: all bytes
stored over capacity.

*Modelled I/O time* (makespan, ARCHITECTURE.md "What the allocator
optimises"): a job takes the longest, over OSTs, of its bytes there over the
OST's usable bandwidth (its bandwidth less live congestion, never below
``MIN_BANDWIDTH_SHARE`` of it), and over OSSs, of its bytes there over the
OSS's usable bandwidth (its bandwidth, less ``oss_load_weight`` of it at 100 %
CPU, less the congestion on its OSTs, never below the same share): the
formula of :func:`iez.model.io_time`, over arrays.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
import numpy as np

from iez.model import ClusterState, oss_loads, oss_usable_bandwidth

#: How many distinct object sizes (largest first) the whole-object bounds look at.
MAX_THRESHOLDS = 48
_BISECT_STEPS = 200
_REL_TOL = 1e-13


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
            oss_of: np.ndarray, evaluated: np.ndarray, stored: np.ndarray | None = None) -> Balance:
    """Metrics from per-OST arrays; ``evaluated`` masks the OSTs the OSTCost is taken over.

    ``stored`` (default ``app_bytes``) is what the OSTs actually hold, for fill: a write
    that hit ENOSPC counts in utilisation (the placement sent it) but not in fill.
    """
    util = np.divide(app_bytes, avail, out=np.zeros(len(avail)), where=avail > 0)
    oss_ids = np.unique(oss_of[evaluated])
    oss_util = np.array([app_bytes[evaluated & (oss_of == s)].sum() / max(avail[evaluated & (oss_of == s)].sum(), 1)
                         for s in oss_ids])
    fill = (used + (app_bytes if stored is None else stored)) / total
    return Balance(
        ost_cost=_ratio(util[evaluated]),
        oss_cost=_ratio(oss_util),
        max_ost_util=float(util[evaluated].max()) if evaluated.any() else 0.0,
        mean_ost_util=float(util[evaluated].mean()) if evaluated.any() else 0.0,
        max_fill=float(fill.max()),
        mean_fill=float(fill.mean()),
    )


def fill_spread(used: np.ndarray, total: np.ndarray, mask: np.ndarray | None = None) -> float:
    """Fullest minus emptiest fill over the OSTs of ``mask`` (all by default)."""
    fill = used / total
    if mask is not None and mask.any():
        fill = fill[mask]
    return float(fill.max() - fill.min()) if len(fill) else 0.0


# ------------------------------------------------------------------------------------------- I/O time


@dataclass(frozen=True)
class Bandwidths:
    """Usable bandwidth per OST (bytes/s, ``cluster.osts`` order), the OSS of each, and per OSS."""

    ost: np.ndarray
    oss_code: np.ndarray
    oss: np.ndarray

    @classmethod
    def of(cls, cluster: ClusterState, oss_load_weight: float = 0.0) -> "Bandwidths":
        """OST: :attr:`OST.usable_bandwidth`; OSS: :func:`iez.model.oss_usable_bandwidth` (the load of every
        OST it serves counts, whether or not that OST takes new stripes: the traffic is on the server)."""
        osts = cluster.osts
        ids = list(dict.fromkeys(o.oss_id for o in osts))
        code = {oss: k for k, oss in enumerate(ids)}
        oss_code = np.array([code[o.oss_id] for o in osts], dtype=np.int64)
        load = oss_loads(cluster)
        oss_bw = np.array([oss_usable_bandwidth(cluster.osses[oss_id], load[oss_id], oss_load_weight)
                           for oss_id in ids], dtype=float)
        return cls(np.array([o.usable_bandwidth for o in osts], dtype=float), oss_code, oss_bw)


def makespan(ost_bytes: np.ndarray, bandwidths: Bandwidths) -> float:
    """Modelled I/O time of one job that puts ``ost_bytes`` on each OST: the slowest OST or OSS sets the pace."""
    if not len(ost_bytes):
        return 0.0
    ost_time = float((ost_bytes / bandwidths.ost).max())
    per_oss = np.bincount(bandwidths.oss_code, weights=ost_bytes.astype(float), minlength=len(bandwidths.oss))
    return max(ost_time, float((per_oss / bandwidths.oss).max()))


def makespan_bound(objects: np.ndarray, candidates: np.ndarray, room: np.ndarray, bandwidths: Bandwidths) -> float:
    """A lower bound on the modelled I/O time of any placement of ``objects`` (stripe-object sizes in bytes)
    on the OSTs of ``candidates`` (a mask) that keeps every OST within its ``room`` (bytes under the fill cap).

    The largest of:

    (a) *fluid*: the least ``T`` with ``sum_s min(T B_s, sum_{o in s} min(T b_o, room_o)) >= W``,
        ``W`` all the bytes: by ``T`` no OST can have written more than ``T b_o`` nor more than its
        room, no OSS more than ``T B_s``;
    (b) *whole objects*: for a size ``c`` among the largest object sizes, the ``K_c`` objects of at
        least ``c`` bytes each sit whole on one OST, so by ``T`` OST ``o`` holds at most
        ``min(floor(T b_o / c), floor(room_o / c))`` of them and OSS ``s`` at most
        ``floor(T B_s / c)``; the least ``T`` at which those counts reach ``K_c``;
    (c) the largest object over the fastest OST that has room for it.

    ``inf`` when the objects cannot fit under the cap at all. Each search returns the last
    time known to be too short, so the value never exceeds the true least time.
    """
    objects = np.asarray(objects, dtype=np.int64)
    objects = objects[objects > 0]
    if not len(objects):
        return 0.0
    on = np.flatnonzero(candidates)
    if not len(on):
        return float("inf")
    bw = bandwidths.ost[on]
    roomf = np.maximum(room[on], 0).astype(float)
    code = bandwidths.oss_code[on]
    oss_bw = bandwidths.oss
    n_oss = len(oss_bw)
    total = float(objects.sum())
    if roomf.sum() < total:
        return float("inf")

    def fluid_fits(t: float) -> bool:
        per_oss = np.bincount(code, weights=np.minimum(t * bw, roomf), minlength=n_oss)
        return float(np.minimum(t * oss_bw, per_oss).sum()) >= total

    hi = max(float((roomf / bw).max()), float((np.bincount(code, weights=roomf, minlength=n_oss) / oss_bw).max()))
    best = _least_time(fluid_fits, hi)

    sizes = np.unique(objects)[::-1]
    if len(sizes) > MAX_THRESHOLDS:  # the largest few, then a thinned tail: any subset still bounds
        tail = sizes[MAX_THRESHOLDS // 2:]
        sizes = np.concatenate((sizes[:MAX_THRESHOLDS // 2],
                                tail[np.linspace(0, len(tail) - 1, MAX_THRESHOLDS // 2).astype(int)]))
    ordered = np.sort(objects)[::-1]
    for c in sizes.tolist():
        need = int(np.searchsorted(-ordered, -c, side="right"))  # objects of at least c bytes
        slots = np.floor(roomf / c)
        if slots.sum() < need:
            return float("inf")

        def whole_fits(t: float, c: float = float(c), slots: np.ndarray = slots, need: int = need) -> bool:
            per_ost = np.minimum(np.floor(t * bw / c), slots)
            per_oss = np.bincount(code, weights=per_ost, minlength=n_oss)
            return float(np.minimum(np.floor(t * oss_bw / c), per_oss).sum()) >= need

        hi = max(float((slots * c / bw).max()),
                 float((np.bincount(code, weights=slots, minlength=n_oss) * c / oss_bw).max())) * (1 + 1e-9)
        best = max(best, _least_time(whole_fits, hi))
    largest = float(objects.max())
    fits = roomf >= largest
    if not fits.any():
        return float("inf")
    fastest = float(np.minimum(bw, oss_bw[code])[fits].max())
    return max(best, largest / fastest * (1 - 1e-12))


def _least_time(fits, hi: float) -> float:
    """The largest time found not to fit, by bisection over ``[0, hi]`` (``fits`` is monotone, ``fits(hi)``)."""
    lo = 0.0
    if not fits(hi):
        hi *= 2  # rounding at the boundary; the caller's hi is feasible in exact arithmetic
        if not fits(hi):
            return float("inf")
    for _ in range(_BISECT_STEPS):
        mid = (lo + hi) / 2
        if mid in (lo, hi) or hi - lo <= _REL_TOL * hi:
            break
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return lo


# ----------------------------------------------------------------------------------------- OSTCost


def ost_cost_bound(pieces: np.ndarray, avail: np.ndarray, max_levels: int = 4000) -> float:
    """A lower bound on the OSTCost of placing stripe objects of ``pieces`` bytes on OSTs of ``avail`` bytes.

    Take any placement and let ``M`` be its largest utilisation. Pieces are whole:
    for every size ``c`` among the largest piece sizes, the ``K_c`` pieces of at
    least ``c`` bytes need ``sum_o floor(M a_o / c) >= K_c``, which sets the least
    feasible ``M`` (one big piece among tiny ones forces ``M >= big / max a``).
    Every piece is at least ``b`` (the smallest) and at most ``B`` (the largest)
    bytes, so OST ``o`` holds at most ``floor(M a_o / b)`` pieces and at most
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
    pieces = np.asarray(pieces)[np.asarray(pieces) > 0].astype(float)
    live = np.sort(avail[avail > 0].astype(float))
    if len(pieces) == 0 or len(live) == 0:
        return 1.0
    n, count, total = len(avail), len(pieces), float(pieces.sum())
    small, large = float(pieces.min()), float(pieces.max())
    whole_level = _whole_piece_level(pieces, live)

    def poured(caps: np.ndarray) -> float:
        """Sum of load/avail when the bytes fill the OSTs with least space first; 0 if they do not fit."""
        if caps.sum() < total * (1 - 1e-12):
            return 0.0
        before = np.concatenate(([0.0], np.cumsum(caps)[:-1]))
        return float((np.minimum(caps, np.maximum(0.0, total - before)) / live).sum())

    def stepped(level: float) -> float:
        if level < whole_level:
            return 0.0
        slots = np.floor(level * live / small + 1e-9)
        if slots.sum() < count:
            return 0.0
        return poured(np.minimum(level * live, slots * large))

    lo, hi = 0.0, max(count * small / live.min() + total / live.sum(), whole_level * 2)
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


def _whole_piece_level(pieces: np.ndarray, live: np.ndarray) -> float:
    """The least max-utilisation ``M`` at which, for each of the largest piece sizes ``c``, the pieces
    of at least ``c`` bytes fit whole: ``sum_o floor(M a_o / c) >= K_c`` (a little under, never over)."""
    ordered = np.sort(pieces)[::-1]
    sizes = np.unique(ordered)[::-1][:MAX_THRESHOLDS]
    level = 0.0
    for c in sizes.tolist():
        need = int(np.searchsorted(-ordered, -c, side="right"))

        def fits(m: float, c: float = c, need: int = need) -> bool:
            return float(np.floor(m * live / c).sum()) >= need

        level = max(level, _least_time(fits, need * c / live.max() * (1 + 1e-9)))
    return level


def window_bound(pieces: np.ndarray, avail: np.ndarray) -> float:
    """Bound for one file whose OSTCost is taken over the OSTs holding it (SSF).

    The file's ``c`` stripes go to ``c`` distinct OSTs; with equal pieces, for a
    fixed smallest ``avail`` in the set, the best partners are the next larger
    ones, so the optimum is a window of consecutive OSTs in order of available
    space. With unequal pieces (a short last round, a wrapped file) a piece can
    pair with any OST and that argument fails, so only the trivial bound 1.0 is
    claimed there.
    """
    c = len(pieces)
    if c == 0 or len(np.unique(pieces)) > 1:
        return 1.0
    order = np.sort(avail[avail > 0].astype(float))
    best = np.inf
    for start in range(len(order) - c + 1):
        window = order[start:start + c]
        if window[0] * 1.0 < pieces.max():
            continue
        best = min(best, ost_cost_bound(pieces, window))
    return float(best) if np.isfinite(best) else float("nan")

