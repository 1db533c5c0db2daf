"""``rr``: Lustre's round-robin OST allocator, modelled from the behaviour of
``lod_alloc_rr`` / ``lod_qos_calc_rr`` in lustre-release (our own code).

What is modelled
----------------
- **The RR array.** The OSSs are listed the way Lustre's server list ends up
  when OSTs register in index order: an OSS that gains an OST moves in front of
  every OSS with fewer OSTs (ties keep their order). Then, OSS by OSS, the
  ``j``-th of an OSS's ``k`` OSTs goes to slot ``j * n // k`` of an ``n``-slot
  array, or the next free slot after it. Each OSS is spread evenly, so
  consecutive slots alternate between servers.
- **The cursor.** A start index and an offset persist across files and calls.
  A file begins at slot ``(start + offset) % n`` and takes consecutive slots;
  the start index moves by one for every slot looked at, used or skipped.
- **The wrap.** Before a file, if the start index has run past ``n`` (or the
  file wants every OST) it is folded back modulo ``n``, and the offset moves on
  by one unless ``n % stripe_count == 1``, so files with a stripe count that
  divides into the array do not keep landing on the same OSTs.
- **The reseed.** Every ``(2000 // n + 30) * n`` creates, and on the very first
  one, the start index jumps to a random slot drawn from ``random.Random(seed)``,
  so runs are deterministic for a seed.
- **Skipping.** An OST is passed over when its last statfs shows it full (no
  free space). The MDS does not know how large a file will grow when it
  creates it, so the choice never looks at the file's size: an OST with a
  little space left still gets a stripe, and the write may then fail with
  ENOSPC, as on Lustre (LU-16501). One pass visits each OST once, so a file
  never gets an OST twice.

What is simplified
------------------
- One pool: the OSTs the policy is shown. If that set (or an OST's server)
  changes, the array is rebuilt, as Lustre does when its RR data goes stale;
  the cursor is kept.
- Lustre's "full" and "no precreated objects" tests are folded into the room
  test. Its first pass skips degraded OSTs and a later pass takes them: here a
  file is first placed without degraded OSTs and only a file refused there is
  placed again with them (:attr:`Policy.degraded_last`).
- Lustre may give a file with a default layout fewer stripes than asked; here a
  file gets exactly its stripe count or is refused, and a refused file leaves
  the cursor where it was.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Sequence

from iez.allocate.base import AllocationError, Policy, Refused
from iez.model import OST, ClusterState, WriteRequest

#: Lustre reseeds the start index after ``(RESEED_MIN // n + RESEED_MULT) * n`` creates.
RESEED_MIN = 2000
RESEED_MULT = 30


def oss_list_order(osts: Sequence[OST]) -> list[str]:
    """OSS ids in the order of Lustre's server list after OSTs register by index.

    An OSS that gains an OST moves in front of every OSS with fewer OSTs, so
    it lands last among the servers with its new count. The final order is
    therefore: more OSTs first, and among equals, the server that reached its
    count earlier (its last OST has the lower index) first. The order decides
    which server gets the first pick of each slot region, so it shapes which
    OSTs a file's consecutive stripes land on.
    """
    ost_counts: dict[str, int] = {}
    reached: dict[str, int] = {}
    for position, ost in enumerate(sorted(osts, key=lambda o: o.index)):
        ost_counts[ost.oss_id] = ost_counts.get(ost.oss_id, 0) + 1
        reached[ost.oss_id] = position
    return sorted(ost_counts, key=lambda oss: (-ost_counts[oss], reached[oss]))


def interleaved_order(osts: Sequence[OST]) -> list[int]:
    """OST indices in RR-array order: each OSS's OSTs spaced evenly across the array.

    The ``j``-th of an OSS's ``k`` OSTs takes slot ``j * n // k`` or the next free
    slot after it (cyclically); a union-find over taken slots keeps that linear.
    """
    n = len(osts)
    members: dict[str, list[int]] = {}
    for ost in sorted(osts, key=lambda o: o.index):
        members.setdefault(ost.oss_id, []).append(ost.index)
    slots: list[int | None] = [None] * n
    next_free = list(range(n + 1))  # next_free[s]: first free slot at or after s (n: wrap around)

    def find(slot: int) -> int:
        root = slot
        while next_free[root] != root:
            root = next_free[root]
        while next_free[slot] != root:
            next_free[slot], slot = root, next_free[slot]
        return root

    for oss in oss_list_order(osts):
        for j, index in enumerate(members[oss]):
            slot = find(j * n // len(members[oss]))
            if slot == n:
                slot = find(0)
            slots[slot] = index
            next_free[slot] = slot + 1
    return [index for index in slots if index is not None]


@dataclass(frozen=True)
class RrCursor:
    """Where the next file starts (Lustre's lqr_start_idx, lqr_offset_idx, lqr_start_count)."""

    start_idx: int = 0
    offset_idx: int = 0
    creates_until_reseed: int = 0


class RoundRobinPolicy(Policy):
    """Lustre's round-robin allocator; one instance is one MDS's RR state."""

    name = "rr"
    size_aware = False
    degraded_last = True

    def __init__(self, seed: int = 0, **kw):
        super().__init__(seed, **kw)
        self._rng = random.Random(seed)
        self.cursor = RrCursor()
        self._array: list[int] = []
        self._array_key: tuple[tuple[int, str], ...] = ()

    @property
    def rr_array(self) -> list[int]:
        """The current OSS-interleaved OST order (empty before the first call)."""
        return list(self._array)

    def _place(
        self, cluster: ClusterState, requests: Sequence[WriteRequest], counts: Sequence[int], sizes: Sequence[int]
    ) -> list[Sequence[int] | Refused]:
        free = {ost.index: ost.bytes_avail for ost in cluster.osts}
        out: list[Sequence[int] | Refused] = []
        self._refresh_array(cluster)  # once per call: the OST set does not change within it
        for request, count, size in zip(requests, counts, sizes):
            saved = self.checkpoint()
            try:
                out.append(self._stripe(request, count, free))
            except AllocationError as err:
                self.restore(saved)
                out.append(Refused(err.reason))
        return out

    def checkpoint(self) -> tuple:
        """State to restore if a call fails, so a refused call changes nothing."""
        return self.cursor, self._rng.getstate()

    def restore(self, saved: tuple) -> None:
        self.cursor, rng_state = saved
        self._rng.setstate(rng_state)

    def _stripe(self, request: WriteRequest, count: int, free: dict[int, int]) -> list[int]:
        """Stripe one file from the RR array over OSTs that are not full."""
        self._advance_for_file(count)
        chosen = self._walk(count, free)
        if len(chosen) < count:
            raise AllocationError(request, f"rr: only {len(chosen)} of the {count} OSTs needed are not full")
        return chosen

    def _refresh_array(self, cluster: ClusterState) -> None:
        """Rebuild the RR array when the OST set or OST-to-OSS mapping changed."""
        key = tuple((ost.index, ost.oss_id) for ost in cluster.osts)
        if key != self._array_key:
            self._array = interleaved_order(cluster.osts)
            self._array_key = key

    def _advance_for_file(self, count: int) -> None:
        """Per-file cursor update: periodic random reseed, else wrap with an offset bump."""
        n = len(self._array)
        cur = replace(self.cursor, creates_until_reseed=self.cursor.creates_until_reseed - 1)
        if cur.creates_until_reseed <= 0:
            cur = replace(
                cur, start_idx=self._rng.randrange(n), creates_until_reseed=(RESEED_MIN // n + RESEED_MULT) * n
            )
        elif count >= n or cur.start_idx > n:
            bump = 1 if count > 1 and n % count != 1 else 0
            cur = replace(cur, start_idx=cur.start_idx % n, offset_idx=cur.offset_idx + bump)
        self.cursor = cur

    def _walk(self, count: int, free: dict[int, int]) -> list[int]:
        """Take consecutive array slots of OSTs that are not full; the start index counts every slot looked at."""
        n = len(self._array)
        first = (self.cursor.start_idx + self.cursor.offset_idx) % n
        chosen: list[int] = []
        looked = 0
        while looked < n and len(chosen) < count:
            index = self._array[(first + looked) % n]
            looked += 1
            if free[index] > 0:
                chosen.append(index)
        self.cursor = replace(self.cursor, start_idx=self.cursor.start_idx + looked)
        return chosen
