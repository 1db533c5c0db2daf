"""Mirrored files (Lustre FLR, seed 003's CEFT): each copy of a file in failure domains of its own.

A batch with mirrored files is placed in rounds. Round 0 places one copy of
every file, as a batch without mirrors would be placed. Round ``k`` places the
``k+1``-th copy of the files that ask for that many, grouped by the failure
domains their earlier copies use, each group on the OSTs outside those domains.
The policy carries the bytes of earlier rounds (:meth:`Policy.carry`), so
every copy costs write bandwidth and room like any other stripe: a file with
two mirrors writes its bytes twice, and iez balances all of them.

A *failure domain* is the cluster description's ``domain`` of an OSS (a rack,
a controller pair), else the OSS itself.

- **iez** (``mirror_domains``): the domains are dealt into ``m`` groups of
  about equal bandwidth (CEFT's primary and backup groups) and copy ``k`` of a
  file goes to group ``(k + t) % m``, ``t`` turning from file to file so
  primaries spread over every group; a copy that does not fit its group takes
  any domain no other copy of the file uses. A file whose pool has fewer
  domains than copies, or whose free domains cannot take a copy, is refused
  with the reason.
- **rr / qos** model Lustre's FLR (``lfs mirror create -N``, ``lfs setstripe
  -N``): the MDS allocates each mirror's objects with its usual allocator and,
  while it can, steers away from the OSTs that overlapping components of the
  other mirrors use and from their OSSs; when that leaves too few OSTs it tries
  again avoiding only those OSTs, and finally takes any OST. It knows OSSs, not
  racks or controller pairs, so a site's ``domain`` is only honoured through
  pools. Here: the view without the other mirrors' OSSs, else without their
  OSTs, else the whole view.

The preferred mirror (Lustre's ``prefer`` flag, CEFT's hot-spot skipping) is
the copy whose busiest OST and OSS is least loaded in the live view.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from iez.model import EOF_END, OST, Allocation, ClusterState, Component, WriteRequest

if TYPE_CHECKING:  # pragma: no cover
    from iez.allocate.base import Placement, Policy


def domain_of(cluster: ClusterState) -> dict[int, str]:
    """Failure domain of each OST in view: its OSS's ``domain``, else the OSS's id."""
    out = {}
    for o in cluster.osts:
        server = cluster.osses.get(o.oss_id)
        out[o.index] = (server.domain if server is not None and server.domain else "") or o.oss_id
    return out


def copy_components(a: Allocation) -> tuple[Component, ...]:
    """One placed copy as components (a plain layout is one component over the whole file)."""
    if a.components:
        return a.components
    return (Component(0, EOF_END, len(a.osts), a.stripe_size, a.pool, a.osts),)


def copy_osts(comps: tuple[Component, ...]) -> set[int]:
    return {o for c in comps for o in c.osts}


def mirror_domains_shared(cluster: ClusterState, allocation: Allocation) -> bool:
    """Whether two mirrors of ``allocation`` have an OST in the same failure domain."""
    dom = domain_of(cluster)
    seen: set[str] = set()
    for mirror in allocation.mirrors:
        mine = {dom.get(o, f"ost{o}") for o in copy_osts(mirror)}
        if mine & seen:
            return True
        seen |= mine
    return False


def busiest(cluster: ClusterState, osts: set[int]) -> float:
    """The busiest of ``osts`` and their OSSs, as the fraction of bandwidth live load takes."""
    by_index = {o.index: o for o in cluster.osts}
    worst = 0.0
    oss_load: dict[str, float] = {}
    for o in cluster.osts:
        oss_load[o.oss_id] = oss_load.get(o.oss_id, 0.0) + o.load
    for i in osts:
        o = by_index.get(i)
        if o is None:
            continue
        server = cluster.osses.get(o.oss_id)
        worst = max(worst, o.load / o.bandwidth)
        if server is not None:
            worst = max(worst, (oss_load[o.oss_id] + server.hidden_load) / server.bandwidth)
    return worst


def preferred_mirror(cluster: ClusterState, mirrors: tuple[tuple[Component, ...], ...]) -> int:
    """The copy whose busiest OST or OSS is least loaded (the first on ties)."""
    loads = [busiest(cluster, copy_osts(m)) for m in mirrors]
    return min(range(len(mirrors)), key=lambda k: (loads[k], k))


def _single(request: WriteRequest) -> WriteRequest:
    out = object.__new__(WriteRequest)
    out.__dict__.update(request.__dict__)
    out.__dict__["mirror_count"] = 1
    return out


def _bytes_per_ost(requests, allocations) -> dict[int, float]:
    out: dict[int, float] = {}
    for request, a in zip(requests, allocations):
        for ost, b in a.stripe_bytes(request.write_bytes):
            out[ost] = out.get(ost, 0.0) + max(b, 1)
    return out


def _candidates(cluster: ClusterState, pool: str | None) -> list[OST]:
    return [o for o in cluster.osts if o.takes_stripes and (pool is None or pool in o.pools)]


def domain_sets(cluster: ClusterState, dom: dict[int, str], m: int, rotation: int = 0) -> list[frozenset[str]]:
    """The domains dealt into ``m`` groups of about equal bandwidth (CEFT's primary and backup groups): by
    bandwidth, largest first (the list turned by ``rotation``, so that when the domains do not divide evenly
    the smaller group changes from file to file), in snake order."""
    bw: dict[str, float] = {}
    for o in cluster.osts:
        bw[dom[o.index]] = bw.get(dom[o.index], 0.0) + o.usable_bandwidth
    order = sorted(bw, key=lambda d: (-bw[d], d))
    if order:
        turn = rotation % len(order)
        order = order[turn:] + order[:turn]
    groups: list[set[str]] = [set() for _ in range(m)]
    for j, d in enumerate(order):
        turn, pos = divmod(j, m)
        groups[pos if turn % 2 == 0 else m - 1 - pos].add(d)
    return [frozenset(g) for g in groups]


def place_mirrored(policy: "Policy", cluster: ClusterState, requests: tuple[WriteRequest, ...]) -> "Placement":
    from iez.allocate.base import Placement, Refused

    dom = domain_of(cluster)
    outcomes: list = [None] * len(requests)
    singles = tuple(_single(r) for r in requests)
    if policy.mirror_domains:  # refuse up front what the pool's domains cannot hold
        for i, r in enumerate(requests):
            if r.mirror_count > 1:
                pools = {c.pool or r.pool for c in r.components} or {r.pool}
                for pool in pools:
                    have = {dom[o.index] for o in _candidates(cluster, pool)}
                    if len(have) < r.mirror_count:
                        where = f"pool {pool}" if pool else "the file system"
                        outcomes[i] = Refused(
                            f"mirror_count={r.mirror_count} needs as many failure domains (OSS, or the cluster "
                            f"description's domain), {where} has {len(have)} that take new stripes")
                        break
    n_domains = max(1, len(set(dom.values())))
    sets = {(m, t): domain_sets(cluster, dom, m, t)
            for m in {r.mirror_count for r in requests if r.mirror_count > 1}
            for t in range(n_domains if n_domains % m else 1)}
    offset: dict[int, int] = {}
    turn = [0] * len(requests)  # which group of domains each mirrored file's first copy takes
    for i, r in enumerate(requests):
        if r.mirror_count > 1 and outcomes[i] is None:
            turn[i] = offset.get(r.mirror_count, 0)
            offset[r.mirror_count] = turn[i] + 1
    copies: dict[int, list[tuple[Component, ...]]] = {}
    rounds = max((r.mirror_count for r in requests), default=1)
    for k in range(rounds):
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            if (k == 0 and outcomes[i] is None) or (r.mirror_count > k and i in copies):
                used = frozenset(o for m in copies.get(i, ()) for o in copy_osts(m))
                if r.mirror_count == 1:
                    key: tuple = (None,)
                elif policy.mirror_domains:  # files whose earlier copies took the same domains place together
                    m = r.mirror_count
                    partition = sets[(m, (turn[i] // m) % (n_domains if n_domains % m else 1))]
                    key = (partition[(k + turn[i]) % m], frozenset(dom[o] for o in used))
                else:
                    key = (frozenset(), used)
                groups.setdefault(key, []).append(i)
        for key, members in groups.items():
            tiers = [cluster] if key[0] is None else [cluster.with_osts(t) for t in _tiers(policy, cluster, dom, *key)]
            left, reason = members, ""
            for view in tiers:
                if not left:
                    break
                got = policy._place_copies(view, tuple(singles[i] for i in left))
                still, placed_now = [], []
                for i, outcome in zip(left, got.outcomes):
                    if isinstance(outcome, Refused):
                        still.append(i)
                        reason = outcome.reason
                    else:
                        copies.setdefault(i, []).append(copy_components(outcome))
                        if k == 0:
                            outcomes[i] = outcome
                        placed_now.append((singles[i], outcome))
                # the next call (another group, another tier, the next round) sees these bytes
                policy.carry(_bytes_per_ost([r for r, _ in placed_now], [a for _, a in placed_now]))
                left = still
            for i in left:
                r = requests[i]
                if r.mirror_count == 1:
                    outcomes[i] = Refused(reason)
                else:
                    outcomes[i] = Refused(f"mirror {k + 1} of {r.mirror_count}: the failure domains no other mirror "
                                          f"of the file uses cannot take it ({reason})")
                copies.pop(i, None)
    for i, mirrors in copies.items():
        if requests[i].mirror_count == 1:
            continue
        a = outcomes[i]
        ms = tuple(mirrors)
        outcomes[i] = Allocation(a.file, a.stripe_size, a.osts, a.policy, a.pool, a.components, a.note, ms,
                                 preferred_mirror(cluster, ms))
    return Placement(requests, tuple(outcomes))


def _tiers(policy: "Policy", cluster: ClusterState, dom: dict[int, str], group: frozenset[str],
           used: frozenset) -> list[list[OST]]:
    """The OST sets a copy is tried on, in order (see the module docstring); ``used``: the domains (iez) or OSTs
    (Lustre's allocators) the file's earlier copies hold."""
    if policy.mirror_domains:
        taken = used
        return [[o for o in cluster.osts if dom[o.index] in group and dom[o.index] not in taken],
                [o for o in cluster.osts if dom[o.index] not in taken]]
    if not used:
        return [list(cluster.osts)]
    by_index = {o.index: o for o in cluster.osts}
    servers = {by_index[o].oss_id for o in used if o in by_index}
    return [[o for o in cluster.osts if o.oss_id not in servers],
            [o for o in cluster.osts if o.index not in used],
            list(cluster.osts)]
