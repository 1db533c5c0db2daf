"""What keeping every copy of a mirrored (FLR) file in failure domains of its own forces, for the bound.

``iez`` and ``greedy`` keep every copy of a mirrored file in failure domains (the cluster description's
``domain`` of an OSS, else the OSS) that no other copy of the file uses (:mod:`iez.allocate.mirrors`). The
domain-blind bound (:func:`iez.sim.metrics.makespan_bound` over every copy's objects) may put two copies on one
fast server, which neither may do, so :func:`iez.sim.engine.job_bound` also takes :func:`domain_bound`, a lower
bound for every placement that keeps the copies apart, and :func:`domains_can_hold` says when no such placement
exists at all.

A copy at stripe count -1 takes every OST of the failure domains it is given (as an unmirrored file at -1 takes
every OST of its pool, and as Lustre's FLR gives a later mirror the OSTs left after avoiding the other mirrors'
servers), its stripe size by the policies' rule for that count: the part of the bound about -1 copies holds for
placements that keep to that.
"""

from __future__ import annotations

from itertools import product
from typing import TYPE_CHECKING

import numpy as np

from iez.model import ALL_OSTS, ClusterState, WriteRequest, raid0_bytes

if TYPE_CHECKING:  # pragma: no cover
    from iez.sim.engine import Prepared
    from iez.sim.workloads import Job

#: Past this many failure domains in a pool, :func:`domains_can_hold` assumes a split exists (it enumerates).
MAX_ENUMERATED_DOMAINS = 12


def copy_pools(request: WriteRequest) -> set[str | None]:
    """The pools a copy of ``request`` draws OSTs from (a component's own, else the file's)."""
    return {c.pool or request.pool for c in request.components} or {request.pool}


def copy_need(request: WriteRequest) -> int:
    """Distinct OSTs one copy needs at least: its widest component (-1: one)."""
    counts = [c.stripe_count for c in request.components if not c.dom] or [request.stripe_count]
    return max(1 if c == ALL_OSTS else c for c in counts)


def copy_bytes(request: WriteRequest) -> int:
    """Bytes one copy writes to OSTs: the whole file, less what a Data-on-MDT component holds."""
    if not request.components:
        return request.write_bytes
    return sum(c.bytes_in(request.write_bytes) for c in request.components
               if not c.dom and c.reached(request.write_bytes))


def domains_can_hold(cluster: ClusterState, request: WriteRequest) -> bool:
    """Whether the failure domains of the request's pool (OSTs taking stripes) can be split into
    ``mirror_count`` disjoint sets each holding as many OSTs as a copy's widest component needs (room aside):
    when not, no placement keeps every copy in failure domains of its own."""
    from iez.allocate.mirrors import domain_of

    m = request.mirror_count
    if m < 2:
        return True
    dom = domain_of(cluster)
    need = copy_need(request)
    for pool in copy_pools(request):
        per: dict[str, int] = {}
        for o in cluster.osts:
            if o.takes_stripes and (pool is None or pool in o.pools):
                per[dom[o.index]] = per.get(dom[o.index], 0) + 1
        sizes = list(per.values())
        if len(sizes) > MAX_ENUMERATED_DOMAINS:  # too many to enumerate: assume a split exists
            continue
        if not any(all(sum(n for n, a in zip(sizes, assign) if a == k) >= need for k in range(m))
                   for assign in product(range(m + 1), repeat=len(sizes))):
            return False
    return True


def domain_bound(prepared: "Prepared", job: "Job") -> float:
    """A lower bound on the job's I/O time for a placement that keeps every copy of a file in failure domains of
    its own, where that forces bytes: a file with as many copies as its pool has domains puts a whole copy in
    each of them (copies need disjoint, non-empty sets of domains), so a domain takes at least the sum of those
    files' copy bytes, at most at the fluid speed of its pool OSTs (each OSS capped at its usable bandwidth).
    Such a file at stripe count -1 also puts an object on every OST of each domain (its copy takes every OST
    of its domain, the stripe size by the policies' rule): among a domain's k slowest OSTs each holds one
    object of every such file, so they hold at least each file's k smallest objects between them, and one of
    them at least the file's k-th smallest plus every other file's smallest. (That part is left out for a
    domain with a degraded OST, which a placement may leave out of a -1 copy.) 0 when no file is so forced."""
    from iez.allocate.base import StripeRules
    from iez.allocate.mirrors import domain_of

    cluster = prepared.cluster
    dom = domain_of(cluster)
    bw = prepared.bandwidths
    rules = StripeRules()
    degraded = np.array([o.state == "degraded" for o in cluster.osts], dtype=bool)
    forced: dict[str, float] = {}
    speed: dict[str, float] = {}
    objects: dict[str, list[list[int]]] = {}  # per domain, each forced -1 file's objects there, smallest first
    members: dict[str, np.ndarray] = {}
    for r in job.requests:
        pools = copy_pools(r)
        if r.mirror_count < 2 or len(pools) != 1:
            continue
        mask = prepared.candidates(pools.pop())
        domains = {dom[o.index] for o, on in zip(cluster.osts, mask) if on}
        if len(domains) != r.mirror_count:
            continue
        for d in domains:
            forced[d] = forced.get(d, 0.0) + copy_bytes(r)
            if d not in speed:
                members[d] = mask & np.array([dom[o.index] == d for o in cluster.osts])
                per_oss = np.bincount(bw.oss_code, weights=np.where(members[d], bw.ost, 0.0), minlength=len(bw.oss))
                speed[d] = float(np.minimum(per_oss, bw.oss).sum())
            if r.stripe_count == ALL_OSTS and not r.components and not (members[d] & degraded).any():
                n = int(members[d].sum())
                size = r.stripe_size or rules.size(r.write_bytes, n)
                objects.setdefault(d, []).append(sorted(raid0_bytes(r.write_bytes, size, n)))
    out = max((b / speed[d] for d, b in forced.items() if speed[d] > 0), default=0.0)
    for d, files in objects.items():
        slow = np.sort(bw.ost[members[d]])  # each OST's usable bandwidth, slowest first
        smallest = sum(f[0] for f in files)
        for k in range(1, len(slow) + 1):
            if slow[k - 1] <= 0:
                continue
            out = max(out, sum(sum(f[:k]) for f in files) / slow[:k].sum(),
                      max(f[k - 1] - f[0] for f in files) / slow[k - 1] + smallest / slow[k - 1])
    return out


__all__ = ["copy_bytes", "copy_need", "copy_pools", "domain_bound", "domains_can_hold"]
