"""``iez``: bandwidth-first placement. A job is as slow as its busiest OST or OSS.

Objective, in order:

1. **The job's modelled I/O time** (*makespan*): the largest, over OSTs, of the
   bytes placed there over the bandwidth the job can get there (the OST's
   bandwidth less live congestion from the MDS's view), and the same over OSSs
   (an OSS's network and CPU cap the sum of its OSTs; its reported CPU load
   takes ``oss_load_weight`` of it at 100 %).
2. **The fill cap** is a hard limit: no OST is pushed past ``fill_cap`` of its
   capacity (and never past its free space).
3. **Fill** is a bounded secondary objective: with ``fill_weight = w > 0`` the job
   may be up to ``w`` (a fraction) slower than the fastest placement, and within
   that budget bytes go to the emptiest OSTs (the placement minimises the sum of
   a convex cost of each OST's fill). With ``w = 0`` (the default) fill only
   breaks ties among the fastest placements. Long-term balance is the
   rebalancer's job, not something each job pays for.

Why not the paper's objective: balancing bytes over free space sends bytes in
proportion to free space, so a new empty OSS takes most of a job and the job
runs at that one server's speed (ARCHITECTURE.md, "What the allocator optimises").

**How it is solved.** Requests with the same stripe-object size ``b`` and
stripe count ``c`` are interchangeable (a *class*); classes are solved one after
another, largest objects first (longest-processing-time order), each seeing the
bytes earlier ones placed. For one class of ``m`` requests the stripes on each
OST are the decision (``y_o``), and distinctness within a request is exactly
``y_o <= m`` (deal the multiset column-wise: :func:`deal_to_requests`). With the
OST-level box ``y_o <= min(m, room_o // b)`` and the OSS-level caps this is a
laminar (nested) resource allocation problem:

- *Fastest time.* At time ``T`` OST ``o`` can take ``n_o(T) = floor((T bw_o -
  placed_o) / b)`` stripes (clipped to its box) and OSS ``s`` ``N_s(T)``
  likewise; the batch fits by ``T`` iff ``sum_s min(N_s(T), sum_{o in s} n_o(T)) >=
  m c``, which is monotone in ``T``: bisection gives the least ``T*``.
- *Which stripes.* Within the caps of ``T* (1 + fill_weight)`` the ``m c``
  cheapest stripe slots are taken, greedily in cost order subject to the nested
  caps (optimal for separable convex costs over this polymatroid, Federgruen and
  Groenevelt 1986), by a level search with per-OSS inner levels.
- *Which object where.* The class counts every object as the fullest one; a
  file's objects shrink with their position (a short last stripe), so each
  file's OSTs are ordered by finish time and its smaller objects land on the
  OSTs and OSSs that finish last (:meth:`BandwidthPolicy._smaller_objects_last`).

Across pools, a batch's pools are solved narrowest first, each seeing the bytes
the earlier ones put on shared OSTs and OSSs. Up to
:data:`MAX_SECOND_OPINION_WORK` stripe objects x OSTs, the whole batch (every
pool's objects, exact bytes) is then repaired by moving or swapping objects off
the OST or OSS that finishes last (:mod:`iez.allocate.improve`): a class placed
late with no choice (stripe count -1) may land on a server the earlier classes
filled. The batch is also placed
by the size-aware greedy (:mod:`iez.allocate.greedy`, exact RAID-0 bytes per
object) and its placement is kept when it places every file this solve placed
and more, or the same files sooner: per-class optimality is not batch
optimality, and sizing a class by its fullest object refuses wrapped files that
fit (issue 29).

A class that does not fit under the cap keeps the most requests that do, and
refuses the rest with the reason; a degraded OST is used only for files that
fit nowhere else. Cost grows as ``O(n log(1/eps))`` per class for ``n`` OSTs, plus
linear work in the stripes for dealing; no graph is built. When a batch has
more than :data:`MAX_CLASSES` object sizes, sizes are rounded up to 1/64 of
their power of two (at most 1.6 % more bytes assumed) so classes stay few.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from iez.allocate.base import Part, Policy, Refused, part_objects
from iez.allocate.lustre_rr import interleaved_order
from iez.allocate.servers import server_arrays
from iez.model import ClusterState, WriteRequest, raid0_bytes

#: Above this many distinct object sizes in one batch, sizes are rounded onto a geometric grid.
MAX_CLASSES = 256
#: Batches up to this many stripe objects x OSTs are also placed by the size-aware greedy, and the faster of
#: the two placements is kept (about 0.2 s of CPU per million on this project's test machine).
MAX_SECOND_OPINION_WORK = 4_000_000
_BISECT_STEPS = 100
_REL_TOL = 1e-12
#: A slot whose cost is a level up to floating-point rounding counts as at that level.
_SLOT_TOL = 1e-9


def oss_interleaved_rank(cluster: ClusterState) -> np.ndarray:
    """Rank of each OST (by position in ``cluster.osts``) in Lustre's OSS-interleaved RR array."""
    rank_of = {index: rank for rank, index in enumerate(interleaved_order(cluster.osts))}
    return np.array([rank_of[ost.index] for ost in cluster.osts], dtype=np.int64)


def rounded_object_bytes(b: np.ndarray) -> np.ndarray:
    """Object sizes rounded up to 1/64 of their power of two (relative error below 1/64)."""
    exponent = np.floor(np.log2(np.maximum(b, 1))).astype(np.int64) - 6
    quantum = np.left_shift(1, np.maximum(exponent, 0))
    return -(-b // quantum) * quantum


class _Cluster:
    """The arrays one batch is solved over (one entry per candidate OST, in ``cluster.osts`` order)."""

    def __init__(self, cluster: ClusterState, fill_cap: float, oss_load_weight: float,
                 shapes: tuple[np.ndarray, np.ndarray, np.ndarray], requests: Sequence[WriteRequest] = ()):
        osts = cluster.osts
        self.index = np.array([o.index for o in osts], dtype=np.int64)
        self.bw = np.array([o.usable_bandwidth for o in osts], dtype=float)
        self.total = np.array([o.bytes_total for o in osts], dtype=float)
        self.used = self.total - np.array([o.bytes_avail for o in osts], dtype=float)
        self.room = np.array([o.room_bytes(fill_cap) for o in osts], dtype=np.int64)
        self.degraded = np.array([o.state == "degraded" for o in osts], dtype=bool)
        oss_ids, self.oss, self.oss_bw = server_arrays(osts, cluster.osses, oss_load_weight)
        self.rank = oss_interleaved_rank(cluster)
        self.order = np.argsort(self.rank, kind="stable")
        self.shapes = shapes  # write bytes, stripe size and count per request: for files placed object by object
        self.requests = requests
        self.placed = np.zeros(len(osts))  # bytes this batch put on each OST
        self.oss_placed = np.zeros(len(oss_ids))

    def ost_slots(self, time: float, b: float, cap: np.ndarray) -> np.ndarray:
        """Stripes of ``b`` bytes each OST can take (at most ``cap``) and still finish by ``time``."""
        return self.units(time, self.placed / self.bw, b / self.bw, cap)

    def oss_slots(self, time: float, b: float) -> np.ndarray:
        """Stripes of ``b`` bytes each OSS can take and still finish by ``time``."""
        return np.floor(np.maximum(time * self.oss_bw - self.oss_placed, 0.0) / b + _SLOT_TOL).astype(np.int64)

    def fits_by(self, time: float, b: float, cap: np.ndarray) -> int:
        """How many stripes of ``b`` bytes the OSTs and OSSs can take and still finish by ``time``."""
        per_ost = np.bincount(self.oss, weights=self.ost_slots(time, b, cap), minlength=len(self.oss_bw))
        return int(np.minimum(per_ost, self.oss_slots(time, b)).sum())

    def room_left(self, allow_degraded: bool) -> np.ndarray:
        """Bytes each OST may still take under the cap (0 on degraded OSTs unless they are allowed)."""
        room = self.room - self.placed.astype(np.int64)
        return room if allow_degraded else np.where(self.degraded, 0, room)

    def fastest_time(self, b: float, cap: np.ndarray, need: int) -> float:
        """The least time by which ``need`` stripes of ``b`` bytes can be finished (``cap`` per OST)."""
        lo = 0.0
        hi = max(float(((self.placed + (cap + 1) * b) / self.bw).max()),  # a stripe of margin against rounding
                 float(((self.oss_placed + (np.bincount(self.oss, weights=cap, minlength=len(self.oss_bw)) + 1) * b)
                        / self.oss_bw).max()))
        for _ in range(_BISECT_STEPS):
            mid = (lo + hi) / 2
            if hi - lo <= _REL_TOL * hi or mid in (lo, hi):
                break
            if self.fits_by(mid, b, cap) >= need:
                hi = mid
            else:
                lo = mid
        return hi

    def cheapest(self, base: np.ndarray, step: np.ndarray, cap: np.ndarray, oss_cap: np.ndarray,
                 tiebreak: np.ndarray, need: int) -> np.ndarray:
        """``need`` stripe slots of least total cost, at most ``cap`` per OST and ``oss_cap`` per OSS."""
        n_oss = len(oss_cap)

        def total(level: float) -> int:
            per_oss = np.bincount(self.oss, weights=self.units(level, base, step, cap), minlength=n_oss)
            return int(np.minimum(per_oss, oss_cap).sum())

        # one step of margin above the last slot: with steps far below the base, rounding could drop it
        lo, hi = float(np.min(base + step)) - 1.0, float(np.max(base + (np.maximum(cap, 1) + 1) * step))
        for _ in range(_BISECT_STEPS):
            mid = (lo + hi) / 2
            if mid in (lo, hi) or hi - lo <= _REL_TOL * max(abs(hi), 1e-300):
                break
            if total(mid) >= need:
                hi = mid
            else:
                lo = mid
        y = self.units(hi, base, step, cap)
        # OSSs over their cap keep their own cheapest slots: an inner level per OSS.
        per_oss = np.bincount(self.oss, weights=y, minlength=n_oss)
        over = np.flatnonzero(per_oss > oss_cap)
        if len(over):
            on = np.isin(self.oss, over)
            inner_lo = np.full(n_oss, float(np.min(base + step)) - 1.0)
            inner_hi = np.full(n_oss, hi)
            oss_on, base_on, step_on, cap_on = self.oss[on], base[on], step[on], cap[on]
            for _ in range(_BISECT_STEPS):
                mid = (inner_lo + inner_hi) / 2
                # the same stopping rule as the outer level, over the OSSs still searched
                if ((inner_hi - inner_lo <= _REL_TOL * np.maximum(np.abs(inner_hi), 1e-300))
                        | (mid == inner_lo) | (mid == inner_hi))[over].all():
                    break
                got = np.bincount(oss_on, weights=self.units(mid[oss_on], base_on, step_on, cap_on),
                                  minlength=n_oss)
                enough = got >= oss_cap
                inner_hi = np.where(enough, mid, inner_hi)
                inner_lo = np.where(enough, inner_lo, mid)
            y[on] = self.units(inner_hi[self.oss[on]], base[on], step[on], cap[on])
            self._trim(y, base, step, tiebreak, on, np.bincount(self.oss, weights=y, minlength=n_oss) - oss_cap)
        excess = int(y.sum()) - need
        if excess > 0:
            self._trim(y, base, step, tiebreak, y > 0, None, excess)
        return y

    @staticmethod
    def units(levels, base, step, cap) -> np.ndarray:
        """Slots per OST whose cost ``base + k*step`` (k = 1, 2, ...) is at most the level (one for all, or one
        per OST); costs equal to a level up to rounding count as within it."""
        with np.errstate(over="ignore", invalid="ignore"):
            k = np.subtract(levels, base)
            k /= step
            k += _SLOT_TOL
            np.floor(k, out=k)
        finite = np.isfinite(k)
        if not finite.all():  # no slot where the cost is undefined or unbounded
            k[~finite] = 0.0
        np.maximum(k, 0.0, out=k)
        np.minimum(k, cap, out=k)
        return k.astype(np.int64)

    def _trim(self, y, base, step, tiebreak, mask, per_oss_excess=None, excess: int = 0) -> None:
        """Remove the dearest last slots: ``excess`` in all, or ``per_oss_excess[s]`` from each OSS."""
        while True:
            live = np.flatnonzero(mask & (y > 0))
            last = base[live] + y[live] * step[live]
            order = live[np.lexsort((-self.rank[live], -tiebreak[live], -last))]
            if per_oss_excess is None:
                take = order[:excess]
                y[take] -= 1
                excess -= len(take)
                if excess <= 0 or len(take) == 0:
                    return
            else:
                left = per_oss_excess.copy()
                removed = 0
                for pos in order:  # dearest first, until each OSS is within its cap
                    s = self.oss[pos]
                    if left[s] > 0:
                        y[pos] -= 1
                        left[s] -= 1
                        removed += 1
                if not (left > 0).any() or removed == 0:
                    return
                per_oss_excess = left

    def objects(self, i: int) -> list[int]:
        """Exact bytes of each stripe object of request ``i``, in stripe order."""
        return part_objects(self.requests[i], int(self.shapes[1][i]), int(self.shapes[2][i]))

    def add(self, y: np.ndarray, b: float) -> None:
        self.placed += y * b
        self.oss_placed += np.bincount(self.oss, weights=y * b, minlength=len(self.oss_bw))


class BandwidthPolicy(Policy):
    """Bandwidth-first placement under a fill cap (see the module docstring)."""

    name = "iez"
    checks_layouts = True
    mirror_domains = True
    shares_pools = True

    def __init__(self, seed: int = 0, fill_weight: float = 0.0, fill_cap: float | None = None,
                 oss_load_weight: float = 0.5, greedy_check: bool = True, **kw):
        super().__init__(seed, **kw)
        #: Whether a batch is also placed by the size-aware greedy and its placement kept when it places more
        #: files, or the same files sooner (off: the class-by-class solve alone, whose optimality tests check).
        self.greedy_check = greedy_check
        if fill_weight < 0 or oss_load_weight < 0 or oss_load_weight > 1:
            raise ValueError("fill_weight must be >= 0 and oss_load_weight within 0..1")
        if fill_cap is not None and not 0 < fill_cap <= 1:
            raise ValueError(f"fill_cap={fill_cap} is outside (0, 1]")
        self.fill_weight = fill_weight
        self.fill_cap = fill_cap
        self.oss_load_weight = oss_load_weight

    def _place_parts(self, cluster, requests, fixed):
        """Pools one after another, narrowest first, each seeing the bytes the earlier pools put on shared OSTs
        and OSSs (through ``self.carried``, restored afterwards: the mirror rounds own it)."""
        saved = dict(getattr(self, "carried", None) or {})
        self.carried = dict(saved)
        try:
            solved = super()._place_parts(cluster, requests, fixed)
        finally:
            self.carried = saved
        if not self.greedy_check or self.fill_weight > 0 or not self._worth_a_second_opinion(cluster, requests):
            return solved
        # The class-by-class solve is optimal for each class but not for the batch: repair it as a whole (every
        # pool's objects together), then compare with the size-aware greedy that knows the same and keep the
        # faster (never slower than it).
        from iez.allocate.greedy import GreedyPolicy, modelled_time
        from iez.allocate.improve import improve

        cap = self.fill_cap if self.fill_cap is not None else cluster.fill_cap
        solved = (improve(cluster, requests, solved[0], solved[1], saved, cap, self.oss_load_weight), solved[1])
        greedy = GreedyPolicy(fill_cap=self.fill_cap, oss_load_weight=self.oss_load_weight,
                              stripe_rules=self.stripe_rules)
        greedy.carried = dict(saved)
        other = greedy._place_parts(cluster, requests, fixed)
        mine = modelled_time(cluster, requests, *solved, saved, self.oss_load_weight)
        theirs = modelled_time(cluster, requests, *other, saved, self.oss_load_weight)
        mine_refused = {k for k, a in enumerate(solved[0]) if type(a) is Refused}
        theirs_refused = {k for k, a in enumerate(other[0]) if type(a) is Refused}
        if theirs_refused < mine_refused or (theirs_refused == mine_refused and theirs[1] < mine[1] * (1 - 1e-9)):
            # every file iez placed and more, or the same files sooner
            self.kept_greedy = getattr(self, "kept_greedy", 0) + 1
            return other
        return solved

    def repair_mirrored(self, cluster: ClusterState, requests: Sequence[WriteRequest], placed: dict,
                        dom: dict[int, str]) -> bool:
        """The batch repair over every copy of a mirrored batch (``placed``: ``(file, copy) -> Allocation``,
        changed in place), each copy kept in failure domains no other copy of its file uses. False when the
        batch is left as it is (the repair is off, or the batch too large for it)."""
        if not self.greedy_check or self.fill_weight > 0:
            return False
        objects = sum(len(a.osts) for a in placed.values())
        if objects * len(cluster.osts) > MAX_SECOND_OPINION_WORK:
            return False
        from iez.allocate.improve import improve_mirrored

        cap = self.fill_cap if self.fill_cap is not None else cluster.fill_cap
        improve_mirrored(cluster, requests, placed, dom, cap, self.oss_load_weight)
        return True

    @staticmethod
    def _worth_a_second_opinion(cluster, requests) -> bool:
        """Whether the greedy comparison is cheap enough (its cost is objects x OSTs)."""
        n = len(cluster.osts)
        stripes = sum(n if r.stripe_count < 0 else r.stripe_count for r in requests)
        return stripes * n <= MAX_SECOND_OPINION_WORK

    def _place(self, cluster: ClusterState, requests: Sequence[WriteRequest], counts, sizes
               ) -> list[Sequence[int] | Refused]:
        cap = self.fill_cap if self.fill_cap is not None else cluster.fill_cap
        w = np.fromiter((r.write_bytes for r in requests), dtype=np.int64, count=len(requests))
        size = np.asarray(sizes, dtype=np.int64)
        count = np.asarray(counts, dtype=np.int64)
        state = _Cluster(cluster, cap, self.oss_load_weight, (w, size, count), requests)
        carried = getattr(self, "carried", None)
        if carried:  # the other mirrors of this batch's files: their bytes share these OSTs' time and room
            state.add(np.array([carried.get(int(i), 0.0) for i in state.index]), 1.0)
        full_rounds, rest = np.divmod(w, size * count)  # the fullest object: RAID-0 wrap-around included
        obj = np.maximum(full_rounds * size + np.minimum(size, rest), 1)  # an empty file still takes its objects
        for k, request in enumerate(requests):  # a component's fullest object need not be its first
            if type(request) is Part:
                obj[k] = max(max(state.objects(k)), 1)
        if len(np.unique(obj)) > MAX_CLASSES:
            obj = rounded_object_bytes(obj)
        out: list[Sequence[int] | Refused] = [Refused("")] * len(requests)
        keys, inverse = np.unique(np.stack([obj, count], axis=1), axis=0, return_inverse=True)
        order = np.argsort(inverse.ravel(), kind="stable")
        bounds = np.searchsorted(inverse.ravel()[order], np.arange(len(keys) + 1))
        classes = {(int(b), int(c)): order[bounds[k]:bounds[k + 1]].tolist() for k, (b, c) in enumerate(keys)}
        left: dict[tuple[int, int], list[int]] = {}
        for allow_degraded in (False, True):
            for (b, c) in sorted(classes, key=lambda k: (-k[0], -k[1])):
                members = classes[(b, c)]
                refused = self._place_class(state, b, c, members, out, allow_degraded, cap)
                if refused:
                    left[(b, c)] = refused
            if not left or not state.degraded.any():
                break
            classes, left = left, {}
        if carried is not None:  # what this pool's call placed, for the next pool's call (shares_pools)
            carried.update({int(i): float(p) for i, p in zip(state.index, state.placed)})
        return out

    def _place_class(self, state: _Cluster, b: int, c: int, members: list[int], out: list, allow_degraded: bool,
                     cap: float) -> list[int]:
        """Place one class; returns the members refused (their ``out`` entry says why)."""
        slots = np.maximum(state.room_left(allow_degraded), 0) // b
        m = len(members)
        keep = _most_requests_that_fit(slots, m, c)
        if keep:
            self._place_whole_class(state, b, c, members[:keep], slots, out)
        refused = []
        for i in members[keep:]:
            # A class sizes every object like the file's fullest one; objects of unequal size (a short
            # last round, a wrapped file) may still fit one by one.
            objects = state.objects(i)
            if len(set(objects)) > 1:
                row = self._place_objects(state, objects, state.room_left(allow_degraded))
                if row is not None:
                    out[i] = row
                    continue
            refused.append(i)
        if refused:
            fitting = int((state.room_left(allow_degraded) >= b).sum())
            reason = Refused(f"not enough room under the {cap:.0%} fill cap: {fitting} OSTs can take another "
                             f"{b}-byte stripe object, the file needs {c}")
            for i in refused:
                out[i] = reason
        return refused

    def _place_whole_class(self, state: _Cluster, b: int, c: int, members: list[int], slots: np.ndarray,
                           out: list) -> None:
        """``len(members)`` requests of ``c`` stripes of ``b`` bytes, known to fit in ``slots``."""
        keep = len(members)
        need = keep * c
        box = np.minimum(slots, keep)
        fastest = state.fastest_time(float(b), box, need)
        allow = fastest * (1.0 + self.fill_weight) * (1 + 1e-12)
        box = state.ost_slots(allow, b, box)
        oss_cap = state.oss_slots(allow, b)
        fill_base = (state.used + state.placed) / state.total
        fill_step = b / state.total
        if self.fill_weight > 0:  # spend the time budget on evening out fill
            base, step, tiebreak = fill_base, fill_step, state.placed / state.bw
        else:  # the fastest placement; fill breaks ties
            base, step, tiebreak = state.placed / state.bw, b / state.bw, fill_base
        y = state.cheapest(base, step, box, oss_cap, tiebreak, need)
        if int(y.sum()) != need or (y > box).any():
            raise AssertionError("iez: the class solution does not place every stripe within its caps")
        state.add(y, float(b))
        rows = deal_to_requests(y, state.order, keep, c)
        rows = np.take_along_axis(rows, np.argsort(state.rank[rows], axis=1, kind="stable"), axis=1)
        rotate = (np.arange(c)[None, :] + np.arange(keep)[:, None]) % c  # the first stripe rotates between files
        rows = np.take_along_axis(rows, rotate, axis=1)
        self._smaller_objects_last(state, b, members, rows)
        rows = state.index[rows]
        if c > 1 and (np.diff(np.sort(rows, axis=1), axis=1) == 0).any():
            raise AssertionError("iez: a file got the same OST twice")
        for i, row in zip(members, map(tuple, rows.tolist())):
            out[i] = row

    @staticmethod
    def _smaller_objects_last(state: _Cluster, b: int, members: list[int], rows: np.ndarray) -> None:
        """Order each file's OSTs (``rows``, positions, in place) so that its smaller objects (a short last
        stripe, stripes a small file never reaches, a component's objects before the stripe its extent starts
        on) go to the OSTs and OSSs that finish last, and take what they do not write off the state.

        The class is solved as if every object held the fullest ``b`` bytes; which OST gets the shorter ones
        decides whether the busiest server gains the difference (the OSTs sorted by finish time, soonest first,
        take the file's objects from the fullest down). Files are dealt a few at a time (about one per OST)
        against the finish times the earlier ones left, so equally busy OSTs take turns."""
        c = rows.shape[1]
        w, size = (np.asarray(a)[members] for a in state.shapes[:2])
        if any(type(state.requests[i]) is Part for i in members):
            keys: dict[tuple, int] = {}
            inverse = np.array([keys.setdefault((type(r) is Part and (r.offset, r.objects), r.write_bytes, int(s)),
                                                len(keys))
                                for r, s in zip((state.requests[i] for i in members), size.tolist())],
                               dtype=np.int64)
            first = {k: members[pos] for pos, k in reversed(list(enumerate(inverse.tolist())))}
            objects = np.array([state.objects(first[k]) for k in range(len(keys))], dtype=float)
        else:
            shapes, inverse = np.unique(np.stack([w, size], axis=1), axis=0, return_inverse=True)
            inverse = inverse.ravel()
            objects = np.array([raid0_bytes(int(x), int(s), c) for x, s in shapes.tolist()], dtype=float)
        gaps = b - objects
        fullest_first = np.argsort(-objects, axis=1, kind="stable")  # positions, fullest object first
        todo = np.flatnonzero(np.asarray(gaps.any(axis=1))[inverse])
        step = max(1, len(state.bw) // c)
        for start in range(0, len(todo), step):
            pick = todo[start:start + step]
            sub = rows[pick]
            oss = state.oss[sub]
            finish = np.maximum(state.placed[sub] / state.bw[sub], state.oss_placed[oss] / state.oss_bw[oss])
            soonest = np.take_along_axis(sub, np.lexsort((state.rank[sub], finish)), axis=1)
            np.put_along_axis(sub, fullest_first[inverse[pick]], soonest, axis=1)
            rows[pick] = sub
            short = gaps[inverse[pick]].ravel()
            np.subtract.at(state.placed, sub.ravel(), short)
            np.subtract.at(state.oss_placed, state.oss[sub].ravel(), short)

    def _place_objects(self, state: _Cluster, objects: list[int], room: np.ndarray) -> tuple[int, ...] | None:
        """One file, object by object (largest first), each on the OST that finishes it soonest among those
        with room and not yet holding the file: the sets of OSTs that fit shrink with the object, so this
        finds a placement whenever one exists. ``None`` when it does not fit."""
        count = len(objects)
        free = room.copy()  # charged as objects are placed
        chosen = np.full(count, -1, dtype=np.int64)
        used = np.zeros(len(free), dtype=bool)
        placed, oss_placed = state.placed.copy(), state.oss_placed.copy()
        for pos in sorted(range(count), key=lambda k: -objects[k]):
            b = max(objects[pos], 1)
            ok = (~used) & (free >= b)
            if not ok.any():
                return None
            finish = np.maximum((placed + b) / state.bw, (oss_placed[state.oss] + b) / state.oss_bw[state.oss])
            pick = int(np.flatnonzero(ok)[np.argmin(finish[ok])])
            chosen[pos] = pick
            used[pick] = True
            free[pick] -= b
            placed[pick] += b
            oss_placed[state.oss[pick]] += b
        state.placed, state.oss_placed = placed, oss_placed
        return tuple(state.index[chosen].tolist())


def deal_to_requests(counts: np.ndarray, ost_order: np.ndarray, requests: int, stripe_count: int) -> np.ndarray:
    """An ``(requests, stripe_count)`` matrix of OST positions with no OST twice in a row.

    The OSTs are laid out in ``ost_order``, each repeated ``counts[o] <= requests``
    times, and position ``j`` goes to request ``j mod requests``: an OST's copies
    are consecutive, so they land on different requests.
    """
    sequence = np.repeat(ost_order, counts[ost_order])
    if len(sequence) != requests * stripe_count:
        raise AssertionError("class stripe total does not match its requests")
    return sequence.reshape(stripe_count, requests).T


def _most_requests_that_fit(slots: np.ndarray, m: int, c: int) -> int:
    """The most of ``m`` requests of ``c`` distinct stripes the per-OST ``slots`` can hold."""
    if int(np.minimum(slots, m).sum()) >= m * c:
        return m
    lo, hi = 0, m  # lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if int(np.minimum(slots, mid).sum()) >= mid * c:
            lo = mid
        else:
            hi = mid
    return lo
