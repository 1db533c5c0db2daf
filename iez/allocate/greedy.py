"""``greedy``: size-aware list scheduling, the strongest simple baseline that knows what ``iez`` knows.

Why it exists: ``rr`` and ``qos`` do not know file sizes, so beating them says
little about how close ``iez`` is to the best placement. This policy knows the
same sizes, bandwidths, pools, OST states and fill cap as ``iez`` and does the
obvious thing with them (Graham's longest-processing-time list scheduling):

- files, across every pool of the batch, largest first;
- each file's stripe objects with their exact RAID-0 bytes (short last stripes,
  empty objects of small files, the uneven objects of wrapped files), largest
  object first;
- each object to the candidate OST (the file's pool, or all; takes new
  stripes; not already holding this file; room for the object under the fill
  cap) whose finish time after adding it is least, where finish time is the
  larger of the OST's bytes over its usable bandwidth and its OSS's bytes over
  the OSS's usable bandwidth. Minimising the finished OST's time is what
  minimises the resulting maximum over OSTs, with ties broken toward the
  OST that stays least busy.

Degraded OSTs are used only for files that fit nowhere else (Lustre's
allocators do the same). A file none of whose placements fits is refused alone.

Mirrored (FLR) files: every copy in failure domains (the OSS's ``domain``,
else the OSS) no other copy of the file uses, as ``iez`` keeps them, since a
placement with two copies in one domain does not answer the same problem. A
mirrored file is placed whole at its place in the order: its objects largest
first, each taken by every copy in turn (snake order) by the rule above, the
candidates restricted to domains no other copy of the file uses and kept off a
domain whose use would leave some copy unable to find its remaining objects in
its own or unused domains. A copy at stripe count -1 takes every OST of the
domains it is given (as an unmirrored -1 file takes every OST of its pool): the
pool's domains, ordered by how soon their slowest OST would end an equal
share, the ``t`` first dealt into one set per copy in snake order, for the
``t`` that ends the file soonest. A file whose copies do not fit is refused
alone, the reason naming the domains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from iez.allocate.servers import server_arrays
from iez.allocate.base import Placement, Policy, Refused, assemble, expand_requests, part_objects
from iez.allocate.bandwidth import oss_interleaved_rank
from iez.model import ALL_OSTS, OST, Allocation, ClusterState, WriteRequest


class GreedyPolicy(Policy):
    """Largest file first, each stripe object to the OST that finishes it soonest (see the module docstring)."""

    name = "greedy"
    checks_layouts = True

    def __init__(self, seed: int = 0, fill_cap: float | None = None, oss_load_weight: float = 0.5, **kw):
        super().__init__(seed, **kw)
        if fill_cap is not None and not 0 < fill_cap <= 1:
            raise ValueError(f"fill_cap={fill_cap} is outside (0, 1]")
        if not 0 <= oss_load_weight <= 1:
            raise ValueError("oss_load_weight must be within 0..1")
        self.fill_cap = fill_cap
        self.oss_load_weight = oss_load_weight

    def _state(self, cluster: ClusterState) -> "_State | None":
        """The OSTs that take new stripes, as arrays the list schedule charges (None when there are none)."""
        osts = [o for o in cluster.osts if o.takes_stripes]
        if not osts:
            return None
        cap = self.fill_cap if self.fill_cap is not None else cluster.fill_cap
        view = cluster.with_osts(osts)
        index = np.array([o.index for o in osts], dtype=np.int64)
        oss_ids, oss, oss_bw = server_arrays(osts, cluster.osses, self.oss_load_weight)
        carried = getattr(self, "carried", None) or {}
        placed = np.array([float(carried.get(int(i), 0.0)) for i in index])
        return _State(osts, cap, index, np.array([o.usable_bandwidth for o in osts], dtype=float),
                      np.array([o.room_bytes(cap) for o in osts], dtype=float) - placed,
                      np.array([o.state == "degraded" for o in osts], dtype=bool), oss, oss_bw,
                      oss_interleaved_rank(view).astype(float), placed,
                      np.bincount(oss, weights=placed, minlength=len(oss_ids)), {})

    def _place_parts(self, cluster: ClusterState, requests: Sequence[WriteRequest], fixed: Sequence[int | None]
                     ) -> tuple[list[tuple[int, ...] | Refused], list[int]]:
        """Every pool's requests in one list schedule, so each file sees the bytes all earlier ones placed."""
        outcomes: list[tuple[int, ...] | Refused] = [Refused("")] * len(requests)
        chosen = [0] * len(requests)
        st = self._state(cluster)
        if st is None:
            for i in range(len(requests)):
                outcomes[i] = Refused("no OST of the file system takes new stripes")
            return outcomes, chosen
        todo: list[tuple[int, list[int]]] = []
        for i, request in enumerate(requests):
            shape = self._part_shape(st, request, fixed[i])
            if type(shape) is Refused:
                outcomes[i] = shape
                continue
            count, size = shape
            chosen[i] = size
            todo.append((i, part_objects(request, size, count)))
        todo.sort(key=lambda item: (-requests[item[0]].write_bytes, item[0]))
        for i, objects in todo:
            outcomes[i] = self._place_plain(st, objects, requests[i].pool or None)
        return outcomes, chosen

    def _part_shape(self, st: "_State", request: WriteRequest, fixed: int | None) -> tuple[int, int] | Refused:
        pool = request.pool or None
        where = f"pool {pool}" if pool else "the file system"
        return self._shape(request, int(st.members(pool).sum()), where, fixed)

    def _place_plain(self, st: "_State", objects: list[int], pool: str | None) -> tuple[int, ...] | Refused:
        """One unmirrored file (or part): healthy OSTs first, degraded ones only if it fits nowhere else."""
        members = st.members(pool)
        row = None
        for allow_degraded in (False, True):
            candidates = members if allow_degraded else members & ~st.degraded
            row = self._place_file(objects, candidates, st.bw, st.oss, st.oss_bw, st.room, st.placed,
                                   st.oss_placed, st.rank)
            if row is not None or not (st.degraded & members).any():
                break
        if row is None:
            return Refused(f"greedy: no {len(objects)} distinct OSTs of "
                           f"{'pool ' + pool if pool else 'the file system'} have room for the file's "
                           f"stripe objects under the {st.cap:.0%} fill cap")
        return tuple(st.index[row].tolist())

    @staticmethod
    def _place_file(objects: list[int], candidates: np.ndarray, bw, oss, oss_bw, room, placed, oss_placed, rank
                    ) -> np.ndarray | None:
        """One file's objects, largest first, each on the candidate OST it finishes soonest. The state arrays
        are charged as objects land and given back if the file does not fit whole (``None`` then)."""
        free = candidates.copy()
        row = np.full(len(objects), -1, dtype=np.int64)
        for pos in sorted(range(len(objects)), key=lambda k: -objects[k]):
            b = float(objects[pos])
            ok = free & (room >= b)
            if not ok.any():
                for k in range(len(objects)):  # give back this file's charges
                    if row[k] >= 0:
                        o = row[k]
                        placed[o] -= objects[k]
                        oss_placed[oss[o]] -= objects[k]
                        room[o] += objects[k]
                return None
            where = np.flatnonzero(ok)
            finish = np.maximum((placed[where] + b) / bw[where], (oss_placed[oss[where]] + b) / oss_bw[oss[where]])
            best = where[np.lexsort((rank[where], placed[where] / bw[where], finish))[0]]
            row[pos] = best
            free[best] = False
            placed[best] += b
            oss_placed[oss[best]] += b
            room[best] -= b
        return row

    def _place_batch(self, cluster: ClusterState, requests: tuple[WriteRequest, ...]) -> Placement:
        if not any(r.mirror_count > 1 for r in requests):
            return super()._place_batch(cluster, requests)
        self.carried = {}
        return self._place_with_mirrors(cluster, requests)

    def _place_with_mirrors(self, cluster: ClusterState, requests: tuple[WriteRequest, ...]) -> Placement:
        """A batch with mirrored files: the same list schedule, a mirrored file placed whole at its place in the
        order (its size), copy after copy, each in failure domains no earlier copy of the file uses
        (:meth:`_place_copies_of`). Refused alone when its copies do not fit."""
        from iez.allocate.mirrors import _single, copy_components, domain_of, ost_busy, preferred_mirror

        st = self._state(cluster)
        if st is None:
            return Placement(requests, tuple(Refused("no OST of the file system takes new stripes")
                                             for _ in requests))
        singles = tuple(_single(r) for r in requests)
        dom = domain_of(cluster)
        names = sorted({dom[int(i)] for i in st.index})
        st.domains = names
        st.code = np.array([names.index(dom[int(i)]) for i in st.index], dtype=np.int64)
        parts, fixed, owners = expand_requests(singles, self.stripe_rules, lambda pool: int(st.members(pool).sum()))
        lists: list[tuple[int, ...] | Refused] = [Refused("")] * len(parts)
        sizes = [0] * len(parts)
        copies: dict[int, list[tuple[list, list[int]]] | Refused] = {}
        units: list[tuple[int, int, int]] = []  # (-bytes, first part, file) for a mirrored file, (.., part, -1)
        for i, owned in enumerate(owners):
            if type(owned) is Refused:
                continue
            shape, base = owned
            if requests[i].mirror_count > 1:
                units.append((-requests[i].write_bytes, base, i))
            else:
                units.extend((-parts[p].write_bytes, p, -1) for p in range(base, base + len(shape.parts)))
        for _, p, i in sorted(units):
            if i < 0:
                shape_p = self._part_shape(st, parts[p], fixed[p])
                if type(shape_p) is Refused:
                    lists[p] = shape_p
                    continue
                count, size = shape_p
                sizes[p] = size
                lists[p] = self._place_plain(st, part_objects(parts[p], size, count), parts[p].pool or None)
                continue
            shape, base = owners[i]  # type: ignore[misc]
            n = len(shape.parts)
            copies[i] = self._place_copies_of(st, parts[base:base + n], fixed[base:base + n],
                                              requests[i].mirror_count)
        degraded = {o.index for o in cluster.osts if o.state == "degraded"}
        busy = ost_busy(cluster)
        outcomes: list[Allocation | Refused] = []
        for i, (request, owned) in enumerate(zip(requests, owners)):
            if type(owned) is Refused:
                outcomes.append(owned)
                continue
            shape, base = owned
            if request.mirror_count == 1:
                outcomes.append(assemble(request, shape, base, lists, sizes, self.name, degraded))
                continue
            got = copies[i]
            if type(got) is Refused:
                outcomes.append(got)
                continue
            each = [assemble(singles[i], shape, 0, copy_lists, copy_sizes, self.name, degraded)
                    for copy_lists, copy_sizes in got]
            placed = [a for a in each if type(a) is Allocation]
            if len(placed) != len(each):  # pragma: no cover - every part of a placed copy has its OSTs
                outcomes.append(next(a for a in each if type(a) is Refused))
                continue
            first = placed[0]
            ms = tuple(copy_components(a) for a in placed)
            outcomes.append(Allocation(first.file, first.stripe_size, first.osts, first.policy, first.pool,
                                       first.components, first.note, ms, preferred_mirror(cluster, ms, busy)))
        return Placement(requests, tuple(outcomes))

    def _place_copies_of(self, st: "_State", parts: Sequence[WriteRequest], fixed: Sequence[int | None], m: int
                         ) -> list[tuple[list, list[int]]] | Refused:
        """The ``m`` copies of one mirrored file (``parts``: one copy's), healthy OSTs first, degraded ones only
        if the file fits nowhere else. Per copy, its parts' OST lists and stripe sizes; the state is charged."""
        pools = {p.pool or None for p in parts}
        mask = np.zeros(len(st.index), dtype=bool)
        for pool in pools:
            mask |= st.members(pool)
        have = sorted({st.domains[c] for c in np.unique(st.code[mask]).tolist()})
        where = ", ".join(f"pool {p}" if p else "the file system" for p in sorted(pools, key=str))
        if len(have) < m:
            return Refused(f"greedy: mirror_count={m} needs as many failure domains, {where} has {len(have)} "
                           f"({', '.join(have)})")
        reason = ""
        for allow_degraded in (False, True):
            got = self._copies(st, parts, fixed, m, allow_degraded)
            if not isinstance(got, str):
                return got
            reason = got
            if not (st.degraded & mask).any():
                break
        return Refused(f"greedy: {reason} ({where}: failure domains {', '.join(have)}; fill cap {st.cap:.0%})")

    def _copies(self, st: "_State", parts: Sequence[WriteRequest], fixed: Sequence[int | None], m: int,
                allow_degraded: bool) -> list[tuple[list, list[int]]] | str:
        """One try at every copy (the reason as a string, and nothing charged, when one does not fit). With a
        part at stripe count -1 a copy takes every OST of the domains it is given: the pool's domains, ordered by
        how soon their slowest OST would end an equal share, the ``t`` first dealt into one set per copy in snake
        order, for the ``t`` whose copies end soonest. Otherwise copy after copy, each object, largest first, to
        the OST that finishes it soonest among those in domains no earlier copy of the file uses, keeping enough
        domains free for the copies still to come (:func:`_covers`)."""
        from iez.allocate.mirrors import _snake

        health = np.ones(len(st.index), dtype=bool) if allow_degraded else ~st.degraded
        log: list[tuple[np.ndarray, list[int]]] = []
        if any(p.stripe_count == ALL_OSTS for p in parts):
            mask = np.zeros(len(st.index), dtype=bool)
            for p in parts:
                mask |= st.members(p.pool or None)
            mask &= health
            codes = np.unique(st.code[mask]).tolist()
            if len(codes) < m:
                return f"{m} copies need {m} failure domains with OSTs to take them, {len(codes)} have"
            share = max(p.write_bytes for p in parts) / max(1, int(mask.sum()) // m)
            ends = {c: float(((st.placed + share) / st.bw)[mask & (st.code == c)].max()) for c in codes}
            order = sorted(codes, key=lambda c: (ends[c], c))
            best: tuple[float, int] | None = None
            for t in range(m, len(order) + 1):
                got = self._on_domains(st, parts, fixed, _snake(order[:t], m), health, log)
                if got is not None:
                    touched = np.unique(np.concatenate([row for row, _ in log]))
                    end = max(float((st.placed[touched] / st.bw[touched]).max()),
                              float((st.oss_placed[st.oss[touched]] / st.oss_bw[st.oss[touched]]).max()))
                    if best is None or end < best[0] * (1 - 1e-12):
                        best = (end, t)
                st.undo(log)
            if best is None:
                return "no split of the failure domains gives every copy room for its stripe objects"
            got = self._on_domains(st, parts, fixed, _snake(order[:best[1]], m), health, log)
            assert got is not None
            return got
        per_copy: list[tuple[list, list[int]]] = [([], []) for _ in range(m)]
        mine: list[set[int]] = [set() for _ in range(m)]
        for p, size in zip(parts, fixed):
            size = size or self.stripe_rules.size(p.write_bytes, p.stripe_count)
            objects = part_objects(p, size, p.stripe_count)
            rows = self._draft(st, objects, st.members(p.pool or None) & health, mine, log)
            if rows is None:
                st.undo(log)
                return (f"{m} copies: no {len(objects)} OSTs with room for each in failure domains no other copy "
                        "of the file uses")
            for k, row in enumerate(rows):
                per_copy[k][0].append(tuple(st.index[row].tolist()))
                per_copy[k][1].append(size)
        return per_copy

    def _on_domains(self, st: "_State", parts: Sequence[WriteRequest], fixed: Sequence[int | None],
                    sets: list[list[int]], health: np.ndarray, log: list) -> list[tuple[list, list[int]]] | None:
        """Each copy on its set of domains (a part at -1 on every OST of them), charged and logged; None (with
        the copies placed so far still logged) when one does not fit."""
        out: list[tuple[list, list[int]]] = []
        for group in sets:
            inside = np.isin(st.code, group) & health
            copy_lists, copy_sizes = [], []
            for p, size in zip(parts, fixed):
                cand = st.members(p.pool or None) & inside
                count = int(cand.sum()) if p.stripe_count == ALL_OSTS else p.stripe_count
                if count < 1 or count > int(cand.sum()):
                    return None
                size = size or self.stripe_rules.size(p.write_bytes, count)
                objects = part_objects(p, size, count)
                row = self._place_file(objects, cand, st.bw, st.oss, st.oss_bw, st.room, st.placed,
                                       st.oss_placed, st.rank)
                if row is None:
                    return None
                log.append((row, objects))
                copy_lists.append(tuple(st.index[row].tolist()))
                copy_sizes.append(size)
            out.append((copy_lists, copy_sizes))
        return out

    @staticmethod
    def _draft(st: "_State", objects: list[int], candidates: np.ndarray, mine: list[set[int]], log: list
               ) -> list[np.ndarray] | None:
        """One part's objects for every copy, charged and logged: objects largest first, each taken by every copy
        in turn (in snake order, so no copy always picks first), each to the OST that finishes it soonest among
        those in domains no other copy of the file uses, never in a domain whose use would leave the copies
        unable to find their objects still to place in their own domains or ones no copy uses
        (:func:`_covers`). ``mine`` (each copy's domains) grows. None (nothing charged) when a copy finds none."""
        m = len(mine)
        n_dom = len(st.domains)
        free = [candidates.copy() for _ in range(m)]
        rows = [np.full(len(objects), -1, dtype=np.int64) for _ in range(m)]
        order = sorted(range(len(objects)), key=lambda k: -objects[k])

        def give_back() -> None:
            for k in range(m):
                for q in range(len(objects)):
                    if rows[k][q] >= 0:
                        st.charge(int(rows[k][q]), -objects[q])

        for step, pos in enumerate(order):
            b = float(objects[pos])
            rest = len(order) - step - 1
            after = float(objects[order[step + 1]]) if rest else 0.0
            turns = list(range(m)) if step % 2 == 0 else list(range(m - 1, -1, -1))
            for turn, k in enumerate(turns):
                others = set().union(*(mine[q] for q in range(m) if q != k))
                ok = free[k] & (st.room >= b) & ~np.isin(st.code, list(others))
                if ok.any() and (m > 1 or rest):
                    pending = set(turns[turn + 1:])  # copies still to take this round's object
                    own = []  # per copy: its free OSTs with room for its next object, per domain
                    for q in range(m):
                        need = b if q in pending else after
                        own.append(np.bincount(st.code[free[q] & (st.room >= need)], minlength=n_dom))
                    spare = np.bincount(st.code[candidates & (st.room >= (b if pending else after))],
                                        minlength=n_dom)
                    taken = set().union(*mine)
                    allowed = np.zeros(n_dom, dtype=bool)
                    for d in np.unique(st.code[ok]).tolist():
                        targets = []
                        for q in range(m):
                            doms = mine[q] | {d} if q == k else mine[q]
                            have = int(sum(own[q][x] for x in doms)) - (1 if q == k else 0)
                            targets.append(max(0, rest + (1 if q in pending else 0) - max(have, 0)))
                        sizes = [int(spare[x]) for x in range(n_dom) if x not in taken and x != d]
                        allowed[d] = _covers(sizes, targets)
                    ok &= allowed[st.code]
                if not ok.any():
                    give_back()
                    return None
                where = np.flatnonzero(ok)
                finish = np.maximum((st.placed[where] + b) / st.bw[where],
                                    (st.oss_placed[st.oss[where]] + b) / st.oss_bw[st.oss[where]])
                best = int(where[np.lexsort((st.rank[where], st.placed[where] / st.bw[where], finish))[0]])
                rows[k][pos] = best
                free[k][best] = False
                mine[k].add(int(st.code[best]))
                st.charge(best, b)
        log.extend((row, objects) for row in rows)
        return rows

    def _place(self, cluster, requests, counts, sizes):  # pragma: no cover - _place_parts does the work
        raise NotImplementedError("greedy places every pool in one schedule (_place_parts)")


@dataclass
class _State:
    """The OSTs that take new stripes and what the list schedule has charged them (bytes, room)."""

    osts: list[OST]
    cap: float
    index: np.ndarray
    bw: np.ndarray
    room: np.ndarray
    degraded: np.ndarray
    oss: np.ndarray
    oss_bw: np.ndarray
    rank: np.ndarray
    placed: np.ndarray
    oss_placed: np.ndarray
    pools: dict[str | None, np.ndarray]
    domains: list[str] = field(default_factory=list)  # failure domain names; ``code``: each OST's
    code: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def members(self, pool: str | None) -> np.ndarray:
        if pool not in self.pools:
            self.pools[pool] = np.array([pool is None or pool in o.pools for o in self.osts], dtype=bool)
        return self.pools[pool]

    def charge(self, at: int, b: float) -> None:
        self.placed[at] += b
        self.oss_placed[self.oss[at]] += b
        self.room[at] -= b

    def undo(self, log: list[tuple[np.ndarray, list[int]]]) -> None:
        """Give back every logged object's bytes (and empty the log)."""
        for row, objects in log:
            for at, b in zip(row.tolist(), objects):
                self.charge(at, -b)
        log.clear()


def _covers(sizes: list[int], targets: list[int]) -> bool:
    """Whether disjoint sets of the items ``sizes`` (each domain's OSTs) reach every one of ``targets`` (each
    copy's OSTs needed): bin covering, exact over the states of the needs still open."""
    needs = sorted((t for t in targets if t > 0), reverse=True)
    if not needs:
        return True
    items = sorted((s for s in sizes if s > 0), reverse=True)
    if sum(items) < sum(needs):
        return False
    if len(needs) == 1 or sum(1 for s in items if s >= needs[0]) >= len(needs):
        return True
    states = {tuple(needs)}
    for s in items:
        nxt = set(states)
        for state in states:
            for j, left in enumerate(state):
                if left > 0:
                    grown = sorted((*state[:j], max(0, left - s), *state[j + 1:]), reverse=True)
                    if not grown[0]:
                        return True
                    nxt.add(tuple(grown))
        states = nxt
    return False


def modelled_time(cluster: ClusterState, requests: Sequence[WriteRequest], outcomes, sizes, carried: dict,
                  oss_load_weight: float) -> tuple[int, float]:
    """(files refused, modelled I/O time) of one batch's parts: the largest, over the OSTs and OSSs that take
    stripes, of the bytes there (``carried`` plus each placed object's exact RAID-0 bytes) over the usable
    bandwidth. Used to compare two placements of the same parts."""
    osts = [o for o in cluster.osts if o.takes_stripes]
    if not osts:
        return len(requests), 0.0
    view = cluster.with_osts(osts)
    pos = {o.index: k for k, o in enumerate(view.osts)}
    placed = np.zeros(len(view.osts))
    for ost, b in carried.items():
        if ost in pos:
            placed[pos[ost]] += b
    refused = 0
    for request, osts_of, size in zip(requests, outcomes, sizes):
        if type(osts_of) is Refused:
            refused += 1
            continue
        for ost, b in zip(osts_of, part_objects(request, size, len(osts_of))):
            placed[pos[ost]] += b
    bw = np.array([o.usable_bandwidth for o in view.osts])
    oss_ids, code, oss_bw = server_arrays(view.osts, view.osses, oss_load_weight)
    oss_bytes = np.bincount(code, weights=placed, minlength=len(oss_ids))
    return refused, float(max((placed / bw).max(), (oss_bytes / oss_bw).max()))


__all__ = ["GreedyPolicy", "modelled_time"]
