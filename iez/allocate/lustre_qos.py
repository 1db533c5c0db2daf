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
  its weight among the OSTs that have room for the stripe (free bytes, charged
  within the call) and are not yet in the file; if every candidate weighs zero,
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
- Weights and the RR/weighted decision use the call's snapshot, while the room
  test charges stripes placed earlier in the call.
- One pool (the OSTs shown). A file gets exactly its stripe count or the call
  raises ``AllocationError``; a failed call leaves every penalty, cursor and
  random state as it was.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Sequence

from iez.allocate.base import AllocationError, Policy
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
    ) -> list[Sequence[int]]:
        saved = (copy.deepcopy(self.state), self._rng.getstate(), self._rr.checkpoint(), self.last_mode)
        try:
            return self._place_all(cluster, requests, counts, sizes)
        except AllocationError:
            self.state, rng_state, rr_saved, self.last_mode = saved
            self._rng.setstate(rng_state)
            self._rr.restore(rr_saved)
            raise

    def _place_all(
        self, cluster: ClusterState, requests: Sequence[WriteRequest], counts: Sequence[int], sizes: Sequence[int]
    ) -> list[Sequence[int]]:
        free = {ost.index: ost.bytes_avail for ost in cluster.osts}
        avail = scaled_avail(cluster)
        scale = self._refresh(cluster, avail)
        if scale is None:
            self.last_mode = "rr"
            return [self._rr.place_file(cluster, r, c, s, free) for r, c, s in zip(requests, counts, sizes)]
        self.last_mode = "weighted"
        oss_of = {ost.index: ost.oss_id for ost in cluster.osts}
        return [self._place_weighted(r, c, s, free, avail, oss_of, scale) for r, c, s in zip(requests, counts, sizes)]

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

    def _place_weighted(
        self,
        request: WriteRequest,
        count: int,
        size: int,
        free: dict[int, int],
        avail: dict[int, int],
        oss_of: dict[int, str],
        scale: PenaltyScale,
    ) -> list[int]:
        """Draw ``count`` distinct OSTs with room, charging penalties after each pick."""
        fitting = [index for index in sorted(free) if free[index] >= size]
        if len(fitting) < count:
            raise AllocationError(
                request, f"qos: only {len(fitting)} of {count} OSTs still have {size} bytes free for a stripe"
            )
        chosen: list[int] = []
        for _ in range(count):
            candidates = [index for index in fitting if index not in chosen]
            pick = self._draw(candidates, avail, oss_of)
            chosen.append(pick)
            self._charge(pick, oss_of[pick], scale)
        for index in chosen:
            free[index] -= size
        return chosen

    def _weight(self, index: int, avail: dict[int, int], oss: str) -> int:
        penalty = self.state.ost_penalty.get(index, 0) + self.state.oss_penalty.get(oss, 0)
        return max(0, avail[index] - penalty)

    def _draw(self, candidates: list[int], avail: dict[int, int], oss_of: dict[int, str]) -> int:
        """An OST with probability proportional to its weight; all-zero weights take the first."""
        weights = [self._weight(index, avail, oss_of[index]) for index in candidates]
        total = sum(weights)
        if total == 0:
            return candidates[0]
        target = self._rng.randrange(total)
        running = 0
        for index, weight in zip(candidates, weights):
            running += weight
            if running > target:
                return index
        raise AssertionError("weighted draw ran past the total weight")

    def _charge(self, index: int, oss: str, scale: PenaltyScale) -> None:
        """Lustre's bookkeeping after a pick: penalise the OST and its OSS, then relax every penalty a step."""
        state = self.state
        state.ost_penalty[index] = (state.ost_penalty.get(index, 0) >> 1) + scale.ost_ppo[index] * scale.active_osts
        state.oss_penalty[oss] = (state.oss_penalty.get(oss, 0) >> 1) + scale.oss_ppo[oss] * scale.active_osses
        state.ost_last_pick[index] = state.oss_last_pick[oss] = state.calls
        for other, ppo in scale.oss_ppo.items():
            state.oss_penalty[other] = max(0, state.oss_penalty.get(other, 0) - ppo)
        for other, ppo in scale.ost_ppo.items():
            state.ost_penalty[other] = max(0, state.ost_penalty.get(other, 0) - ppo)
