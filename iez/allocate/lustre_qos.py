"""``qos``: Lustre's weighted (QoS) OST allocator, modelled from the behaviour of
``lod_alloc_qos``, ``lod_qos_calc_ppo``/``ltd_qos_penalties_calc``,
``lod_qos_calc_weight`` and ``lod_qos_used``/``ltd_qos_update`` in
lustre-release (our own code).

One ``allocate`` call stands for one statfs refresh on the MDS: the OSTs'
``kbytes_avail`` it is given is what statfs reports, and Lustre's MDS does not
learn about the space a new file will fill while it creates the file's objects.

What is modelled
----------------
- **Units.** Free space is counted as ``bytes_avail >> 8``, as Lustre scales it
  for OSTs, and ``threshold_rr`` and ``prio_free`` become 256ths the way
  ``lctl`` stores them (0.17 -> 43, 0.90 -> 230).
- **RR or weighted, once per call.** Over the OSTs with free space, with ``max``
  and ``min`` their largest and smallest scaled free space, the call counts as
  balanced when ``(max * (256 - threshold)) >> 8 < min``, that is when the OST
  with the least free space still has more than about ``1 - threshold_rr`` of
  the free space of the OST with the most. Balanced calls (and clusters with
  fewer than two OSTs) use an internal :class:`RoundRobinPolicy`, whose cursor
  therefore persists; a balanced call also zeroes all penalties before the next
  weighted call, as Lustre's reset flag does.
- **Per-object penalties**, recomputed each call with ``wide = 256 - prio_free``:
  an OST's is ``wide * avail / 256 / (active OSTs - 1) / 2``; an OSS's is
  ``wide * oss_avail / 256 / (its OSTs * (active OSSs - 1)) / 2``. With a single
  OSS there is no server to spread over, so OST penalties double instead.
- **Weights.** ``max(0, avail - OST penalty - OSS penalty)``, with ``avail`` from
  the call's statfs snapshot.
- **A pick.** A stripe goes to an OST drawn with probability proportional to
  its weight among the OSTs whose statfs does not show them full and that are
  not yet in the file (the MDS does not know the file's size, so a nearly full
  OST can still be picked and the write then fail with ENOSPC, LU-16501); if every candidate weighs zero,
  the first in index order is taken, as Lustre does. The pick halves the OST's
  and its OSS's penalty, then adds penalty-per-object times the number of
  active OSTs (OSSs) to it; afterwards every OST and OSS penalty in the pool
  drops by its own per-object penalty (floored at zero).
- **Decay over time**, per call (one call = one ``qos_maxage`` refresh): at
  every call, the penalty of an OST or OSS last picked ``k`` calls ago is
  halved ``k // 8`` times when ``k > 8`` (so the halvings compound from call to
  call, as in Lustre) and zeroed when ``k > 256``.
- **Randomness** from ``random.Random(seed)``: same seed and call sequence give
  the same layouts.

What is simplified
------------------
- No inode (``iavail``) term: the model has no object counts.
- The draw is exactly proportional to weight; Lustre's comparison of a random
  number with running sums moves one unit of weight from the last candidate to
  the first.
- Weights, the RR/weighted decision and the "full" test use the call's snapshot.
- One pool (the OSTs shown). A file gets exactly its stripe count or is refused;
  a refused file leaves every penalty, cursor and random state as it was.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from iez.allocate.base import Policy, Refused
from iez.allocate.lustre_rr import RoundRobinPolicy
from iez.model import ClusterState, WriteRequest

#: Idle calls per halving of a penalty, and idle calls after which it is dropped.
IDLE_CALLS_PER_HALVING = 8
IDLE_CALLS_TO_FORGET = 32 * IDLE_CALLS_PER_HALVING


def scaled_avail(cluster: ClusterState) -> dict[int, int]:
    """Free space per OST in Lustre's QoS units (bytes >> 8), which keep products in range."""
    return {ost.index: ost.bytes_avail >> 8 for ost in cluster.osts}


def space_is_balanced(avail: dict[int, int], threshold_256: int) -> bool:
    """Lustre's "same space" test: the fullest OST is within the threshold of the emptiest."""
    nonzero = [a for a in avail.values() if a > 0]
    if not nonzero:
        return True
    return (max(nonzero) * (256 - threshold_256)) >> 8 < min(nonzero)


@dataclass(frozen=True)
class PenaltyScale:
    """Per-object penalties of one statfs refresh and the counts they multiply by on a pick."""

    ost_ppo: dict[int, int]
    oss_ppo: dict[str, int]
    active_osts: int
    active_osses: int


def per_object_penalties(cluster: ClusterState, avail: dict[int, int], prio_wide: int) -> PenaltyScale:
    """How much one new object penalises its OST and OSS, from their free space (prio_wide / 256)."""
    active_osts = len(cluster.osts)
    oss_avail: dict[str, int] = {}
    oss_osts: dict[str, int] = {}
    for ost in cluster.osts:
        oss_osts[ost.oss_id] = oss_osts.get(ost.oss_id, 0) + 1
        if avail[ost.index] > 0:
            oss_avail[ost.oss_id] = oss_avail.get(ost.oss_id, 0) + avail[ost.index]
    ost_ppo = {i: ((prio_wide * a) >> 8) // max(1, active_osts - 1) >> 1 for i, a in avail.items()}
    other_osses = len(oss_avail) - 1
    if other_osses < 1:
        other_osses = 1
        ost_ppo = {i: p << 1 for i, p in ost_ppo.items()}
    oss_ppo = {
        oss: ((prio_wide * oss_avail.get(oss, 0)) >> 8) // (oss_osts[oss] * other_osses) >> 1 for oss in oss_osts
    }
    return PenaltyScale(ost_ppo, oss_ppo, active_osts, len(oss_avail))


def decayed(penalty: int, idle_calls: int) -> int:
    """A penalty after ``idle_calls`` refreshes without a pick: it stands in for space not yet in statfs."""
    if idle_calls > IDLE_CALLS_TO_FORGET:
        return 0
    if idle_calls > IDLE_CALLS_PER_HALVING:
        return penalty >> (idle_calls // IDLE_CALLS_PER_HALVING)
    return penalty


@dataclass
class QosState:
    """What persists between calls: penalties, when each OST/OSS was last picked, the call clock."""

    ost_penalty: dict[int, int] = field(default_factory=dict)
    oss_penalty: dict[str, int] = field(default_factory=dict)
    ost_last_pick: dict[int, int] = field(default_factory=dict)
    oss_last_pick: dict[str, int] = field(default_factory=dict)
    calls: int = 0
    reset_pending: bool = False


class QosPolicy(Policy):
    """Lustre's QoS allocator with its round-robin fallback; one instance is one MDS."""

    name = "qos"
    size_aware = False
    degraded_last = True

    def __init__(self, seed: int = 0, threshold_rr: float = 0.17, prio_free: float = 0.90, **kw):
        super().__init__(seed, **kw)
        for label, value in (("threshold_rr", threshold_rr), ("prio_free", prio_free)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{label}={value} is outside 0..1")
        self.threshold_rr = threshold_rr
        self.prio_free = prio_free
        self._threshold_256 = int(threshold_rr * 256)
        self._prio_wide = 256 - int(prio_free * 256)
        self._rng = random.Random(seed)
        self._rr = RoundRobinPolicy(seed, stripe_rules=self.stripe_rules)
        self.state = QosState()
        #: "rr" or "weighted": how the last call placed its files.
        self.last_mode = ""

    def _place(
        self, cluster: ClusterState, requests: Sequence[WriteRequest], counts: Sequence[int], sizes: Sequence[int]
    ) -> list[Sequence[int] | Refused]:
        free = {ost.index: ost.bytes_avail for ost in cluster.osts}
        avail = scaled_avail(cluster)
        scale = self._refresh(cluster, avail)
        if scale is None:
            self.last_mode = "rr"
            return self._rr._place(cluster, requests, counts, sizes)
        self.last_mode = "weighted"
        weighted = _WeightedPass(self, cluster, avail, scale)
        placed: list[Sequence[int] | Refused] = list(weighted.place(requests, counts, sizes, free))
        return placed

    def _refresh(self, cluster: ClusterState, avail: dict[int, int]) -> PenaltyScale | None:
        """One statfs refresh: decay (or reset) penalties, then pick the mode; ``None`` means round-robin."""
        state = self.state
        state.calls += 1
        for index in avail:
            idle = state.calls - state.ost_last_pick.get(index, -IDLE_CALLS_TO_FORGET - 1)
            state.ost_penalty[index] = 0 if state.reset_pending else decayed(state.ost_penalty.get(index, 0), idle)
        for oss in dict.fromkeys(ost.oss_id for ost in cluster.osts):
            idle = state.calls - state.oss_last_pick.get(oss, -IDLE_CALLS_TO_FORGET - 1)
            state.oss_penalty[oss] = 0 if state.reset_pending else decayed(state.oss_penalty.get(oss, 0), idle)
        state.reset_pending = False
        if len(cluster.osts) < 2 or space_is_balanced(avail, self._threshold_256):
            state.reset_pending = True
            return None
        return per_object_penalties(cluster, avail, self._prio_wide)


class _WeightedPass:
    """One weighted call over numpy arrays (one entry per OST in index order), written back at the end.

    The arithmetic is Lustre's integer arithmetic; arrays only make each pick
    cost a few vector operations instead of a Python loop over every OST.
    """

    def __init__(self, policy: QosPolicy, cluster: ClusterState, avail: dict[int, int], scale: PenaltyScale):
        self.policy = policy
        self.state = policy.state
        self.index = np.array([ost.index for ost in cluster.osts], dtype=np.int64)
        self.osses = list(dict.fromkeys(ost.oss_id for ost in cluster.osts))
        code = {oss: k for k, oss in enumerate(self.osses)}
        self.oss_code = np.array([code[ost.oss_id] for ost in cluster.osts], dtype=np.int64)
        self.avail = np.array([avail[i] for i in self.index.tolist()], dtype=np.int64)
        self.ost_ppo = np.array([scale.ost_ppo[i] for i in self.index.tolist()], dtype=np.int64)
        self.oss_ppo = np.array([scale.oss_ppo[o] for o in self.osses], dtype=np.int64)
        self.ost_pen = np.array([self.state.ost_penalty.get(i, 0) for i in self.index.tolist()], dtype=np.int64)
        self.oss_pen = np.array([self.state.oss_penalty.get(o, 0) for o in self.osses], dtype=np.int64)
        self.scale = scale
        self.picked_osts: set[int] = set()
        self.picked_osses: set[int] = set()

    def place(self, requests, counts, sizes, free: dict[int, int]) -> list[list[int] | Refused]:
        not_full = np.array([free[i] > 0 for i in self.index.tolist()], dtype=bool)
        out: list[list[int] | Refused] = []
        for count in counts:
            fitting = int(not_full.sum())
            if fitting < count:
                out.append(Refused(f"qos: only {fitting} of the {count} OSTs needed are not full"))
            else:
                out.append(self._place_file(count, not_full.copy()))
        self._write_back()
        return out

    def _place_file(self, count: int, candidates: np.ndarray) -> list[int]:
        """Draw ``count`` distinct OSTs among ``candidates``, charging penalties after each pick."""
        chosen: list[int] = []
        for _ in range(count):
            pick = self._draw(candidates)
            candidates[pick] = False
            chosen.append(pick)
            self._charge(pick)
        return self.index[chosen].tolist()

    def _draw(self, candidates: np.ndarray) -> int:
        """An OST with probability proportional to its weight; all-zero weights take the first candidate."""
        weights = np.maximum(0, self.avail - self.ost_pen - self.oss_pen[self.oss_code])
        weights[~candidates] = 0
        running = np.cumsum(weights)
        total = int(running[-1])
        if total == 0:
            return int(np.flatnonzero(candidates)[0])
        return int(np.searchsorted(running, self.policy._rng.randrange(total), side="right"))

    def _charge(self, pick: int) -> None:
        """Lustre's bookkeeping after a pick: penalise the OST and its OSS, then relax every penalty a step."""
        oss = self.oss_code[pick]
        self.ost_pen[pick] = (self.ost_pen[pick] >> 1) + self.ost_ppo[pick] * self.scale.active_osts
        self.oss_pen[oss] = (self.oss_pen[oss] >> 1) + self.oss_ppo[oss] * self.scale.active_osses
        self.picked_osts.add(pick)
        self.picked_osses.add(int(oss))
        np.maximum(self.oss_pen - self.oss_ppo, 0, out=self.oss_pen)
        np.maximum(self.ost_pen - self.ost_ppo, 0, out=self.ost_pen)

    def _write_back(self) -> None:
        state = self.state
        for pos, index in enumerate(self.index.tolist()):
            state.ost_penalty[index] = int(self.ost_pen[pos])
        for k, oss in enumerate(self.osses):
            state.oss_penalty[oss] = int(self.oss_pen[k])
        for pos in self.picked_osts:
            state.ost_last_pick[int(self.index[pos])] = state.calls
        for k in self.picked_osses:
            state.oss_last_pick[self.osses[k]] = state.calls
