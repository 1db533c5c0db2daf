"""The allocation-policy interface and the checks every policy shares.

A policy turns write requests into layouts (stripe size plus an ordered OST
list) over the OSTs it is shown. Policies may keep state between calls, as
Lustre's allocators do (round-robin position, QoS penalties), so one instance
models one MDS over a sequence of jobs. The same input, seed and call sequence
always give the same layouts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

from iez.model import ALL_OSTS, Allocation, ClusterState, WriteRequest
from iez.allocate.stripe import ALIGNMENT, stripe_size


class AllocationError(ValueError):
    """A request cannot be placed; the message names the request and the reason."""

    def __init__(self, request: WriteRequest | None, reason: str):
        self.request = request
        self.reason = reason
        where = f"request for {request.file} (app {request.app})" if request is not None else "request batch"
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class StripeRules:
    """How stripe sizes are computed (paper Method II; alignment configurable)."""

    alignment: int = ALIGNMENT
    multiple: int = 2

    def size(self, write_bytes: int, stripe_count: int) -> int:
        return stripe_size(write_bytes, stripe_count, self.alignment, self.multiple)


class Policy(ABC):
    """One placement policy. Subclasses implement :meth:`_place`."""

    name: str = ""

    def __init__(self, seed: int = 0, stripe_rules: StripeRules | None = None):
        self.seed = seed
        self.stripe_rules = stripe_rules or StripeRules()

    def allocate(self, cluster: ClusterState, requests: Sequence[WriteRequest]) -> list[Allocation]:
        """Layouts for ``requests`` in their order; raises :class:`AllocationError` if any is impossible."""
        if not requests:
            return []
        counts = resolve_stripe_counts(cluster, requests)
        size_of: dict[tuple[int, int], int] = {}  # a job's files are mostly alike: size each shape once
        sizes = []
        for request, count in zip(requests, counts):
            key = (request.write_bytes, count)
            if key not in size_of:
                size_of[key] = self.stripe_rules.size(*key)
            sizes.append(size_of[key])
        check_total_space(cluster, requests, counts, sizes)
        lists = self._place(cluster, requests, counts, sizes)
        out = []
        for request, size, osts, count in zip(requests, sizes, lists, counts):
            layout = tuple(map(int, osts))
            if len(layout) != count or len(set(layout)) != count:
                raise AssertionError(f"{self.name}: {request.file} got OSTs {layout}, wanted {count} distinct")
            out.append(Allocation(request.file, size, layout, self.name))
        return out

    @abstractmethod
    def _place(
        self,
        cluster: ClusterState,
        requests: Sequence[WriteRequest],
        counts: Sequence[int],
        sizes: Sequence[int],
    ) -> list[Sequence[int]]:
        """Ordered OST index lists, one per request, ``counts[i]`` distinct OSTs each."""


def resolve_stripe_counts(cluster: ClusterState, requests: Sequence[WriteRequest]) -> list[int]:
    """Stripe counts with ``-1`` expanded; refuses a count above the usable OSTs."""
    usable = len(cluster.osts)
    if usable == 0:
        raise AllocationError(requests[0], "no usable OSTs")
    counts = []
    for request in requests:
        count = usable if request.stripe_count == ALL_OSTS else request.stripe_count
        if count > usable:
            raise AllocationError(request, f"stripe count {count} exceeds the {usable} usable OSTs")
        counts.append(count)
    return counts


def check_total_space(
    cluster: ClusterState, requests: Sequence[WriteRequest], counts: Sequence[int], sizes: Sequence[int]
) -> None:
    """Refuse a request whose stripes fit on too few OSTs, and a batch larger than the free space."""
    avail = sorted((ost.bytes_avail for ost in cluster.osts), reverse=True)
    for request, count, size in zip(requests, counts, sizes):
        if avail[count - 1] < size:
            fitting = sum(1 for a in avail if a >= size)
            raise AllocationError(
                request,
                f"needs {count} OSTs with {size} bytes free for one stripe each; only {fitting} have that much",
            )
    needed = sum(c * s for c, s in zip(counts, sizes))
    if needed > sum(avail):
        raise AllocationError(None, f"needs {needed} bytes but the usable OSTs hold only {sum(avail)} bytes free")
