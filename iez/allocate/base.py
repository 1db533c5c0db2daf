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
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Callable, Sequence, final

from iez.allocate.stripe import ALIGNMENT, MAX_STRIPE_SIZE, stripe_size
from iez.errors import Infeasible
from iez.model import (
    ALL_OSTS,
    EOF_END,
    Allocation,
    ClusterState,
    Component,
    WriteRequest,
    component_stripe_bytes,
    raid0_bytes,
)


class AllocationError(Infeasible):
    """A request cannot be placed; the message names the request and the reason."""

    def __init__(self, request: WriteRequest | None, reason: str):
        self.request = request
        self.reason = reason
        where = f"request for {request.file} (app {request.app})" if request is not None else "request batch"
        super().__init__(f"{where}: {reason}")


@final  # nothing derives from it, so ``type(x) is Refused`` narrows both ways for mypy
@dataclass(frozen=True)
class Refused:
    """Why one file gets no layout (it is then left to Lustre's own allocator)."""

    reason: str


@dataclass(frozen=True)
class Part(WriteRequest):
    """One placement part of a composite file: a reached component, or one round of distinct OSTs of an
    overstriped one. Lustre stripes a component by the file's offsets, so its objects hold RAID-0 of the file up to
    the component's end less RAID-0 up to ``offset`` (its start), not RAID-0 of its length from stripe 0; a round
    of an overstriped component holds exactly ``objects``. :func:`part_objects` gives the bytes either way."""

    offset: int = 0
    objects: tuple[int, ...] = ()


def part_objects(request: WriteRequest, stripe_size: int, stripe_count: int) -> list[int]:
    """Bytes each stripe object of a placed request or :class:`Part` holds, in stripe order (exact RAID-0
    arithmetic: short last stripes, the empty objects of small files, the uneven objects of wrapped files and of
    components that start inside a stripe round)."""
    if type(request) is not Part:
        return raid0_bytes(request.write_bytes, stripe_size, stripe_count)
    if request.objects:
        if len(request.objects) != stripe_count:
            raise ValueError(f"{request.file}: a part of {len(request.objects)} objects placed on {stripe_count}")
        return list(request.objects)
    if not request.offset:
        return raid0_bytes(request.write_bytes, stripe_size, stripe_count)
    before = raid0_bytes(request.offset, stripe_size, stripe_count)
    upto = raid0_bytes(request.offset + request.write_bytes, stripe_size, stripe_count)
    return [b - a for a, b in zip(before, upto)]


def _part(request: WriteRequest, **changes) -> Part:
    fields = dict(request.__dict__)
    fields.update(changes)
    return Part(**fields)


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

    #: Whether :meth:`_place` leaves in ``self.carried`` the bytes it placed, so that the next pool's call of the
    #: same batch sees them (its OSTs and OSSs may be shared); pools are then placed narrowest first.
    shares_pools: bool = False

    #: Whether :meth:`place` first tries every file without degraded OSTs and gives them only to the files
    #: that need them (Lustre's allocators do it in passes; ``iez`` does it inside its solver).
    degraded_last: bool = False

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

    #: Whether the policy keeps every mirror of a file in failure domains no other mirror uses (iez);
    #: otherwise mirrors are placed as Lustre's FLR does, avoiding servers only while it can.
    mirror_domains: bool = False

    def carry(self, bytes_per_ost: dict[int, float]) -> None:
        """Bytes an earlier round of the same batch put on each OST (the other mirrors of mirrored files),
        for a policy that balances bytes (:meth:`_place` may read ``self.carried``)."""
        carried = self.__dict__.setdefault("carried", {})
        for ost, b in bytes_per_ost.items():
            carried[ost] = carried.get(ost, 0.0) + b

    def _place_batch(self, cluster: ClusterState, requests: tuple[WriteRequest, ...]) -> Placement:
        self.carried: dict[int, float] = {}
        if any(r.mirror_count > 1 for r in requests):
            from iez.allocate.mirrors import place_mirrored
            return place_mirrored(self, cluster, requests)
        return self._place_copies(cluster, requests)

    def _place_copies(self, cluster: ClusterState, requests: tuple[WriteRequest, ...]) -> Placement:
        """One copy of each request (the mirrors of a mirrored file are rounds of this)."""
        degraded = {o.index for o in cluster.osts if o.state == "degraded"}
        name = self.name
        if not any(r.components for r in requests):  # plain files (the common case): no expansion
            lists, sizes = self._place_parts(cluster, requests, [r.stripe_size for r in requests])
            return Placement(requests, tuple(
                osts if type(osts) is Refused else
                Allocation(r.file, size, osts, name, r.pool, (), _degraded_note(osts, degraded) if degraded else "")
                for r, osts, size in zip(requests, lists, sizes)))
        usable_in: dict[str | None, int] = {}

        def usable(pool: str | None) -> int:
            if pool not in usable_in:
                usable_in[pool] = sum(1 for o in cluster.osts if o.takes_stripes and (pool is None or pool in o.pools))
            return usable_in[pool]

        parts, fixed, owners = expand_requests(requests, self.stripe_rules, usable)
        lists, sizes = self._place_parts(cluster, parts, fixed)
        outcomes: list[Allocation | Refused] = []
        for request, owned in zip(requests, owners):
            if type(owned) is Refused:
                outcomes.append(owned)
                continue
            shape, base = owned
            outcomes.append(assemble(request, shape, base, lists, sizes, name, degraded))
        return Placement(requests, tuple(outcomes))

    def _place_parts(self, cluster: ClusterState, requests: Sequence[WriteRequest], fixed: Sequence[int | None]
                     ) -> tuple[list[tuple[int, ...] | Refused], list[int]]:
        """Each request on the candidates of its pool, every pool's requests in one call to the policy
        (``fixed[i]``: a stripe size the file's policy sets). Returns the OST lists (or refusals) and the
        stripe sizes chosen."""
        outcomes: list[tuple[int, ...] | Refused | None] = [None] * len(requests)
        chosen = [0] * len(requests)
        by_pool: dict[str | None, list[int]] = {}
        for i, request in enumerate(requests):
            by_pool.setdefault(request.pool or None, []).append(i)
        pools = list(by_pool)
        if self.shares_pools:  # the pools with fewest candidates first: the wider ones then place around them
            pools.sort(key=lambda p: sum(1 for o in cluster.osts if o.takes_stripes and (p is None or p in o.pools)))
        for pool in pools:
            members = by_pool[pool]
            candidates = [o for o in cluster.osts if o.takes_stripes and (pool is None or pool in o.pools)]
            view = cluster.with_osts(candidates)
            where = f"pool {pool}" if pool else "the file system"
            todo, counts, sizes = [], [], []
            # a job's files are mostly alike: resolve each (size, stripe count, stripe size) shape once
            shape_of: dict[tuple[int, int, int | None], tuple[int, int] | Refused] = {}
            for i in members:
                request = requests[i]
                key = (request.write_bytes, request.stripe_count, fixed[i])
                shape = shape_of.get(key)
                if shape is None:
                    shape = shape_of[key] = self._shape(request, len(candidates), where, fixed[i])
                if type(shape) is Refused:
                    outcomes[i] = shape
                else:
                    todo.append(i)
                    counts.append(shape[0])
                    sizes.append(shape[1])
            if not todo:
                continue
            lists = self._place_view(view, [requests[i] for i in todo], counts, sizes)
            checked = self.checks_layouts
            for i, count, size, osts in zip(todo, counts, sizes, lists):
                if type(osts) is Refused:
                    outcomes[i] = osts
                    continue
                layout = tuple(osts)
                if not checked and (len(layout) != count or len(set(layout)) != count):
                    raise AssertionError(f"{self.name}: {requests[i].file} got OSTs {layout}, wanted {count} "
                                         "distinct")
                outcomes[i] = layout
                chosen[i] = size
        done = [o for o in outcomes if o is not None]  # every request has its outcome: each pool's, refused or placed
        if len(done) != len(outcomes):
            raise AssertionError(f"{self.name}: {len(outcomes) - len(done)} requests left without an outcome")
        return done, chosen

    def _place_view(self, view: ClusterState, requests: list[WriteRequest], counts: list[int], sizes: list[int]
                    ) -> list[Sequence[int] | Refused]:
        """The policy over one pool's candidates; with :attr:`degraded_last`, degraded OSTs only for the files
        the others cannot take (Lustre's allocators skip them on their first pass)."""
        healthy = [o for o in view.osts if o.state != "degraded"]
        if not self.degraded_last or len(healthy) == len(view.osts) or not healthy:
            return self._place_guarded(view, requests, counts, sizes)
        first = self._place_guarded(view.with_osts(healthy), requests, counts, sizes)
        again = [k for k, got in enumerate(first) if type(got) is Refused]
        if again:
            second = self._place_guarded(view, [requests[k] for k in again], [counts[k] for k in again],
                                         [sizes[k] for k in again])
            for k, got in zip(again, second):
                first[k] = got
        return first

    def _place_guarded(self, view: ClusterState, requests: list[WriteRequest], counts: list[int],
                       sizes: list[int]) -> list[Sequence[int] | Refused]:
        try:
            return list(self._place(view, requests, counts, sizes))
        except AllocationError as err:  # a policy that can only place the batch as a whole
            return [Refused(err.reason)] * len(requests)

    def _shape(self, request: WriteRequest, usable: int, where: str, stripe_size: int | None = None
               ) -> tuple[int, int] | Refused:
        """The request's stripe count (``-1`` expanded) and stripe size (``stripe_size`` when the file's policy
        fixes it), or why it cannot be placed at all."""
        count = usable if request.stripe_count == ALL_OSTS else request.stripe_count
        if usable == 0:
            return Refused(f"no OST of {where} takes new stripes")
        if count > usable:
            return Refused(f"stripe count {count} exceeds the {usable} OSTs of {where} that take new stripes")
        return count, stripe_size or self.stripe_rules.size(request.write_bytes, count)

    @abstractmethod
    def _place(
        self,
        cluster: ClusterState,
        requests: Sequence[WriteRequest],
        counts: Sequence[int],
        sizes: Sequence[int],
    ) -> list[Sequence[int] | Refused]:
        """Per request, ``counts[i]`` distinct OST indices in stripe order, or why it is refused."""


@dataclass(frozen=True)
class _Shape:
    """How every file of one template, size and pool expands into placement parts (computed once, shared).

    ``parts`` are the requests the policy sees (bytes, stripe count, pool) and
    the stripe size the file's policy fixes: one for a plain file, one per
    reached component, one per round of distinct OSTs of an overstriped
    component. ``components`` holds per template component (pool resolved) the
    indices of its parts (none for an extent not reached or on the MDT) and its
    stripe size.
    """

    parts: tuple[tuple[WriteRequest, int | None], ...]
    pool: str | None
    components: tuple[tuple[Component, tuple[int, ...], int | None], ...] = ()


def component_stripe_size(component: Component, component_bytes: int, count: int, rules: StripeRules) -> int:
    """A reached component's stripe size: the template's, else paper Method II over the component's bytes,
    lowered to a size that divides the extent's boundaries (Lustre requires aligned extents)."""
    if component.stripe_size:
        return component.stripe_size
    size = rules.size(component_bytes, count)
    bounds = [b for b in (component.start, component.end) if b > 0]
    if not bounds:
        return size
    g = math.gcd(*bounds) if len(bounds) > 1 else bounds[0]
    unit = rules.alignment
    for k in range(size // unit, 0, -1):
        if g % (k * unit) == 0:
            return k * unit
    return unit


def expand_requests(requests: Sequence[WriteRequest], rules: StripeRules, usable: Callable[[str | None], int]
                    ) -> tuple[list[WriteRequest], list[int | None], list[tuple[_Shape, int] | Refused]]:
    """Requests as placement parts: the parts' requests, their fixed stripe sizes, and per request its
    :class:`_Shape` with the index of its first part (or why it has nothing to place).

    A template of one extent over the whole file (a plain directory default)
    is a plain layout with its pool, count and size. Of a composite template
    only the components the predicted size reaches get OSTs; a Data-on-MDT
    component never does; a component's pool is its own, else the file's.
    ``usable(pool)`` is how many OSTs of a pool take new stripes.
    """
    part_requests: list[WriteRequest] = []
    fixed: list[int | None] = []
    owners: list[tuple[_Shape, int] | Refused] = []
    shapes: dict[tuple, _Shape | Refused] = {}
    for request in requests:
        key = (request.components, request.write_bytes, request.pool, request.stripe_count, request.stripe_size,
               request.mirror_count)  # a part carries the copies its file needs
        shape = shapes.get(key)
        if shape is None:
            shape = shapes[key] = _shape_of(request, rules, usable)
        if type(shape) is Refused:
            owners.append(shape)
            continue
        owners.append((shape, len(part_requests)))
        for part, size in shape.parts:
            part_requests.append(part)
            fixed.append(size)
    return part_requests, fixed, owners


def _shape_of(request: WriteRequest, rules: StripeRules, usable: Callable[[str | None], int]) -> _Shape | Refused:
    comps = request.components
    if not comps:
        return _Shape(((request, request.stripe_size),), request.pool)
    if len(comps) == 1 and comps[0].end == EOF_END and not comps[0].dom and not comps[0].overstriping:
        only = comps[0]
        pool = only.pool or request.pool
        plain = replace(request, stripe_count=only.stripe_count, pool=pool, components=())
        return _Shape(((plain, only.stripe_size or request.stripe_size),), pool)
    parts: list[tuple[WriteRequest, int | None]] = []
    placed: list[tuple[Component, tuple[int, ...], int | None]] = []
    for comp in comps:
        pool = comp.pool or request.pool
        resolved = replace(comp, pool=pool) if pool != comp.pool else comp
        if comp.dom or not comp.reached(request.write_bytes):
            placed.append((resolved, (), None))
            continue
        nbytes = comp.bytes_in(request.write_bytes)
        if comp.overstriping and comp.stripe_count != ALL_OSTS and comp.stripe_count > usable(pool):
            # more stripes than OSTs: rounds of distinct OSTs, so each OST holds its share of the file
            size: int | None = component_stripe_size(comp, nbytes, comp.stripe_count, rules)
            probe = Component(comp.start, comp.end, comp.stripe_count, size, pool, tuple(range(comp.stripe_count)),
                              overstriping=True)
            objects = component_stripe_bytes(probe, request.write_bytes)
            width = max(1, usable(pool))
            first = len(parts)
            for r in range(0, len(objects), width):
                chunk = objects[r:r + width]
                parts.append((_part(request, write_bytes=sum(chunk), stripe_count=len(chunk), pool=pool,
                                    components=(), objects=tuple(chunk)), size))
            placed.append((resolved, tuple(range(first, len(parts))), size))
            continue
        size = None
        if comp.stripe_count != ALL_OSTS:
            size = component_stripe_size(comp, nbytes, comp.stripe_count, rules)
        elif comp.stripe_size:
            size = comp.stripe_size
        placed.append((resolved, (len(parts),), size))
        parts.append((_part(request, write_bytes=nbytes, stripe_count=comp.stripe_count, pool=pool, components=(),
                            offset=comp.start), size))
    if not parts:
        return Refused("the predicted size fits in the Data-on-MDT component: no OST to choose, the directory's "
                       "default layout applies as it is")
    return _Shape(tuple(parts), request.pool, tuple(placed))


def _placed_component(comp: Component, size: int, osts: tuple[int, ...]) -> Component:
    """A reached component with its OSTs, built without re-validating what the policy already guarantees."""
    out = object.__new__(Component)
    out.__dict__.update(start=comp.start, end=comp.end, stripe_count=len(osts), stripe_size=size, pool=comp.pool,
                        osts=osts, dom=False, overstriping=comp.overstriping)
    return out


def assemble(request: WriteRequest, shape: _Shape, base: int, outcomes: Sequence[tuple[int, ...] | Refused],
             sizes: Sequence[int], policy: str, degraded: set[int]) -> Allocation | Refused:
    """The request's :class:`Allocation` from its parts' outcomes (refused as a whole if any part is)."""
    if not shape.components:
        only = outcomes[base]
        if type(only) is Refused:
            return only
        return Allocation(request.file, sizes[base], only, policy, shape.parts[0][0].pool, (),
                          _degraded_note(only, degraded) if degraded else "")
    comps: list[Component] = []
    all_osts: list[int] = []
    first_size = 0
    for comp, indices, size in shape.components:
        if not indices:  # not reached, or Data-on-MDT: the template as it is
            comps.append(comp)
            continue
        osts: tuple[int, ...] = ()
        for i in indices:
            got = outcomes[base + i]
            if type(got) is Refused:
                end = "EOF" if comp.end == EOF_END else comp.end
                return Refused(f"component [{comp.start}, {end}): {got.reason}")
            osts += got
        placed = _placed_component(comp, size or sizes[base + indices[0]], osts)
        first_size = first_size or placed.stripe_size or 0
        comps.append(placed)
        all_osts.extend(osts)
    pools = {c.pool for c in comps}
    layout = tuple(all_osts)
    return Allocation(request.file, first_size, layout, policy, pools.pop() if len(pools) == 1 else None,
                      tuple(comps), _degraded_note(layout, degraded) if degraded else "")


def _degraded_note(osts: Sequence[int], degraded: set[int]) -> str:
    used = sorted({o for o in osts if o in degraded})
    if not used:
        return ""
    names = ", ".join(str(o) for o in used)
    return f"degraded OST{'s' if len(used) > 1 else ''} {names} used: no other OST could take the file"
