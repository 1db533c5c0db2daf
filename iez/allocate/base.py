"""The allocation-policy interface and the checks every policy shares.

A policy turns write requests into layouts (stripe size plus an ordered OST
list) over the OSTs it is shown. Policies may keep state between calls, as
Lustre's allocators do (round-robin position, QoS penalties), so one instance
models one MDS over a sequence of jobs. The same input, seed and call sequence
always give the same layouts.

Refusal is per file: :meth:`Policy.place` places what it can and names, for
every file it cannot place (stripe count above the usable OSTs, no room under
the fill cap), the reason. Only OSTs that take new stripes and belong to the
request's pool are candidates.
"""

from __future__ import annotations

import gc
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

from iez.allocate.stripe import ALIGNMENT, MAX_STRIPE_SIZE, stripe_size
from iez.model import ALL_OSTS, Allocation, ClusterState, WriteRequest


class AllocationError(ValueError):
    """A request cannot be placed; the message names the request and the reason."""

    def __init__(self, request: WriteRequest | None, reason: str):
        self.request = request
        self.reason = reason
        where = f"request for {request.file} (app {request.app})" if request is not None else "request batch"
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class Refused:
    """Why one file gets no layout (it is then left to Lustre's own allocator)."""

    reason: str


@dataclass(frozen=True)
class Placement:
    """A batch's outcome: one entry per request, an :class:`Allocation` or a :class:`Refused`."""

    requests: tuple[WriteRequest, ...]
    outcomes: tuple[Allocation | Refused, ...]

    @property
    def allocations(self) -> list[Allocation]:
        return [o for o in self.outcomes if isinstance(o, Allocation)]

    @property
    def refused(self) -> list[tuple[WriteRequest, str]]:
        return [(r, o.reason) for r, o in zip(self.requests, self.outcomes) if isinstance(o, Refused)]


@dataclass(frozen=True)
class StripeRules:
    """How stripe sizes are computed (paper Method II, capped at Lustre's 32-bit limit)."""

    alignment: int = ALIGNMENT
    multiple: int = 2
    max_size: int = MAX_STRIPE_SIZE

    def size(self, write_bytes: int, stripe_count: int) -> int:
        return stripe_size(write_bytes, stripe_count, self.alignment, self.multiple, self.max_size)


class Policy(ABC):
    """One placement policy. Subclasses implement :meth:`_place`."""

    name: str = ""
    #: Whether the policy promises never to exceed an OST's free space (Lustre's own allocators do not
    #: know a file's size when they choose, so they cannot).
    size_aware: bool = True

    #: Whether :meth:`_place` itself verifies that every layout has its count of distinct OSTs
    #: (vectorised); otherwise :meth:`place` checks each one.
    checks_layouts: bool = False

    def __init__(self, seed: int = 0, stripe_rules: StripeRules | None = None):
        self.seed = seed
        self.stripe_rules = stripe_rules or StripeRules()

    def allocate(self, cluster: ClusterState, requests: Sequence[WriteRequest]) -> list[Allocation]:
        """Layouts for ``requests`` in their order; raises :class:`AllocationError` for the first refused file."""
        placement = self.place(cluster, requests)
        if placement.refused:
            raise AllocationError(*placement.refused[0])
        return placement.allocations

    def place(self, cluster: ClusterState, requests: Sequence[WriteRequest]) -> Placement:
        """Place every file that can be placed; the others are refused with their reason."""
        # A batch creates millions of small objects and no cycles: the cyclic collector would only
        # rescan them (a third of the time for a million files).
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._place_batch(cluster, tuple(requests))
        finally:
            if collecting:
                gc.enable()

    def _place_batch(self, cluster: ClusterState, requests: tuple[WriteRequest, ...]) -> Placement:
        outcomes: list[Allocation | Refused | None] = [None] * len(requests)
        by_pool: dict[str | None, list[int]] = {}
        for i, request in enumerate(requests):
            by_pool.setdefault(request.pool or None, []).append(i)
        for pool, members in by_pool.items():
            candidates = [o for o in cluster.osts if o.takes_stripes and (pool is None or pool in o.pools)]
            view = cluster.with_osts(candidates)
            where = f"pool {pool}" if pool else "the file system"
            todo, counts, sizes = [], [], []
            # a job's files are mostly alike: resolve each (size, stripe count) shape once
            shape_of: dict[tuple[int, int], tuple[int, int] | Refused] = {}
            for i in members:
                request = requests[i]
                key = (request.write_bytes, request.stripe_count)
                shape = shape_of.get(key)
                if shape is None:
                    shape = shape_of[key] = self._shape(request, len(candidates), where)
                if type(shape) is Refused:
                    outcomes[i] = shape
                else:
                    todo.append(i)
                    counts.append(shape[0])
                    sizes.append(shape[1])
            if not todo:
                continue
            try:
                lists = self._place(view, [requests[i] for i in todo], counts, sizes)
            except AllocationError as err:  # a policy that can only place the batch as a whole
                lists = [Refused(err.reason)] * len(todo)
            name, checked = self.name, self.checks_layouts
            for i, count, size, osts in zip(todo, counts, sizes, lists):
                if type(osts) is Refused:
                    outcomes[i] = osts
                    continue
                layout = tuple(osts)
                if not checked and (len(layout) != count or len(set(layout)) != count):
                    raise AssertionError(f"{name}: {requests[i].file} got OSTs {layout}, wanted {count} distinct")
                outcomes[i] = Allocation(requests[i].file, size, layout, name)
        return Placement(requests, tuple(outcomes))  # type: ignore[arg-type]

    def _shape(self, request: WriteRequest, usable: int, where: str) -> tuple[int, int] | Refused:
        """The request's stripe count (``-1`` expanded) and stripe size, or why it cannot be placed at all."""
        count = usable if request.stripe_count == ALL_OSTS else request.stripe_count
        if usable == 0:
            return Refused(f"no OST of {where} takes new stripes")
        if count > usable:
            return Refused(f"stripe count {count} exceeds the {usable} OSTs of {where} that take new stripes")
        return count, self.stripe_rules.size(request.write_bytes, count)

    @abstractmethod
    def _place(
        self,
        cluster: ClusterState,
        requests: Sequence[WriteRequest],
        counts: Sequence[int],
        sizes: Sequence[int],
    ) -> list[Sequence[int] | Refused]:
        """Per request, ``counts[i]`` distinct OST indices in stripe order, or why it is refused."""
