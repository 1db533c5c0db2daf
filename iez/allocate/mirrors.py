"""Mirrored files (Lustre FLR, seed 003's CEFT): each copy of a file in failure domains of its own.

Every copy is placed by the policy's own solver, a group of copies per call,
and the policy carries the bytes of earlier calls (:meth:`Policy.carry`), so
every copy costs write bandwidth and room like any other stripe: a file with
two mirrors writes its bytes twice, and iez balances all of them.

A *failure domain* is the cluster description's ``domain`` of an OSS (a rack,
a controller pair), else the OSS itself.

- **iez** (``mirror_domains``): the domains of the file's pool are dealt
  into ``m`` groups of about equal bandwidth (CEFT's primary and backup
  groups; an OST's bandwidth as its OSS lets it through) and copy ``k`` of a
  file goes to group ``(k + t) % m``, ``t`` turning from file to file so
  primaries spread over every group. All the copies bound for one group are
  placed together, groups of least bandwidth first (:func:`_place_in_groups`);
  a copy that does not fit its group takes any domain no other copy of the
  file uses; files without mirrors go last. A file whose pool has fewer
  domains than copies, or whose free domains cannot take a copy, is refused
  with the reason. When the batch is small enough for the batch repair, three
  other placements are tried and repaired alike (the domains of the whole
  file system dealt by their OSTs' reported bandwidth; in rounds, each copy on
  the domains no earlier copy of its file uses; the domains chosen file by
  file, :func:`_place_per_file`, where a copy at stripe count -1 takes every
  OST of its domains and a server too slow for it may be left out) and the
  one that refuses fewest files, then ends soonest, is kept. A file at -1 still
  refused whose copies each must take a whole domain gets room on the OSTs it
  needs by moving fixed-count objects of other copies within their own domains
  (:func:`_make_room`).
- **greedy** places its mirrored files itself (:mod:`iez.allocate.greedy`),
  every copy in failure domains of its own as well.
- **rr / qos** model Lustre's FLR (``lfs mirror create -N``, ``lfs setstripe
  -N``): the MDS allocates each mirror's objects with its usual allocator and,
  while it can, steers away from the OSTs that overlapping components of the
  other mirrors use and from their OSSs; when that leaves too few OSTs it tries
  again avoiding only those OSTs, and finally takes any OST. It knows OSSs, not
  racks or controller pairs, so a site's ``domain`` is only honoured through
  pools. Here: in rounds, round ``k`` placing every file's ``k+1``-th copy on
  the view without the other mirrors' OSSs, else without their OSTs, else the
  whole view.

The preferred mirror (Lustre's ``prefer`` flag, CEFT's hot-spot skipping) is
the copy whose busiest OST and OSS is least loaded in the live view.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import product
from typing import TYPE_CHECKING

import numpy as np

from iez.model import (
    ALL_OSTS,
    EOF_END,
    OST,
    Allocation,
    ClusterState,
    Component,
    WriteRequest,
    io_time,
    oss_loads,
    oss_usable_bandwidth,
    raid0_bytes,
)

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


def ost_busy(cluster: ClusterState) -> dict[int, float]:
    """Per OST, the larger of its own and its OSS's share of bandwidth that live load takes."""
    oss_load: dict[str, float] = {}
    for o in cluster.osts:
        oss_load[o.oss_id] = oss_load.get(o.oss_id, 0.0) + o.load
    out = {}
    for o in cluster.osts:
        server = cluster.osses.get(o.oss_id)
        out[o.index] = max(o.load / o.bandwidth, 0.0 if server is None else
                           (oss_load[o.oss_id] + server.hidden_load) / server.bandwidth)
    return out


def busiest(cluster: ClusterState, osts: set[int], busy: dict[int, float] | None = None) -> float:
    """The busiest of ``osts`` and their OSSs, as the fraction of bandwidth live load takes (``busy``: the
    :func:`ost_busy` of ``cluster``, when the caller asks about many sets)."""
    busy = ost_busy(cluster) if busy is None else busy
    return max((busy[i] for i in osts if i in busy), default=0.0)


def preferred_mirror(cluster: ClusterState, mirrors: tuple[tuple[Component, ...], ...],
                     busy: dict[int, float] | None = None) -> int:
    """The copy whose busiest OST or OSS is least loaded (the first on ties)."""
    busy = ost_busy(cluster) if busy is None else busy
    loads = [busiest(cluster, copy_osts(m), busy) for m in mirrors]
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


def domain_sets(cluster: ClusterState, dom: dict[int, str], m: int, rotation: int = 0,
                speed: dict[int, float] | None = None) -> list[frozenset[str]]:
    """The domains dealt into ``m`` groups of about equal bandwidth (CEFT's primary and backup groups): by
    bandwidth, largest first (the list turned by ``rotation``, so that when the domains do not divide evenly
    the smaller group changes from file to file), in snake order. ``speed``: each OST's bandwidth (default its
    usable bandwidth; iez passes what its OSS lets through, :func:`_ost_speed`)."""
    bw: dict[str, float] = {}
    for o in cluster.osts:
        bw[dom[o.index]] = bw.get(dom[o.index], 0.0) + (o.usable_bandwidth if speed is None else speed[o.index])
    order = sorted(bw, key=lambda d: (-bw[d], d))
    if order:
        turn = rotation % len(order)
        order = order[turn:] + order[:turn]
    return [frozenset(g) for g in _snake(order, m)]


def _snake(order: list, m: int) -> list[list]:
    """``order`` dealt into ``m`` groups in snake order (0, 1, .., m-1, m-1, .., 0, 0, ..)."""
    groups: list[list] = [[] for _ in range(m)]
    for j, d in enumerate(order):
        turn, pos = divmod(j, m)
        groups[pos if turn % 2 == 0 else m - 1 - pos].append(d)
    return groups


def place_mirrored(policy: "Policy", cluster: ClusterState, requests: tuple[WriteRequest, ...]) -> "Placement":
    from iez.allocate.base import Placement, Refused

    dom = domain_of(cluster)
    outcomes: list = [None] * len(requests)
    singles = tuple(_single(r) for r in requests)
    if policy.mirror_domains:  # refuse up front what the pool's domains cannot hold
        domains_in: dict[str | None, int] = {}
        for i, r in enumerate(requests):
            if r.mirror_count > 1:
                pools = {c.pool or r.pool for c in r.components} or {r.pool}
                for pool in pools:
                    if pool not in domains_in:
                        domains_in[pool] = len({dom[o.index] for o in _candidates(cluster, pool)})
                    have = domains_in[pool]
                    if have < r.mirror_count:
                        where = f"pool {pool}" if pool else "the file system"
                        outcomes[i] = Refused(
                            f"mirror_count={r.mirror_count} needs as many failure domains (OSS, or the cluster "
                            f"description's domain), {where} has {have} that take new stripes")
                        break
    placed: dict[tuple[int, int], Allocation] = {}  # (file, copy) -> that copy's layout
    failed: dict[int, str] = {}

    def place(view: ClusterState, items: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], str]:
        """Copies ``(file, k)`` on ``view`` in one call; the later calls see their bytes. Returns those refused."""
        got = policy._place_copies(view, tuple(singles[i] for i, _ in items))
        still, reason, now = [], "", []
        for item, outcome in zip(items, got.outcomes):
            if isinstance(outcome, Refused):
                still.append(item)
                reason = outcome.reason
            else:
                placed[item] = outcome
                now.append(item)
        policy.carry(_bytes_per_ost([singles[i] for i, _ in now], [placed[x] for x in now]))
        return still, reason

    def fail(i: int, k: int, reason: str) -> None:
        """Copy ``k`` of file ``i`` found no room: the file is refused and its other copies' bytes given back."""
        r = requests[i]
        failed[i] = reason if r.mirror_count == 1 else (
            f"mirror {k + 1} of {r.mirror_count}: the failure domains no other mirror of the file uses cannot "
            f"take it ({reason})")
        mine = [(i, j) for j in range(r.mirror_count) if (i, j) in placed]
        back = _bytes_per_ost([singles[i]] * len(mine), [placed.pop(x) for x in mine])
        policy.carry({ost: -b for ost, b in back.items()})

    if policy.mirror_domains:
        start = dict(getattr(policy, "carried", None) or {})
        _place_in_groups(policy, cluster, requests, outcomes, dom, placed, failed, place, fail)
        repair = getattr(policy, "repair_mirrored", None)
        if repair is not None and repair(cluster, requests, placed, dom):
            # The groups were placed one by one and repaired as a whole; a fixed partition of the domains may
            # still force a copy onto a slow server its group cannot avoid. Two other ways, repaired alike: the
            # domains dealt by the bandwidth their OSTs report whatever their OSS and pool, and in rounds (each
            # copy on the domains no earlier copy of its file uses); the best of the three is kept.
            oss_load_weight = getattr(policy, "oss_load_weight", 0.0)
            for other in ("plain groups", "rounds", "per file"):
                best, best_failed = dict(placed), dict(failed)
                placed.clear()
                failed.clear()
                policy.carried = dict(start)
                if other == "per file":
                    if not _place_per_file(policy, cluster, requests, outcomes, dom, placed, failed, place,
                                           start):
                        placed.update(best)
                        failed.update(best_failed)
                        continue
                elif other == "rounds":
                    _place_in_rounds(cluster, requests, outcomes, placed, failed, place, fail, dom)
                else:
                    _place_in_groups(policy, cluster, requests, outcomes, dom, placed, failed, place, fail,
                                     by_pool_speed=False)
                repair(cluster, requests, placed, dom)
                if _worse(cluster, requests, placed, failed, best, best_failed, oss_load_weight):
                    placed.clear()
                    placed.update(best)
                    failed.clear()
                    failed.update(best_failed)
        if failed:
            policy.carried = dict(start)  # the bytes of the placement kept, not of the last one tried
            policy.carry(_bytes_per_ost([singles[i] for i, _ in placed], list(placed.values())))
            _retry_on_own_domains(policy, cluster, requests, dom, placed, failed, place, fail)
        if failed:
            _make_room(policy, cluster, requests, dom, placed, failed, place)
    else:
        _place_in_rounds(cluster, requests, outcomes, placed, failed, place, fail)
    busy = ost_busy(cluster)
    for i, r in enumerate(requests):
        if outcomes[i] is not None:
            continue
        if i in failed:
            outcomes[i] = Refused(failed[i])
        elif r.mirror_count == 1:
            outcomes[i] = placed[(i, 0)]
        else:
            a = placed[(i, 0)]
            ms = tuple(copy_components(placed[(i, k)]) for k in range(r.mirror_count))
            outcomes[i] = Allocation(a.file, a.stripe_size, a.osts, a.policy, a.pool, a.components, a.note, ms,
                                     preferred_mirror(cluster, ms, busy))
    return Placement(requests, tuple(outcomes))


def _held(placed: dict, i: int, copies: int) -> set[int]:
    """The OSTs the placed copies (of the first ``copies``) of file ``i`` hold."""
    return {o for k in range(copies) if (i, k) in placed for o in copy_osts(copy_components(placed[(i, k)]))}


def _ost_speed(cluster: ClusterState, oss_load_weight: float) -> dict[int, float]:
    """Bytes/s a job can stream to each OST, its OSS's usable bandwidth shared out in proportion to its OSTs'."""
    load = oss_loads(cluster)
    ost_sum: dict[str, float] = {}
    for o in cluster.osts:
        ost_sum[o.oss_id] = ost_sum.get(o.oss_id, 0.0) + o.usable_bandwidth
    out = {}
    for o in cluster.osts:
        server = cluster.osses.get(o.oss_id)
        cap = oss_usable_bandwidth(server, load[o.oss_id], oss_load_weight) if server is not None else np.inf
        out[o.index] = o.usable_bandwidth * min(1.0, cap / ost_sum[o.oss_id])
    return out


def _plan(cluster: ClusterState, dom: dict[int, str], speed: dict[int, float], demand: dict[frozenset[str], int],
          fill_cap: float) -> dict[frozenset[str], dict[int, float]] | None:
    """Where the copies bound for each group of domains would go if bytes were fluid: the bytes of each group
    on each OST of its domains such that every domain finishes by the least common time, within room (an LP).
    Groups that share domains are placed one after another, and the groups still to come hold their share of
    this plan meanwhile, so an earlier group does not take the bandwidth a later one has nowhere else to find.
    None when no plan fits the room."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    domains = sorted({d for g in demand for d in g})
    at = {d: k for k, d in enumerate(domains)}
    bw = np.zeros(len(domains))
    room = np.zeros(len(domains))
    for o in cluster.osts:
        if o.takes_stripes and dom[o.index] in at:
            bw[at[dom[o.index]]] += speed[o.index]
            room[at[dom[o.index]]] += o.room_bytes(fill_cap)
    pairs = [(g, d) for g in demand for d in sorted(g)]
    n = len(pairs)
    scale = max(demand.values()) or 1  # bytes in units of the largest demand: HiGHS prefers numbers near 1
    rows, cols, vals = [], [], []
    for j, (g, d) in enumerate(pairs):
        rows += [at[d], len(domains) + at[d]]
        cols += [j, j]
        vals += [1.0, 1.0]
    rows += range(len(domains))
    cols += [n] * len(domains)
    vals += (-bw / scale).tolist()  # x (in units of scale bytes) <= T bw / scale
    a_ub = coo_matrix((vals, (rows, cols)), shape=(2 * len(domains), n + 1))
    b_ub = np.concatenate((np.zeros(len(domains)), room / scale))
    index = {g: k for k, g in enumerate(demand)}
    a_eq = coo_matrix(([1.0] * n, ([index[g] for g, _ in pairs], range(n))), shape=(len(demand), n + 1))
    b_eq = np.array([demand[g] / scale for g in demand])
    cost = np.zeros(n + 1)
    cost[n] = 1.0
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
    if not res.success:
        return None
    share: dict[str, list[tuple[int, float]]] = {d: [] for d in domains}  # a domain's bytes go by OST speed
    for o in cluster.osts:
        if o.takes_stripes and dom[o.index] in at and bw[at[dom[o.index]]] > 0:
            share[dom[o.index]].append((o.index, speed[o.index] / bw[at[dom[o.index]]]))
    out: dict[frozenset[str], dict[int, float]] = {g: {} for g in demand}
    for (g, d), x in zip(pairs, res.x[:n] * scale):
        if x > 0:
            out[g].update((o, x * f) for o, f in share[d])
    return out


def _place_in_groups(policy: "Policy", cluster: ClusterState, requests, outcomes: list, dom: dict[int, str],
                     placed: dict, failed: dict, place, fail, by_pool_speed: bool = True) -> None:
    """iez: every copy goes to the group of domains its file's turn gives it (:func:`domain_sets`), all the
    copies bound for one group in one call, so the solver balances them together. Groups with the least
    bandwidth go first: their copies have nowhere else to go, while a wider group's copies still spread
    around what the narrower ones left (placing copy 0 of every file first would fix a narrow group's load
    before the copies it must also take are known). A copy its group cannot hold then takes any domain no
    other copy of its file uses; files without mirrors go last, anywhere."""
    speed = _ost_speed(cluster, getattr(policy, "oss_load_weight", 0.0))
    # Each file's domains are those of its pool's OSTs (a pool on a few servers would otherwise see its
    # domains dealt to one group, leaving the other copies none), weighed by the speed their OSSs let through.
    views: dict[str | None, ClusterState] = {}
    sets: dict[tuple[str | None, int, int], list[frozenset[str]]] = {}
    turns: dict[tuple[str | None, int], int] = {}
    offset: dict[tuple[str | None, int], int] = {}
    bound_for: dict[frozenset[str], list[tuple[int, int]]] = {}
    for i, r in enumerate(requests):
        m = r.mirror_count
        if m == 1 or outcomes[i] is not None:
            continue
        pools = {c.pool or r.pool for c in r.components} or {r.pool}
        pool = pools.pop() if len(pools) == 1 and by_pool_speed else None
        if pool not in views:
            views[pool] = cluster.with_osts(_candidates(cluster, pool)) if pool else cluster
        key = (pool, m)
        if key not in turns:
            n_domains = max(1, len({dom[o.index] for o in views[pool].osts}))
            turns[key] = n_domains if n_domains % m else 1
        turn = offset.get(key, 0)  # which group of domains the file's first copy takes
        offset[key] = turn + 1
        t = (turn // m) % turns[key]
        if (pool, m, t) not in sets:
            sets[(pool, m, t)] = domain_sets(views[pool], dom, m, t, speed if by_pool_speed else None)
        partition = sets[(pool, m, t)]
        for k in range(m):
            bound_for.setdefault(partition[(k + turn) % m], []).append((i, k))
    bandwidth: dict[str, float] = {}
    for o in cluster.osts:
        bandwidth[dom[o.index]] = bandwidth.get(dom[o.index], 0.0) + speed[o.index]
    order = sorted(bound_for, key=lambda g: (sum(bandwidth[d] for d in g), len(g), sorted(g)))
    overlap = sum(len(g) for g in order) > len(set().union(*order)) if order else False
    plan = _plan(cluster, dom, speed, {g: sum(requests[i].write_bytes for i, _ in bound_for[g]) for g in order},
                 getattr(policy, "fill_cap", None) or cluster.fill_cap) if overlap else None
    if plan is not None:  # every group's share is held until the group itself is placed
        for group in order:
            policy.carry(plan[group])
    left: list[tuple[int, int]] = []
    for group in order:
        if plan is not None:
            policy.carry({o: -x for o, x in plan[group].items()})
        still, _ = place(cluster.with_osts([o for o in cluster.osts if dom[o.index] in group]), bound_for[group])
        left += still
    for k in sorted({k for _, k in left}):  # a copy its group could not hold: any domain its file leaves free
        by_taken: dict[frozenset[str], list[int]] = {}
        for i, _ in sorted(x for x in left if x[1] == k and x[0] not in failed):
            taken = frozenset(dom[o] for o in _held(placed, i, requests[i].mirror_count))
            by_taken.setdefault(taken, []).append(i)
        for taken, files in by_taken.items():
            still, reason = place(cluster.with_osts([o for o in cluster.osts if dom[o.index] not in taken]),
                                  [(i, k) for i in files])
            for i, _ in still:
                fail(i, k, reason)
    plain = [(i, 0) for i, r in enumerate(requests) if r.mirror_count == 1 and outcomes[i] is None]
    if plain:
        still, reason = place(cluster, plain)
        for i, _ in still:
            fail(i, 0, reason)


#: Splits of a refused file's domains placed (those whose slowest copy alone ends soonest) before it stays refused.
MAX_SPLITS = 16
#: Files with more failure domains than this in their pool are not retried (the splits are enumerated).
MAX_SPLIT_DOMAINS = 8


def _retry_on_own_domains(policy: "Policy", cluster: ClusterState, requests, dom: dict[int, str], placed: dict,
                          failed: dict, place, fail) -> None:
    """A mirrored file refused because a copy found no room in the domains its group (or its earlier copies)
    left it gets domains of its own: the splits of its pool's domains into one disjoint set per copy (a domain
    may be left out), each with as many OSTs as a copy's widest component needs, the :data:`MAX_SPLITS` whose
    slowest copy alone would end soonest (the speed OSSs let through) placed in turn; the split whose placement
    ends soonest is kept."""
    from itertools import product

    speed = _ost_speed(cluster, getattr(policy, "oss_load_weight", 0.0))
    for i in sorted(failed):
        r = requests[i]
        m = r.mirror_count
        pools = {c.pool or r.pool for c in r.components} or {r.pool}
        if m < 2 or len(pools) != 1:
            continue
        pool = pools.pop()
        per: dict[str, list[float]] = {}
        for o in _candidates(cluster, pool):
            per.setdefault(dom[o.index], []).append(speed[o.index])
        domains = sorted(per)
        if len(domains) > MAX_SPLIT_DOMAINS:
            continue
        need = max(1 if c.stripe_count < 0 else c.stripe_count for c in r.components) if r.components else \
            (1 if r.stripe_count < 0 else r.stripe_count)
        every = r.stripe_count < 0 and not r.components  # a copy at -1 takes every OST of its domains

        def estimate(group: list[str]) -> float:
            """Seconds a copy on ``group`` would take alone: at -1 its slowest OST holds an equal share, else its
            ``need`` fastest OSTs share the bytes."""
            speeds = sorted((x for d in group for x in per[d]), reverse=True)
            if every:
                return r.write_bytes / max(len(speeds) * speeds[-1], 1e-300)
            return r.write_bytes / max(sum(speeds[:need]), 1e-300)

        splits = []
        for assign in product(range(m + 1), repeat=len(domains)):
            sets = [[d for d, a in zip(domains, assign) if a == k] for k in range(m)]
            if all(sum(len(per[d]) for d in group) >= need for group in sets) and \
                    sets == sorted(sets, key=lambda g: domains.index(g[0])):  # one order of the same sets
                splits.append((max(estimate(group) for group in sets), sets))
        reason = failed[i]

        def attempt(sets: list[list[str]]) -> bool:
            del failed[i]
            for k, group in enumerate(sets):
                still, why = place(cluster.with_osts([o for o in cluster.osts if dom[o.index] in group]), [(i, k)])
                if still:
                    fail(i, k, why)
                    failed[i] = reason
                    return False
            return True

        best: tuple[float, list[list[str]]] | None = None
        for _, sets in sorted(splits)[:MAX_SPLITS]:
            if attempt(sets):
                took = _copies_time(cluster, requests, placed, getattr(policy, "oss_load_weight", 0.0))
                if best is None or took < best[0]:
                    best = (took, sets)
                fail(i, 0, reason)  # given back: the best split is placed again below
                failed[i] = reason
        if best is not None:
            attempt(best[1])


def _make_room(policy: "Policy", cluster: ClusterState, requests, dom: dict[int, str], placed: dict,
               failed: dict, place) -> None:
    """A mirrored file at stripe count -1 with as many copies as its pool has failure domains has no choice: each
    copy takes every healthy OST of one domain. Refused because one of those OSTs has no room left, it gets the
    room when objects of other files' copies at a fixed stripe count can move off that OST to another of their
    copy's own domains (family seed 149: four small files at -1 refused on a server whose fastest OST the larger
    files had filled; a placement holding them all exists). The moves are undone if the file still does not fit."""

    cap = getattr(policy, "fill_cap", None) or cluster.fill_cap
    rules = policy.stripe_rules
    for i in sorted(failed, key=lambda i: (requests[i].write_bytes, i)):
        r = requests[i]
        if r.mirror_count < 2 or r.components or r.stripe_count != ALL_OSTS:
            continue
        pool = r.pool
        healthy = [o for o in _candidates(cluster, pool) if o.state != "degraded"]
        domains = sorted({dom[o.index] for o in healthy})
        if len(domains) != r.mirror_count:
            continue
        room = {o.index: float(o.room_bytes(cap)) for o in cluster.osts}
        for (j, _), a in placed.items():
            for ost, b in a.stripe_bytes(requests[j].write_bytes):
                room[ost] -= b
        need: dict[int, float] = {}
        for d in domains:
            osts = sorted((o.index for o in healthy if dom[o.index] == d), key=lambda o: -room[o])
            objects = sorted(raid0_bytes(r.write_bytes, r.stripe_size or rules.size(r.write_bytes, len(osts)),
                                         len(osts)), reverse=True)
            need.update((o, b) for o, b in zip(osts, objects))
        moves: list[tuple[tuple[int, int], Allocation, dict[int, float]]] = []  # to undo
        stuck = False
        for ost in sorted(need, key=lambda o: room[o] - need[o]):
            for key in sorted(placed, key=lambda x: (-requests[x[0]].write_bytes, x)):
                if room[ost] >= need[ost]:
                    break
                j, k = key
                a = placed[key]
                if ost not in a.osts or a.components or requests[j].stripe_count == ALL_OSTS:
                    continue
                others = {dom[o] for q in range(requests[j].mirror_count) if q != k and (j, q) in placed
                          for o in placed[(j, q)].osts}
                b = float(raid0_bytes(requests[j].write_bytes, a.stripe_size, len(a.osts))[a.osts.index(ost)])
                pool_j = requests[j].pool
                targets = [o for o in _candidates(cluster, pool_j) if o.state != "degraded"
                           and o.index not in a.osts and dom[o.index] not in others
                           and room[o.index] - need.get(o.index, 0.0) >= b]
                if not targets or b <= 0:
                    continue
                to = max(targets, key=lambda o: (room[o.index] - need.get(o.index, 0.0)) / max(
                    o.usable_bandwidth, 1e-300)).index
                moves.append((key, a, {ost: -b, to: b}))
                placed[key] = Allocation(a.file, a.stripe_size, tuple(to if o == ost else o for o in a.osts),
                                         a.policy, a.pool, (), a.note)
                policy.carry({ost: -b, to: b})
                room[ost] += b
                room[to] -= b
            if room[ost] < need[ost]:
                stuck = True
                break
        if not stuck:
            reason = failed.pop(i)
            got = []
            for k, d in enumerate(domains):
                view = cluster.with_osts([o for o in cluster.osts if dom[o.index] == d])
                still, _ = place(view, [(i, k)])
                if still:
                    failed[i] = reason
                    break
                got.append((i, k))
            if i not in failed:
                continue
            back = _bytes_per_ost([_single(r)] * len(got), [placed.pop(x) for x in got])
            policy.carry({o: -b for o, b in back.items()})
        for key, a, delta in reversed(moves):
            placed[key] = a
            policy.carry({o: -b for o, b in delta.items()})


#: Splits of a pool's domains into one disjoint set per copy enumerated per file by :func:`_place_per_file`
#: ((copies + 1) ** domains assignments); past it, the splits of :func:`_dealt_splits`.
MAX_PER_FILE_SPLITS = 6561


@lru_cache(maxsize=64)
def _splits(n_domains: int, m: int) -> np.ndarray:
    """Every split of ``n_domains`` domains into ``m`` disjoint non-empty sets (a domain may be in none), each set
    as the bit mask of its domains less one (its row in :func:`_all_splits`), copies unordered: shape (splits, m)."""
    out = set()
    for assign in product(range(m + 1), repeat=n_domains):
        masks = [0] * m
        for d, a in enumerate(assign):
            if a < m:
                masks[a] |= 1 << d
        if all(masks):
            out.add(tuple(sorted(masks)))
    return np.array(sorted(out), dtype=np.int64).reshape(-1, m) - 1


@lru_cache(maxsize=64)
def _all_splits(n_domains: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Every non-empty set of ``n_domains`` domains (rows of a set x domain matrix) and every split
    (:func:`_splits`, rows of set indices)."""
    subsets = np.arange(1, 1 << n_domains, dtype=np.int64)
    return (subsets[:, None] >> np.arange(n_domains)[None, :]) & 1 > 0, _splits(n_domains, m)


def _dealt_splits(order: list[int], n_domains: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Splits to try when the domains are too many to enumerate: for t = m .. all, the ``t`` first domains of
    ``order`` (best for the file first) dealt into ``m`` sets in snake order. Same shapes as :func:`_all_splits`."""
    subsets: dict[tuple[int, ...], int] = {}
    splits = []
    for t in range(m, n_domains + 1):
        splits.append([subsets.setdefault(tuple(sorted(g)), len(subsets)) for g in _snake(order[:t], m)])
    member = np.zeros((len(subsets), n_domains), dtype=bool)
    for g, k in subsets.items():
        member[k, list(g)] = True
    return member, np.array(splits, dtype=np.int64)


@lru_cache(maxsize=4096)
def _objects_desc(write_bytes: int, stripe_size: int, count: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A copy's RAID-0 objects, fullest first, and the stripe position of each (stable)."""
    objects = raid0_bytes(write_bytes, stripe_size, count)
    order = sorted(range(count), key=lambda k: -objects[k])
    return tuple(objects[k] for k in order), tuple(order)


def _place_per_file(policy: "Policy", cluster: ClusterState, requests, outcomes: list, dom: dict[int, str],
                    placed: dict, failed: dict, place, carried: dict) -> bool:
    """iez, the failure domains chosen file by file: the mirrored files, largest first, each on the split of its
    pool's domains into one disjoint set per copy (a domain may be left out of every copy) whose slowest copy
    would end soonest given what the earlier files placed, then the lesser sum; each copy's objects, fullest
    first, to the OSTs of its set that finish them soonest (the speed each OSS lets through). A copy at stripe
    count -1 takes every OST of its domains, as an unmirrored file at -1 takes every OST of its pool, so a
    server too slow for the file is left out as a whole domain, never as single OSTs of a domain it uses.
    Every split is tried while there are at most :data:`MAX_PER_FILE_SPLITS`, else those of
    :func:`_dealt_splits`. Files without mirrors go last, by the policy's solver. False (nothing placed) when a
    mirrored file has components."""
    todo = [i for i, r in enumerate(requests) if r.mirror_count > 1 and outcomes[i] is None]
    pools: dict[str | None, list[OST]] = {}
    for i in todo:
        r = requests[i]
        if r.components:
            return False
        if r.pool not in pools:
            pools[r.pool] = [o for o in _candidates(cluster, r.pool) if o.state != "degraded"]
    cap = getattr(policy, "fill_cap", None) or cluster.fill_cap
    speed_of = _ost_speed(cluster, getattr(policy, "oss_load_weight", 0.0))
    at = {o.index: k for k, o in enumerate(cluster.osts)}
    load = np.zeros(len(cluster.osts))
    for ost, b in carried.items():
        if ost in at:
            load[at[ost]] += b
    room = np.array([o.room_bytes(cap) for o in cluster.osts], dtype=float) - load
    speed = np.array([max(speed_of[o.index], 1e-300) for o in cluster.osts])
    reported = np.array([max(o.usable_bandwidth, 1e-300) for o in cluster.osts])
    views: dict[str | None, tuple[np.ndarray, np.ndarray, int]] = {}  # OST positions, their domain, domains
    for pool, osts in pools.items():
        names = sorted({dom[o.index] for o in osts})
        views[pool] = (np.array([at[o.index] for o in osts], dtype=np.int64),
                       np.array([names.index(dom[o.index]) for o in osts], dtype=np.int64), len(names))
    rules = policy.stripe_rules
    for i in sorted(todo, key=lambda i: (-requests[i].write_bytes, i)):
        r = requests[i]
        m = r.mirror_count
        pos, code, n_domains = views[r.pool]
        if n_domains < m or m * max(r.stripe_count, 1) > len(pos):
            failed[i] = (f"mirror_count={m}: the pool's {len(pos)} healthy OSTs in {n_domains} failure domains "
                         "cannot hold a copy per domain set")
            continue
        if (m + 1) ** n_domains <= MAX_PER_FILE_SPLITS:
            sets, splits = _all_splits(n_domains, m)
        else:  # domains by how soon their slowest OST (-1: every OST takes an object), else their fastest, ends
            count = len(pos) if r.stripe_count < 0 else r.stripe_count
            b = _objects_desc(r.write_bytes, r.stripe_size or rules.size(r.write_bytes, count), count)[0][0]
            orders = []
            # by the speed each OSS lets through, and by what the OSTs report (a server whose OSS caps its
            # OSTs may still end a copy soonest: family seed 58 of 16-64 servers, 109 s -> 82 s, greedy 84 s)
            for rate in (speed[pos], reported[pos]):
                ends = (load[pos] + b) / rate
                worst = np.full(n_domains, -np.inf if r.stripe_count < 0 else np.inf)
                (np.maximum if r.stripe_count < 0 else np.minimum).at(worst, code, ends)
                orders.append(np.argsort(worst, kind="stable").tolist())
            sets, splits = _dealt_splits(orders[0], n_domains, m)
            if orders[1] != orders[0]:
                more_sets, more = _dealt_splits(orders[1], n_domains, m)
                sets, splits = np.vstack((sets, more_sets)), np.vstack((splits, more + len(sets)))
        member = sets[:, code]  # set x OST
        widths = member.sum(axis=1)
        every = r.stripe_count < 0
        shapes = {}  # a copy's OST count -> (stripe size, objects fullest first, their stripe positions)
        for c in (set(widths.tolist()) if every else {r.stripe_count}):
            size = r.stripe_size or rules.size(r.write_bytes, c)
            shapes[c] = (size, *_objects_desc(r.write_bytes, size, c))
        widest = max(shapes)
        objects = np.zeros((len(member), len(pos)))  # per subset, the objects its OSTs take in order
        for c, (_, objs, _) in shapes.items():
            rows = widths == c if every else widths >= c
            objects[rows, :c] = objs
        fullest = shapes[min(shapes)][1][0] if every else shapes[widest][1][0]
        key = (load[pos] + fullest) / speed[pos]
        if not every:  # an OST without room for the fullest object is no candidate
            key = np.where(room[pos] >= fullest, key, np.inf)
        order = np.argsort(key, kind="stable")
        ranked = member[:, order] & np.isfinite(key[order])[None, :]
        rank = np.cumsum(ranked, axis=1) - 1
        got = np.where(ranked, np.take_along_axis(objects, np.clip(rank, 0, len(pos) - 1), axis=1), 0.0)
        slot = pos[order]
        finish = np.where(got > 0, (load[slot] + got) / speed[slot], 0.0)
        short = (ranked.sum(axis=1) < (widths if every else r.stripe_count)) | \
            (ranked & (got > room[slot])).any(axis=1)
        score = np.where(short, np.inf, finish.max(axis=1))
        total = np.where(short, np.inf, finish.sum(axis=1))
        worst = score[splits].max(axis=1)
        pick = int(np.lexsort((total[splits].sum(axis=1), worst))[0])
        if not np.isfinite(worst[pick]):
            failed[i] = (f"mirror_count={m}: no split of the pool's failure domains gives every copy room for its "
                         "stripe objects")
            continue
        for k, subset in enumerate(splits[pick].tolist()):
            count = int(widths[subset]) if every else r.stripe_count
            size, objs, stripe_at = shapes[count]
            chosen = slot[ranked[subset]][:count]
            layout = [0] * count
            for j, where in enumerate(chosen.tolist()):
                layout[stripe_at[j]] = cluster.osts[where].index
                load[where] += objs[j]
                room[where] -= objs[j]
            placed[(i, k)] = Allocation(r.file, size, tuple(layout), policy.name, r.pool)
    policy.carry(_bytes_per_ost([_single(requests[i]) for i, _ in placed], list(placed.values())))
    plain = [(i, 0) for i, r in enumerate(requests) if r.mirror_count == 1 and outcomes[i] is None]
    if plain:
        still, reason = place(cluster, plain)
        for i, _ in still:
            failed[i] = reason
    return True


def _worse(cluster: ClusterState, requests, placed: dict, failed: dict, other: dict, other_failed: dict,
           oss_load_weight: float) -> bool:
    """Whether the copies ``placed`` refuse more files than ``other``, or as many and take longer (the modelled
    I/O time of every copy's bytes)."""
    if len(failed) != len(other_failed):
        return len(failed) > len(other_failed)
    return _copies_time(cluster, requests, placed, oss_load_weight) > \
        _copies_time(cluster, requests, other, oss_load_weight) * (1 + 1e-9)


def _copies_time(cluster: ClusterState, requests, copies: dict, oss_load_weight: float) -> float:
    """The modelled I/O time of every placed copy's bytes."""
    per_ost: dict[int, float] = {}
    for (i, _), a in copies.items():
        for ost, b in a.stripe_bytes(requests[i].write_bytes):
            per_ost[ost] = per_ost.get(ost, 0.0) + b
    return io_time(cluster, per_ost, oss_load_weight)


def _place_in_rounds(cluster: ClusterState, requests, outcomes: list, placed: dict, failed: dict, place,
                     fail, dom: dict[int, str] | None = None) -> None:
    """Lustre's FLR (rr, qos): round ``k`` places the ``k+1``-th copy, files whose earlier copies hold the same
    OSTs together, on the view without those OSTs' servers, else without those OSTs, else the whole view.
    With ``dom`` (iez), only on the view without the failure domains of those OSTs."""
    by_index = {o.index: o for o in cluster.osts}
    for k in range(max((r.mirror_count for r in requests), default=1)):
        by_used: dict[frozenset[int], list[int]] = {}
        for i, r in enumerate(requests):
            if outcomes[i] is None and i not in failed and r.mirror_count > k:
                used = frozenset(_held(placed, i, k))
                by_used.setdefault(used, []).append(i)
        for used, files in by_used.items():
            servers = {by_index[o].oss_id for o in used if o in by_index}
            if dom is not None:
                taken = {dom[o] for o in used if o in dom}
                tiers = [[o for o in cluster.osts if dom[o.index] not in taken]]
            else:
                tiers = [[o for o in cluster.osts if o.oss_id not in servers],
                         [o for o in cluster.osts if o.index not in used], list(cluster.osts)] if used else \
                    [list(cluster.osts)]
            left, reason = [(i, k) for i in files], ""
            for view in tiers:
                if left:
                    left, reason = place(cluster.with_osts(view), left)
            for i, _ in left:
                fail(i, k, reason)
