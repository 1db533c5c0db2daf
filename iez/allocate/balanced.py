"""``iez``: the balanced policy, a min-cost flow with convex per-OST costs.

The paper's Algorithm 2 gives every OST one constant cost per stripe, so its
min-cost flow piles every request onto the same cheapest OSTs. Here the
``k``-th stripe of size ``s`` added to OST ``o`` costs the utilisation that
OST would reach,

    (placed_o + k * s) / avail_o  +  oss_load_weight * load(oss(o))  +  congestion_weight * io_load(o),

where ``avail_o`` is the OST's free space when the batch is allocated (so a
fuller OST is dearer per stripe), ``load`` weighs the OSS's cpu and
memory (the paper's cost to reach an OST) and ``io_load`` is the OST's live
read+write bandwidth relative to the busiest OST (from the MDS's view). Convex marginal costs make the
optimum balanced: stripes go where utilisation is lowest, and each OST ends
up with a share of the batch proportional to its free space, so all OSTs
would run full at the same time.

Requests with the same stripe size and count are interchangeable and are
solved as one group (:mod:`iez.allocate.waterfill` solves the flow exactly
without building a graph). Stripe-size classes are solved one after another,
largest stripes first (as in longest-processing-time scheduling), each one
seeing the bytes the earlier classes placed. Within a request the OSTs are
ordered so that consecutive stripes alternate OSSs, and the first stripe
rotates between requests; a file's short last stripe goes to the most
utilised of its OSTs (see ``_short_tails_last``).

One policy instance remembers the bytes it placed in earlier calls and
counts them as already placed against the free space the OSTs had before
them. Jobs allocated one after another are then balanced together: the
rounding of one job (which OSTs get the extra stripe) is evened out by the
next, instead of landing on the same OSTs every time.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from iez.allocate.base import AllocationError, Policy
from iez.allocate.lustre_rr import interleaved_order
from iez.allocate.waterfill import Group, InfeasibleError, deal_to_requests, split_among_groups, stripe_totals
from iez.model import ClusterState, WriteRequest


def oss_interleaved_rank(cluster: ClusterState) -> np.ndarray:
    """Rank of each OST (by position in ``cluster.osts``) in Lustre's OSS-interleaved RR array.

    The OSTs of each OSS are spaced evenly through that order, so a run of
    consecutive ranks touches as many OSSs as it can.
    """
    rank_of = {index: rank for rank, index in enumerate(interleaved_order(cluster.osts))}
    return np.array([rank_of[ost.index] for ost in cluster.osts], dtype=np.int64)


class BalancedPolicy(Policy):
    name = "iez"

    def __init__(
        self,
        seed: int = 0,
        cpu_weight: float = 0.5,
        mem_weight: float = 0.5,
        oss_load_weight: float = 0.1,
        congestion_weight: float = 0.2,
        **kw,
    ):
        super().__init__(seed, **kw)
        if min(cpu_weight, mem_weight, oss_load_weight, congestion_weight) < 0:
            raise ValueError("cpu_weight, mem_weight, oss_load_weight and congestion_weight must not be negative")
        self.cpu_weight = cpu_weight
        self.mem_weight = mem_weight
        self.oss_load_weight = oss_load_weight
        self.congestion_weight = congestion_weight
        self._earlier: dict[int, float] = defaultdict(float)  # OST index -> bytes placed by earlier calls

    def forget(self) -> None:
        """Start a new balancing window: earlier placements no longer count."""
        self._earlier.clear()

    def reach_cost(self, cluster: ClusterState) -> np.ndarray:
        """Per-OST cost to reach it: its OSS's weighted cpu and memory load (0..1) times the weight,
        plus the OST's live I/O congestion (0..1) times its weight, so busy OSTs are avoided
        even when they have space. Both are constant per OST, so costs stay convex."""
        loads, busy = [], []
        for ost in cluster.osts:
            oss = cluster.oss_of(ost)
            loads.append((self.cpu_weight * oss.cpu_pct + self.mem_weight * oss.mem_pct) / 100.0)
            busy.append(ost.io_load)
        return self.oss_load_weight * np.array(loads, dtype=float) + self.congestion_weight * np.array(busy, dtype=float)

    @staticmethod
    def _short_tails_last(rows: np.ndarray, write_bytes: list[int], span: int, size: int,
                          placed: np.ndarray, avail: np.ndarray) -> np.ndarray:
        """Put each file's short last stripe(s) on the busiest of its OSTs.

        A file smaller than ``stripe_count * stripe_size`` leaves its last stripe
        short; wide files (``-1`` on many OSTs) leave several stripes short or empty.
        Wide files order all their stripes by utilisation (full stripes on the
        emptiest OSTs). The others keep their OSS-alternating order and swap their
        last stripe with their busiest OST, one file at a time, so the relief
        spreads over the busiest OSTs instead of all landing on one.
        """
        util = placed / avail
        written = np.array(write_bytes)
        wide = written <= span - size // 2
        if wide.any():
            by_util = np.take_along_axis(rows, np.argsort(util[rows], axis=1, kind="stable"), axis=1)
            rows = np.where(wide[:, None], by_util, rows)
        short = np.flatnonzero((written < span) & ~wide)
        if len(short):
            rows = rows.copy()
            running, space = util.tolist(), avail.tolist()
            for r in short.tolist():
                row = rows[r].tolist()
                busiest = max(range(len(row)), key=lambda j: running[row[j]])
                row[-1], row[busiest] = row[busiest], row[-1]
                rows[r] = row
                running[row[-1]] -= (span - int(written[r])) / space[row[-1]]
        return rows

    def _place(self, cluster: ClusterState, requests: Sequence[WriteRequest], counts, sizes) -> list[Sequence[int]]:
        free = np.array([ost.bytes_avail for ost in cluster.osts], dtype=float)
        index = np.array([ost.index for ost in cluster.osts], dtype=np.int64)
        earlier = np.array([self._earlier[int(i)] for i in index])
        avail = free + earlier  # the space the OSTs had before this window's placements
        reach = self.reach_cost(cluster)
        ranks = oss_interleaved_rank(cluster)
        order = np.argsort(ranks)
        placed = earlier.copy()

        classes: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
        for i, (count, size) in enumerate(zip(counts, sizes)):
            classes[size][count].append(i)

        out: list[Sequence[int]] = [()] * len(requests)
        for size in sorted(classes, reverse=True):
            members = classes[size]
            stripe_counts = sorted(members)
            groups = [Group(len(members[c]), c) for c in stripe_counts]
            usable = avail > 0
            safe = np.where(usable, avail, 1.0)
            base = np.where(usable, reach + placed / safe, 0.0)
            step = np.where(usable, size / safe, 1.0)
            upper = np.where(usable, np.floor((free - (placed - earlier)) / size), 0).astype(np.int64)
            try:
                totals = stripe_totals(base, step, np.maximum(upper, 0), groups)
            except InfeasibleError as err:
                first = requests[members[stripe_counts[-1]][0]]
                raise AllocationError(first, f"stripes of {size} bytes cannot be placed: {err}") from None
            for group, part, c in zip(groups, split_among_groups(totals, groups), stripe_counts):
                rows = deal_to_requests(part, order, group.requests, c)
                rows = np.take_along_axis(rows, np.argsort(ranks[rows], axis=1, kind="stable"), axis=1)
                rotate = (np.arange(c)[None, :] + np.arange(group.requests)[:, None]) % c
                rows = np.take_along_axis(rows, rotate, axis=1)
                rows = self._short_tails_last(rows, [requests[i].write_bytes for i in members[c]], c * size,
                                              size, placed + totals * size, safe)
                for i, row in zip(members[c], index[rows].tolist()):
                    out[i] = row
            placed += totals * size
        for i, ost_index in enumerate(index.tolist()):
            self._earlier[ost_index] = float(placed[i])
        return out
