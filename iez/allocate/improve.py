"""Batch-level repair: move stripe objects off the busiest OST or OSS while that shortens the batch (issue 29).

Why: ``iez`` solves a batch class by class (largest objects first), each class
optimally given the bytes the earlier ones placed, but blind to the classes
still to come. A class with no choice (stripe count ``-1``: every OST) or
little (8 stripes on 9 OSTs) placed late can land its bytes on a server the
earlier classes had already filled; the batch then runs at that server's
pace although other servers have time to spare. Class-by-class optimality is
not batch optimality; this pass looks at the batch as a whole, every pool's
parts together, in the same model (exact bytes of every object, OST and OSS
usable bandwidths, the fill cap, the bytes ``carried`` from earlier rounds).

The search: take the resource (OST or OSS) that finishes last; try its
objects, largest first; move the first one that some other OST can take and
still finish (OST and OSS) strictly before the current end, to the OST that
then finishes soonest. When no single object can move, try swapping one of
its objects with a smaller object of another file elsewhere. Repeat until
neither helps or the work budget is spent. Every move keeps the constraints of
the first solve: a part's objects on distinct OSTs of its pool, within each
OST's room under the fill cap, never onto a degraded OST. The batch's modelled
time never increases (the end is lowered or the number of resources at the end
reduced, one move at a time).

Mirrored files (:func:`improve_mirrored`): the same search over every copy of
every file of the batch, a move also keeping each copy in failure domains no
other copy of its file uses (iez places the copies group of domains by group,
each group blind to the others' load).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from iez.allocate.base import Refused, part_objects
from iez.allocate.servers import server_arrays
from iez.model import (
    EOF_END,
    Allocation,
    ClusterState,
    Component,
    WriteRequest,
    component_stripe_bytes,
)

#: Moves or swaps tried (each one a vectorised pass over the OSTs or the objects) before the search stops.
MAX_STEPS = 4000
#: A move must end the destination this much (relative) before the current end.
_GAIN = 1e-9


class _Search:
    """The OSTs that take stripes, their bandwidths, room and bytes, and every object of the batch.

    An object belongs to a *set* (a part, or a component of one copy: its objects sit on distinct OSTs), may
    go to the OSTs of its ``mask`` (pool, healthy), and, for a copy of a mirrored file, to no failure domain
    another copy of its file (``family``) uses."""

    def __init__(self, cluster: ClusterState, carried: dict, fill_cap: float, oss_load_weight: float,
                 dom: dict[int, str] | None = None):
        osts = [o for o in cluster.osts if o.takes_stripes]
        view = cluster.with_osts(osts)
        self.n = len(osts)
        self.pos = {o.index: k for k, o in enumerate(osts)}
        self.index = np.array([o.index for o in osts], dtype=np.int64)
        self.bw = np.array([o.usable_bandwidth for o in osts], dtype=float)
        _, self.oss, self.oss_bw = server_arrays(osts, view.osses, oss_load_weight)
        self.healthy = np.array([o.state != "degraded" for o in osts], dtype=bool)
        self.placed = np.array([float(carried.get(int(i), 0.0)) for i in self.index])
        self.room = np.array([o.room_bytes(fill_cap) for o in osts], dtype=float) - self.placed
        doms = dict.fromkeys((dom or {}).get(int(i), f"ost{i}") for i in self.index)
        dcode = {d: k for k, d in enumerate(doms)}
        self.dom = np.array([dcode[(dom or {}).get(int(i), f"ost{i}")] for i in self.index], dtype=np.int64)
        self.masks: dict[object, np.ndarray] = {}
        self.osts = osts
        self.obj: list[tuple[int, int, int, int, int, int]] = []  # set, mask, at, bytes, family, copy

    def mask(self, pool: str | None) -> int:
        """The id of the healthy OSTs of ``pool``."""
        if pool not in self.masks:
            self.masks[pool] = np.array([pool is None or pool in o.pools for o in self.osts], dtype=bool) & \
                self.healthy
        return list(self.masks).index(pool)

    def add(self, group: int, pool: str | None, ost: int, size: int, family: int = -1, copy: int = 0) -> None:
        self.obj.append((group, self.mask(pool), self.pos[ost], size, family, copy))

    def run(self, max_steps: int) -> np.ndarray | None:
        """Search; the new OST position of every object, or None when nothing moved."""
        if not self.obj:
            return None
        group, mask_id, at, size_of, family, copy = (np.array(c) for c in zip(*self.obj))
        at = at.astype(np.int64)
        size_of = size_of.astype(float)
        masks = list(self.masks.values())
        placed, room, oss, bw, oss_bw, dom = self.placed, self.room, self.oss, self.bw, self.oss_bw, self.dom
        np.add.at(placed, at, size_of)
        room -= np.bincount(at, weights=size_of, minlength=self.n)
        oss_placed = np.bincount(oss, weights=placed, minlength=len(oss_bw))
        holds: dict[int, set[int]] = {}
        for g, a in zip(group.tolist(), at.tolist()):
            holds.setdefault(g, set()).add(a)
        doms: dict[int, dict[int, dict[int, int]]] = {}  # family -> copy -> domain -> objects there
        for f, c, a in zip(family.tolist(), copy.tolist(), at.tolist()):
            if f >= 0:
                used = doms.setdefault(f, {}).setdefault(c, {})
                used[int(dom[a])] = used.get(int(dom[a]), 0) + 1
        moved = False

        def allowed(k: int) -> np.ndarray:
            """OSTs object ``k`` may sit on (room aside): its mask, not its set's other OSTs, no domain of
            another copy of its file."""
            ok = masks[mask_id[k]].copy()
            ok[list(holds[int(group[k])] - {int(at[k])})] = False
            f = int(family[k])
            if f >= 0:
                taken = [d for c, used in doms[f].items() if c != copy[k] for d, n in used.items() if n]
                if taken:
                    ok &= ~np.isin(dom, taken)
            return ok

        def move(k: int, q: int) -> None:
            nonlocal moved
            p, b = int(at[k]), size_of[k]
            placed[p] -= b
            placed[q] += b
            oss_placed[oss[p]] -= b
            oss_placed[oss[q]] += b
            room[p] += b
            room[q] -= b
            holds[int(group[k])].discard(p)
            holds[int(group[k])].add(q)
            if family[k] >= 0:
                used = doms[int(family[k])][int(copy[k])]
                used[int(dom[p])] -= 1
                used[int(dom[q])] = used.get(int(dom[q]), 0) + 1
            at[k] = q
            moved = True

        for _ in range(max_steps):
            t_ost = placed / bw
            t_oss = oss_placed / oss_bw
            end = max(float(t_ost.max()), float(t_oss.max()))
            if end <= 0:
                break
            limit = end * (1 - _GAIN)
            if float(t_oss.max()) >= float(t_ost.max()):
                server = int(np.argmax(t_oss))
                on = oss[at] == server
            else:
                server = -1
                on = at == int(np.argmax(t_ost))
            sources = np.flatnonzero(on & (size_of > 0))
            sources = sources[np.argsort(-size_of[sources], kind="stable")]
            if not self._move_one(sources, at, size_of, allowed, room, placed, oss_placed, server, limit, move) and \
                    not self._swap_one(sources, group, at, size_of, allowed, room, placed, oss_placed, server, limit,
                                       move):
                break
        return at if moved else None

    def _move_one(self, sources, at, size_of, allowed, room, placed, oss_placed, server: int, limit: float,
                  move) -> bool:
        """Move the largest object of ``sources`` that another OST finishes before ``limit`` (the soonest such)."""
        oss, bw, oss_bw = self.oss, self.bw, self.oss_bw
        for k in sources.tolist():
            b = size_of[k]
            p = int(at[k])
            ok = allowed(k) & (room >= b)
            ok[p] = False
            if server >= 0:
                ok &= oss != server
            if not ok.any():
                continue
            gain = np.where(oss == oss[p], 0.0, b)  # the destination's OSS gains b unless it is the source's own
            finish = np.maximum((placed + b) / bw, (oss_placed[oss] + gain) / oss_bw[oss])
            finish[~ok] = np.inf
            q = int(np.argmin(finish))
            if finish[q] < limit:
                move(k, q)
                return True
        return False

    def _swap_one(self, sources, group, at, size_of, allowed, room, placed, oss_placed, server: int, limit: float,
                  move) -> bool:
        """Swap an object of ``sources`` with a smaller one of another set elsewhere when both ends then finish
        before ``limit`` (the pair that leaves the destination soonest done)."""
        oss, bw, oss_bw = self.oss, self.bw, self.oss_bw
        on_source = np.zeros(len(at), dtype=bool)
        on_source[sources] = True
        for k in sources.tolist()[:64]:
            a = size_of[k]
            p = int(at[k])
            diff = a - size_of  # what the partner's OST gains
            other = (~on_source) & (diff > 0) & (group != group[k])
            other &= (oss[at] != server) if server >= 0 else (at != p)
            cand = np.flatnonzero(other)
            if not len(cand):
                continue
            q = at[cand]
            d = diff[cand]
            fine = allowed(k)[q] & (room[q] >= d)  # the partner's OST takes the larger object
            if not fine.any():
                continue
            cand, q, d = cand[fine], q[fine], d[fine]
            gain = np.where(oss[q] == oss[p], 0.0, d)
            finish = np.maximum((placed[q] + d) / bw[q], (oss_placed[oss[q]] + gain) / oss_bw[oss[q]])
            for best in np.argsort(finish, kind="stable")[:16].tolist():
                if finish[best] >= limit:
                    break
                c = int(cand[best])
                if not allowed(c)[p]:  # and the source's OST the smaller one
                    continue
                move(k, int(q[best]))
                move(c, p)
                return True
        return False


def improve(cluster: ClusterState, requests: Sequence[WriteRequest], outcomes: list, sizes: Sequence[int],
            carried: dict, fill_cap: float, oss_load_weight: float, max_steps: int = MAX_STEPS) -> list:
    """``outcomes`` (per part: its OST tuple, or a :class:`Refused`) with objects moved off the busiest OSTs and
    OSSs while that lowers the batch's modelled time; a new list (the input is not changed)."""
    search = _Search(cluster, carried, fill_cap, oss_load_weight)
    owner: list[tuple[int, int]] = []
    for i, (request, got, size) in enumerate(zip(requests, outcomes, sizes)):
        if type(got) is Refused or not got:
            continue
        for j, (ost, b) in enumerate(zip(got, part_objects(request, size, len(got)))):
            search.add(i, request.pool or None, ost, b)
            owner.append((i, j))
    at = search.run(max_steps)
    out = list(outcomes)
    if at is None:
        return out
    rows = {i: list(out[i]) for i, _ in owner}
    for (i, j), a in zip(owner, at.tolist()):
        rows[i][j] = int(search.index[a])
    for i, row in rows.items():
        out[i] = tuple(row)
    return out


def _copy_components(a: Allocation) -> tuple[Component, ...]:
    if a.components:
        return a.components
    return (Component(0, EOF_END, len(a.osts), a.stripe_size, a.pool, a.osts),)


def _with_osts(a: Allocation, comps: list[Component], osts: list[list[int]]) -> Allocation:
    if not a.components:
        return Allocation(a.file, a.stripe_size, tuple(osts[0]), a.policy, a.pool, (), a.note)
    new = []
    for c, row in zip(comps, osts):
        out = object.__new__(Component)
        out.__dict__.update(c.__dict__)
        out.__dict__["osts"] = tuple(row)
        new.append(out)
    return Allocation(a.file, a.stripe_size, tuple(o for row in osts for o in row), a.policy, a.pool, tuple(new),
                      a.note)


def improve_mirrored(cluster: ClusterState, requests: Sequence[WriteRequest], placed: dict, dom: dict[int, str],
                     fill_cap: float, oss_load_weight: float, max_steps: int = MAX_STEPS) -> None:
    """The search over every placed copy (``placed``: ``(file, copy) -> Allocation``, changed in place), each copy
    kept in failure domains no other copy of its file uses."""
    search = _Search(cluster, {}, fill_cap, oss_load_weight, dom)
    owner: list[tuple[tuple[int, int], int, int]] = []
    sets: dict[tuple[tuple[int, int], int], int] = {}
    comps_of: dict[tuple[int, int], tuple[Component, ...]] = {}
    for key, a in placed.items():
        i, k = key
        request = requests[i]
        comps_of[key] = comps = _copy_components(a)
        for c, comp in enumerate(comps):
            if not comp.osts:
                continue
            group = sets.setdefault((key, c), len(sets))
            for j, (ost, b) in enumerate(zip(comp.osts, component_stripe_bytes(comp, request.write_bytes))):
                if ost not in search.pos:
                    return  # a copy on an OST outside the view: leave the batch as it is
                search.add(group, comp.pool or request.pool or None, ost, b,
                           i if request.mirror_count > 1 else -1, k)
                owner.append((key, c, j))
    at = search.run(max_steps)
    if at is None:
        return
    rows = {key: [list(c.osts) for c in comps] for key, comps in comps_of.items()}
    for (key, c, j), a in zip(owner, at.tolist()):
        rows[key][c][j] = int(search.index[a])
    for key, comps in comps_of.items():
        if any(list(c.osts) != row for c, row in zip(comps, rows[key])):
            placed[key] = _with_osts(placed[key], list(comps), rows[key])


__all__ = ["MAX_STEPS", "improve", "improve_mirrored"]
