"""The rebalancing plan: the fewest bytes moved so that a pool's fill spread falls under a target.

A pool's *spread* is the largest OST fill less the smallest over its usable
OSTs (those that take new stripes: state ``active``). A *move* rewrites one
whole file with a new layout of the same stripe count and stripe size (what
``lfs migrate`` and the emulated copy do), so it costs the file's size, and it
may keep some of the file's OSTs: only the stripes on OSTs above the band are
given new OSTs, each one distinct within the file.

:func:`plan_domain` is a greedy heuristic that scales to thousands of OSTs and
100,000s of files. For a band ``[L, L + target]`` of fills, the shed pass
takes files off each OST above the band (per OST, files whose stripe there is
the largest share of their size first, the largest that still fits the excess
first, first those whose stripe fills an OST under the band most exactly,
then any that fit, and at the end the cheapest file that covers the rest),
putting each relocated stripe on the OST under the band it fills most
exactly, else on the emptiest OST with room below the band's top; the fill
pass then raises each OST still under the band from the fullest OSTs that stay
in it. ``L`` starts where the bytes above the band equal the room under it
(the continuous optimum: moving bytes from OSTs above to OSTs below moves at
least the larger of the two, :attr:`DomainPlan.lower_bound`) and a few
neighbours are tried; the cheapest plan that reaches the target wins, moves
whose undoing keeps the spread under the target are undone, and a time budget
goes to local search (undo a move and repair; replace a move by one or two
smaller ones) and random restarts. Small instances are also solved exactly
(:mod:`iez.rebalance.milp`) and the cheaper plan is kept.
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iez.model import Layout

#: The fill spread the plan aims under when none is given.
DEFAULT_TARGET = 0.10
#: Instances with at most this many stripe-to-OST choices are also solved exactly (the cheaper plan wins).
EXACT_MAX_CHOICES = 600
#: Band positions tried around the continuous optimum, in units of the target (fewer on large instances).
BAND_OFFSETS = (0.0, -0.125, 0.125, -0.25, 0.25, -0.5, 0.5)
LARGE_FILES = 20_000
LARGE_OFFSETS = (0.0, -0.25, 0.25)


@dataclass(frozen=True)
class Ost:
    """An OST as the planner sees it: its size and everything on it now (movable or not), in bytes."""

    index: int
    capacity: int
    used: int
    state: str = "active"
    pools: tuple[str, ...] = ()

    @property
    def fill(self) -> float:
        return self.used / self.capacity

    @property
    def takes_stripes(self) -> bool:
        """Only an active OST receives moved stripes (degraded, readonly, nocreate and inactive ones refuse)."""
        return self.state == "active"


class _Forbidden:
    """The OSTs one stripe object may not take: ``osts``, and every OST whose failure domain is in ``domains``."""

    __slots__ = ("osts", "domains", "dom")

    def __init__(self, osts: set[int], domains: AbstractSet = frozenset(), dom: dict | None = None):
        self.osts, self.domains, self.dom = osts, domains, dom or {}

    def __contains__(self, j: int) -> bool:
        return j in self.osts or (bool(self.domains) and self.dom.get(j, j) in self.domains)

    def __or__(self, more) -> "_Forbidden":
        return _Forbidden(self.osts | set(more), self.domains, self.dom)


@dataclass(frozen=True)
class File:
    """A file as a set of stripe objects: object ``i`` (``objects[i]`` bytes) is on ``osts[i]``.

    A plain layout is the default: one component, its OSTs distinct. A composite (PFL) or mirrored (FLR)
    layout lists the objects of every placed component, mirror by mirror and component by component, with
    ``groups`` (each object's component: objects of one component stay on distinct OSTs unless the
    component is in ``overstriped``, which keeps its stripe count and may repeat OSTs), ``mirrors`` (each
    object's mirror: the OSTs of different mirrors stay in distinct failure domains), ``pools`` (each
    object's component's pool: it moves only within that pool's OSTs) and ``layout`` (the whole layout, Data-on-MDT
    and uninstantiated components included, which carry no objects and never change: :meth:`relayout`).

    ``ino``, ``mtime_ns`` and ``size`` identify the version the plan saw, so
    apply can tell a file that changed since.
    """

    path: str
    size: int
    stripe_size: int
    osts: tuple[int, ...]
    objects: tuple[int, ...]
    pool: str | None = None
    ino: int = 0
    mtime_ns: int = 0
    groups: tuple[int, ...] = ()
    overstriped: frozenset = frozenset()
    mirrors: tuple[int, ...] = ()
    pools: tuple = ()
    layout: Layout | None = field(default=None, compare=False, repr=False)

    @property
    def plain(self) -> bool:
        """One RAID-0 component over the whole file (what the planner always knew)."""
        return not self.groups and not self.mirrors

    def object_pools(self) -> tuple:
        return self.pools or (self.pool,) * len(self.osts)

    def forbidden(self, s: int, where, dom: dict | None = None):
        """The OSTs object ``s`` may not move to while the file's objects are on ``where`` (its own OST
        included): the OSTs of its component's other objects (none when overstriped) and, for a mirror,
        every OST in a failure domain (``dom``: OST to domain; the OST itself without one) another mirror uses."""
        if self.plain:
            return set(where)
        g = self.groups[s] if self.groups else 0
        if g in self.overstriped:
            osts = {where[s]}
        else:
            osts = {where[t] for t in range(len(where)) if (self.groups[t] if self.groups else 0) == g}
        if not self.mirrors:
            return osts
        dom = dom or {}
        m = self.mirrors[s]
        domains = {dom.get(where[t], where[t]) for t in range(len(where)) if self.mirrors[t] != m}
        return _Forbidden(osts, domains, dom)

    def valid(self, where, dom: dict | None = None) -> bool:
        """Whether the objects may lie on ``where``: distinct within each component not overstriped, and each
        mirror in failure domains no other mirror uses."""
        if self.plain:
            return len(set(where)) == len(where)
        by_group: dict[int, list[int]] = {}
        for t, j in enumerate(where):
            by_group.setdefault(self.groups[t] if self.groups else 0, []).append(j)
        for g, js in by_group.items():
            if g not in self.overstriped and len(set(js)) != len(js):
                return False
        if self.mirrors:
            dom = dom or {}
            owner: dict = {}
            for t, j in enumerate(where):
                d = dom.get(j, j)
                if owner.setdefault(d, self.mirrors[t]) != self.mirrors[t]:
                    return False
        return True

    def relayout(self, to):
        """The whole layout with the objects on ``to`` (``layout`` with each placed component's OSTs replaced,
        in the order of ``osts``); a mirror whose OSTs change is written anew, so it is no longer stale."""
        from dataclasses import replace as _replace

        from iez.layout.model import Layout

        if self.layout is None:
            return Layout(self.stripe_size, tuple(to), self.pool)
        layout = self.layout
        it = iter(to)
        copies = []
        changed = set()
        for k, mirror in enumerate(layout.copies()):
            comps = []
            for c in mirror:
                if c.osts:
                    new = tuple(next(it) for _ in c.osts)
                    if new != c.osts:
                        changed.add(k)
                    c = _replace(c, osts=new)
                comps.append(c)
            copies.append(tuple(comps))
        if layout.mirrors:
            return Layout.from_mirrors(copies, layout.preferred_mirror, [k for k in layout.stale if k not in changed])
        if not layout.components:
            return Layout(layout.stripe_size, tuple(to), layout.pool)
        return Layout.from_components(copies[0])


@dataclass(frozen=True)
class Move:
    file: File
    to: tuple[int, ...]

    @property
    def bytes(self) -> int:
        return self.file.size

    def to_json(self) -> dict:
        """``file``, ``from``/``to`` (every object's OST, in the order of :attr:`File.osts`), ``bytes`` (the
        file's size), ``stripe_size``, ``pool``, the version seen (``ino``, ``mtime_ns``) and, for a composite or
        mirrored layout, ``layout``: the whole new layout in the emulated attribute's text."""
        f = self.file
        out = {"file": f.path, "from": list(f.osts), "to": list(self.to), "bytes": f.size,
               "stripe_size": f.stripe_size, "pool": f.pool, "ino": f.ino, "mtime_ns": f.mtime_ns}
        if not f.plain:
            from iez.layout.emulated import format_attr

            out["layout"] = format_attr(f.relayout(self.to))
        return out


@dataclass
class DomainPlan:
    """The plan for one pool (``pool`` None: the whole file system, or the OSTs in no pool)."""

    pool: str | None
    osts: list[int]
    moves: list[Move] = field(default_factory=list)
    spread_before: float = 0.0
    spread_after: float = 0.0
    reached: bool = True
    lower_bound: int = 0  # bytes the continuous relaxation needs: no plan moves fewer
    files_considered: int = 0
    algorithm: str = "greedy"  # or "milp" when the exact program found the cheaper plan
    seconds: float = 0.0

    @property
    def bytes_moved(self) -> int:
        return sum(m.bytes for m in self.moves)

    def to_json(self) -> dict:
        return {"pool": self.pool, "osts": self.osts, "spread_before": round(self.spread_before, 6),
                "spread_after": round(self.spread_after, 6), "reached": self.reached,
                "bytes_moved": self.bytes_moved, "files_moved": len(self.moves),
                "lower_bound_bytes": self.lower_bound, "files_considered": self.files_considered,
                "algorithm": self.algorithm, "seconds": round(self.seconds, 3)}


def spread(load: dict[int, float], capacity: dict[int, int]) -> float:
    if not load:
        return 0.0
    fills = [load[j] / capacity[j] for j in load]
    return max(fills) - min(fills)


def movable_bytes_needed(load: dict[int, float], capacity: dict[int, int], low: float, target: float
                         ) -> tuple[float, float]:
    """Bytes above the band ``[low, low + target]`` and room below it (both must move)."""
    above = sum(max(0.0, load[j] - (low + target) * capacity[j]) for j in load)
    below = sum(max(0.0, low * capacity[j] - load[j]) for j in load)
    return above, below


def balance_point(load: dict[int, float], capacity: dict[int, int], target: float) -> tuple[float, float]:
    """The band's bottom where the bytes above it equal the room below it, and that many bytes."""
    lo = min(load[j] / capacity[j] for j in load) - target
    hi = max(load[j] / capacity[j] for j in load)
    for _ in range(60):
        mid = (lo + hi) / 2
        above, below = movable_bytes_needed(load, capacity, mid, target)
        if above > below:
            lo = mid
        else:
            hi = mid
    above, below = movable_bytes_needed(load, capacity, hi, target)
    return hi, max(above, below)


class _Band:
    """One greedy run for the band ``[low, low + target]`` (see the module text)."""

    def __init__(self, capacity: dict[int, int], load: dict[int, float], files: list[File],
                 by_ost: dict[int, list[tuple[int, int]]], low: float, target: float, fill_cap: float,
                 frozen: AbstractSet[int] = frozenset(), exact_first: bool = True, asc=None, dom: dict | None = None):
        self.capacity, self.files, self.by_ost = capacity, files, by_ost
        self.dom = dom or {}  # OST -> failure domain, for mirrored files
        self.load = dict(load)
        self.low = {j: low * c for j, c in capacity.items()}
        self.high = {j: (low + target) * c for j, c in capacity.items()}
        # a destination never passes the band's top nor the fill cap (unless it was already past it)
        self.top = {j: min(self.high[j], max(fill_cap * c, load[j])) for j, c in capacity.items()}
        self.where = {i: list(f.osts) for i, f in enumerate(files)}  # current OSTs of each file
        self.exact_first = exact_first
        self.asc = asc if asc is not None else _ascending(by_ost)
        self.frozen = frozen  # files an earlier plan moved (or forbade): not touched again
        self.moved: set[int] = set(frozen)
        self._heap = [(self.load[j] / c, j) for j, c in capacity.items()]
        heapq.heapify(self._heap)
        # OSTs under the band, by how many bytes they lack: a stripe goes to the one it fills most exactly
        self._short_key = {j: (self.low[j] - self.load[j], j) for j in capacity if self.load[j] < self.low[j]}
        self._short = sorted(self._short_key.values())

    def _fill(self, j: int) -> float:
        return self.load[j] / self.capacity[j]

    def _set(self, j: int, value: float) -> None:
        self.load[j] = value
        heapq.heappush(self._heap, (value / self.capacity[j], j))
        old = self._short_key.pop(j, None)
        if old is not None:
            del self._short[bisect.bisect_left(self._short, old)]
        if value < self.low[j]:
            key = self._short_key[j] = (self.low[j] - value, j)
            bisect.insort(self._short, key)

    def _best_fit(self, nbytes: int, excluded) -> int | None:
        """The OST under the band whose shortfall ``nbytes`` fills most exactly without passing it."""
        n = bisect.bisect_left(self._short, (nbytes - 1e-6, -1))
        for _, j in self._short[n:n + 64]:
            if j not in excluded and self.load[j] + nbytes <= self.top[j] + 1e-6:
                return j
        return None

    def _destinations(self, nbytes: list[int], taken: set[int], exact: bool = False) -> list[int] | None:
        """For each of ``nbytes`` (largest first) the OST under the band it fills most exactly, else (unless
        ``exact``) the emptiest OST with room; none in ``taken``."""
        chosen: dict[int, int] = {}
        aside: list[tuple[float, int]] = []
        for s in sorted(range(len(nbytes)), key=lambda s: -nbytes[s]):
            fit = self._best_fit(nbytes[s], taken | set(chosen.values()))
            if fit is not None:
                chosen[s] = fit
                continue
            if exact:
                break
            tries = 0
            while self._heap and tries < 64:
                fill, j = heapq.heappop(self._heap)
                if abs(fill - self.load[j] / self.capacity[j]) > 1e-12:
                    continue  # a stale entry: the OST's load changed since
                aside.append((fill, j))
                tries += 1
                if j in taken or j in chosen.values():
                    continue
                if self.load[j] + nbytes[s] <= self.top[j] + 1e-6:
                    chosen[s] = j
                    break
            if s not in chosen:
                break
        for entry in aside:
            heapq.heappush(self._heap, entry)
        if len(chosen) < len(nbytes):
            return None
        return [chosen[s] for s in range(len(nbytes))]

    def _general(self, f: File, where: list[int], relocate: list[int], exact: bool) -> list[int] | None:
        """New OSTs for objects ``relocate`` of a composite or mirrored file, one at a time (largest first),
        each within its component's and its mirror's constraints (:meth:`File.forbidden`)."""
        trial, chosen = list(where), set[int]()
        for s in sorted(relocate, key=lambda s: -f.objects[s]):
            forbid = f.forbidden(s, trial, self.dom) | ({where[s]} | chosen)
            got = self._destinations([f.objects[s]], forbid, exact)
            if got is None:
                return None
            trial[s] = got[0]
            chosen.add(got[0])
        return [trial[s] for s in relocate]

    def _blocked(self, i: int, s: int, k: int) -> bool:
        """Whether object ``s`` of file ``i`` may not go to OST ``k``."""
        f, where = self.files[i], self.where[i]
        return k in where if f.plain else k in f.forbidden(s, where, self.dom)

    def move(self, i: int, relocate: list[int], exact: bool = False) -> bool:
        """Give stripes ``relocate`` of file ``i`` new OSTs; False (nothing changed) when none have room."""
        f = self.files[i]
        where = self.where[i]
        if f.plain:
            keep = {where[s] for s in range(len(where)) if s not in relocate}
            dests = self._destinations([f.objects[s] for s in relocate], keep | {where[s] for s in relocate}, exact)
        else:
            dests = self._general(f, where, relocate, exact)
        if dests is None:
            return False
        for s, j in zip(relocate, dests):
            self._set(where[s], self.load[where[s]] - f.objects[s])
            self._set(j, self.load[j] + f.objects[s])
            where[s] = j
        self.moved.add(i)
        self._extras(i)
        return True

    def _extras(self, i: int) -> None:
        """The file is rewritten anyway: its other stripes go to OSTs under the band they fill exactly, where
        their own OST stays in the band (free bytes towards the target)."""
        f, where = self.files[i], self.where[i]
        for s in sorted(range(len(where)), key=lambda s: -f.objects[s]):
            j, b = where[s], f.objects[s]
            if b <= 0 or self.load[j] - b < self.low[j] - 1e-6 or j not in self.capacity:
                continue
            k = self._best_fit(b, set(where) if f.plain else f.forbidden(s, where, self.dom) | {j})
            if k is not None:
                self._set(j, self.load[j] - b)
                self._set(k, self.load[k] + b)
                where[s] = k

    def _over(self, i: int) -> list[int]:
        where = self.where[i]
        return [s for s in range(len(where)) if self.load[where[s]] > self.high[where[s]] + 1e-6]

    def shed(self) -> None:
        over = sorted((j for j in self.capacity if self.load[j] > self.high[j]),
                      key=lambda j: (self.load[j] - self.high[j]) / self.capacity[j], reverse=True)
        for j in over:
            items = self.by_ost.get(j, [])
            for exact in (True, False) if self.exact_first else (False,):  # fitting ones, best share and largest first; first into exact holes
                for b, i in items:
                    excess = self.load[j] - self.high[j]
                    if excess <= 1e-6:
                        break
                    if i in self.moved or b > excess:
                        continue
                    self.move(i, self._over(i), exact)
            excess = self.load[j] - self.high[j]
            if excess > 1e-6:  # the cheapest file whose stripe covers the rest
                for b, i in sorted((x for x in items if x[1] not in self.moved and x[0] >= excess),
                                   key=lambda x: self.files[x[1]].size):
                    if self.move(i, self._over(i)):
                        break

    def raise_low(self) -> None:
        under = sorted((j for j in self.capacity if self.load[j] < self.low[j] - 1e-6), key=self._fill)
        for k in under:
            donors = heapq.nlargest(16, (j for j in self.capacity if j != k and self.load[j] > self.low[j]),
                                    key=self._fill)

            def fits(j: int, b: int, i: int) -> bool:
                return not (i in self.moved or self.load[j] - b < self.low[j] - 1e-6
                            or self.load[k] + b > self.top[k] + 1e-6
                            or (k in self.where[i] if self.files[i].plain
                                else j not in self.where[i] or self._blocked(i, self.where[i].index(j), k)))

            # the largest stripes that still fit the shortfall, from the fullest donors; single-stripe files
            # first (a file is rewritten whole, so one stripe of a wider file costs more than it brings)
            for single in (True, False):
                for j in donors:
                    sizes, ids = self.asc.get(j, ((), ()))
                    n, looked = len(sizes), 0
                    while looked < 256:
                        deficit = self.low[k] - self.load[k]
                        n = min(n, bisect.bisect_right(sizes, deficit))
                        if deficit <= 1e-6 or n == 0:
                            break
                        n -= 1
                        looked += 1
                        i = ids[n]
                        if (len(self.files[i].osts) == 1) == single and fits(j, sizes[n], i):
                            self._relocate_to(i, self.where[i].index(j), k)
            deficit = self.low[k] - self.load[k]
            if deficit > 1e-6:  # the cheapest file whose stripe covers the rest
                best = None
                for j in donors:
                    sizes, ids = self.asc.get(j, ((), ()))
                    n = bisect.bisect_left(sizes, deficit)
                    for m in range(n, min(len(sizes), n + 32)):
                        if fits(j, sizes[m], ids[m]) and (best is None or self.files[ids[m]].size
                                                          < self.files[best[1]].size):
                            best = (j, ids[m])
                if best:
                    j, i = best
                    self._relocate_to(i, self.where[i].index(j), k)

    def _relocate_to(self, i: int, s: int, k: int) -> None:
        f = self.files[i]
        j = self.where[i][s]
        self._set(j, self.load[j] - f.objects[s])
        self._set(k, self.load[k] + f.objects[s])
        self.where[i][s] = k
        self.moved.add(i)
        self._extras(i)

    def moves(self) -> dict[int, tuple[int, ...]]:
        return {i: tuple(self.where[i]) for i in self.moved - self.frozen if tuple(self.where[i]) != self.files[i].osts}


def _index(files: list[File], rng=None) -> dict[int, list[tuple[int, int]]]:
    """Per OST its files' stripes ``(bytes, file)``, best share of the file's size first, then largest
    (``rng``: sizes blurred by up to 30 %, for the random restarts)."""
    by_ost: dict[int, list[tuple[int, int]]] = {}
    for i, f in enumerate(files):
        for j, b in zip(f.osts, f.objects):
            if b > 0:
                by_ost.setdefault(j, []).append((b, i))
    for items in by_ost.values():
        if rng is None:
            items.sort(key=lambda x: (-round(x[0] / max(1, files[x[1]].size), 2), -x[0]))
        else:
            items.sort(key=lambda x: (-round(x[0] / max(1, files[x[1]].size), 2), -x[0] * rng.uniform(0.7, 1.3)))
    return by_ost


def _ascending(by_ost: dict[int, list[tuple[int, int]]]) -> dict[int, tuple[list[int], list[int]]]:
    """Per OST its stripes' sizes ascending and their files, for bisecting."""
    out = {}
    for j, items in by_ost.items():
        pairs = sorted(items)
        out[j] = ([b for b, _ in pairs], [i for _, i in pairs])
    return out


def _apply(load: dict[int, float], files: list[File], moves: dict[int, tuple[int, ...]]) -> dict[int, float]:
    out = dict(load)
    for i, to in moves.items():
        f = files[i]
        for a, b, n in zip(f.osts, to, f.objects):
            out[a] -= n
            out[b] += n
    return out


def _prune(capacity, load, files, moves, target) -> dict[int, tuple[int, ...]]:
    """Undo each move (largest first) whose undoing keeps the spread under ``target``."""
    import numpy as np

    order = list(capacity)
    pos = {j: n for n, j in enumerate(order)}
    cap = np.array([capacity[j] for j in order], dtype=float)
    after = _apply(load, files, moves)
    now = np.array([after[j] for j in order], dtype=float)
    kept = dict(moves)
    for i in sorted(moves, key=lambda i: -files[i].size):
        f, to = files[i], moves[i]
        trial = now.copy()
        for a, b, n in zip(f.osts, to, f.objects):
            trial[pos[a]] += n
            trial[pos[b]] -= n
        fills = trial / cap
        if fills.max() - fills.min() <= target + 1e-9:
            now = trial
            del kept[i]
    return kept


def _search(capacity, load, files, by_ost, target, fill_cap, frozen=frozenset(), offsets=BAND_OFFSETS,
            modes=(True, False), dom=None) -> tuple[float, int, dict[int, tuple[int, ...]]]:
    """The greedy over the bands around the balance point: ``(spread, bytes, moves)`` of the cheapest plan that
    reaches ``target``, else of the one that comes closest."""
    low, _ = balance_point(load, capacity, target)
    best = None
    asc = _ascending(by_ost)
    for offset in offsets:
        for exact_first in modes:
            band = _Band(capacity, load, files, by_ost, low + offset * target, target, fill_cap, frozen, exact_first,
                         asc, dom)
            band.shed()
            band.raise_low()
            moves = band.moves()
            key = (max(spread(band.load, capacity), target), sum(files[i].size for i in moves), moves)
            if best is None or key[:2] < best[:2]:
                best = key
    assert best is not None  # offsets and modes are never empty
    return best


def _improve(capacity, load, files, by_ost, moves, target, fill_cap, deadline, dom=None
             ) -> dict[int, tuple[int, ...]]:
    """Local search until ``deadline``: undo one move (largest first), forbid its file, and let the greedy
    repair from there; keep the result when it moves fewer bytes."""
    cost = sum(files[i].size for i in moves)
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for a in sorted(moves, key=lambda i: -files[i].size):
            if time.monotonic() >= deadline:
                break
            rest = {i: to for i, to in moves.items() if i != a}
            rest_cost = cost - files[a].size
            state = _apply(load, files, rest)
            if spread(state, capacity) <= target + 1e-9:
                moves, cost, improved = rest, rest_cost, True
                break
            after, extra, added = _search(capacity, state, files, by_ost, target, fill_cap, set(rest) | {a}, dom=dom)
            if after <= target + 1e-9 and rest_cost + extra < cost:
                merged = {**rest, **added}
                moves = _prune(capacity, load, files, merged, target)
                cost = sum(files[i].size for i in moves)
                improved = True
                break
    return moves


def _restarts(capacity, load, files, moves, target, fill_cap, deadline, seed, bound=0, dom=None
              ) -> dict[int, tuple[int, ...]]:
    """Random restarts until ``deadline``: the greedy with blurred candidate orders and a random band,
    pruned; the cheapest plan that reaches ``target`` is kept."""
    import random

    rng = random.Random(seed)
    cost = sum(files[i].size for i in moves)
    while time.monotonic() < deadline and cost > bound:
        by_ost = _index(files, rng)
        after, extra, found = _search(capacity, load, files, by_ost, target, fill_cap,
                                      offsets=(rng.uniform(-0.6, 0.6),), modes=(rng.random() < 0.5,), dom=dom)
        if after > target + 1e-9 or extra >= cost:
            continue
        found = _prune(capacity, load, files, found, target)
        found_cost = sum(files[i].size for i in found)
        if found_cost < cost:
            moves, cost = found, found_cost
    return moves


def _swaps(capacity, load, files, moves, target, deadline, width: int = 3, dom=None) -> dict[int, tuple[int, ...]]:
    """Local search until ``deadline``: replace one moved file by one or two smaller unmoved ones (each sent to
    one of the ``width`` emptiest OSTs it is not on) when the spread stays under ``target``."""
    import numpy as np

    order = list(capacity)
    pos = {j: n for n, j in enumerate(order)}
    cap = np.array([capacity[j] for j in order], dtype=float)

    def shifted(now, i, to):
        out = now.copy()
        for a, b, n in zip(files[i].osts, to, files[i].objects):
            out[pos[a]] -= n
            out[pos[b]] += n
        return out

    def ok(now) -> bool:
        fills = now / cap
        return fills.max() - fills.min() <= target + 1e-9

    def options(now, i):
        """New OSTs for file i: its stripe on the fullest of its OSTs to each of the emptiest others."""
        f = files[i]
        fills = now / cap
        s = max(range(len(f.osts)), key=lambda s: fills[pos[f.osts[s]]])
        emptiest = [order[n] for n in np.argsort(fills)[: width + len(f.osts)]]
        for j in emptiest:
            if j not in f.osts:
                to = f.osts[:s] + (j,) + f.osts[s + 1:]
                if f.plain or f.valid(to, dom):
                    yield to
        if len(f.osts) > 1:  # every stripe onto the emptiest OSTs, the largest stripe onto the emptiest
            fresh = [j for j in emptiest if j not in f.osts][: len(f.osts)]
            if len(fresh) == len(f.osts):
                ranked = sorted(range(len(f.osts)), key=lambda s: -f.objects[s])
                to = list(f.osts)
                for s, j in zip(ranked, fresh):
                    to[s] = j
                if f.plain or f.valid(to, dom):
                    yield tuple(to)

    by_size = sorted(range(len(files)), key=lambda i: files[i].size)
    sizes = [files[i].size for i in by_size]
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for a in sorted(moves, key=lambda i: -files[i].size):
            if time.monotonic() >= deadline:
                break
            rest = {i: to for i, to in moves.items() if i != a}
            after = _apply(load, files, rest)
            base = np.array([after[j] for j in order], dtype=float)
            below = bisect.bisect_left(sizes, files[a].size)
            small = [i for i in reversed(by_size[max(0, below - 400):below]) if i not in moves][:200]
            found = None
            for b in small:
                for to_b in options(base, b):
                    one = shifted(base, b, to_b)
                    if ok(one):
                        found = {b: to_b}
                        break
                    for c in small:
                        if time.monotonic() >= deadline:
                            break
                        if c == b or files[b].size + files[c].size >= files[a].size:
                            continue
                        for to_c in options(one, c):
                            if ok(shifted(one, c, to_c)):
                                found = {b: to_b, c: to_c}
                                break
                        if found:
                            break
                    if found or time.monotonic() >= deadline:
                        break
                if found or time.monotonic() >= deadline:
                    break
            if found:
                moves = {**rest, **found}
                improved = True
                break
    return moves


def plan_domain(osts: list[Ost], files: list[File], target: float = DEFAULT_TARGET, fill_cap: float = 0.95,
                pool: str | None = None, improve_s: float = 2.0, seed: int = 0, exact: bool | None = None,
                exact_s: float = 5.0, domains: dict[int, str] | None = None) -> DomainPlan:
    """Moves among ``osts`` (the usable OSTs of one pool) of ``files`` (those wholly on them) that bring the
    spread under ``target`` with the fewest bytes found: the greedy, and where the instance is small
    (``exact`` None: at most :data:`EXACT_MAX_CHOICES` stripe-to-OST choices; True: always) the exact
    program too, within ``exact_s`` seconds. The exact program knows plain layouts only: with a composite or
    mirrored file among ``files`` the greedy's plan stands alone. ``domains``: each OST's failure domain (its
    OSS by default), which keeps the mirrors of a mirrored file apart."""
    started = time.monotonic()
    capacity = {o.index: o.capacity for o in osts}
    load = {o.index: float(o.used) for o in osts}
    result = DomainPlan(pool, sorted(capacity), files_considered=len(files))
    result.spread_before = result.spread_after = spread(load, capacity)
    if len(osts) < 2 or result.spread_before <= target:
        return result
    low, bound = balance_point(load, capacity, target)
    result.lower_bound = int(bound)
    by_ost = _index(files)
    large = len(files) > LARGE_FILES
    dom = domains or {}
    found = _search(capacity, load, files, by_ost, target, fill_cap, offsets=LARGE_OFFSETS if large else BAND_OFFSETS,
                    modes=(True,) if large else (True, False), dom=dom)
    searched = time.monotonic() - started
    if found[0] <= target + 1e-9:
        moves = _prune(capacity, load, files, found[2], target)
        deadline = time.monotonic() + improve_s
        if searched * 4 < improve_s:  # each step of the local search is a whole search again
            moves = _improve(capacity, load, files, by_ost, moves, target, fill_cap, deadline, dom)
        if sum(files[i].size for i in moves) > result.lower_bound:
            moves = _restarts(capacity, load, files, moves, target, fill_cap, time.monotonic() + improve_s / 2,
                              seed, result.lower_bound, dom)
        if sum(files[i].size for i in moves) > result.lower_bound:
            moves = _swaps(capacity, load, files, moves, target, deadline, dom=dom)
    else:
        moves = found[2]
    if exact is None:
        exact = sum(len(f.osts) for f in files) * len(osts) <= EXACT_MAX_CHOICES
    if exact and all(f.plain for f in files):  # the program models plain layouts only
        from iez.rebalance.milp import solve

        cost = sum(files[i].size for i in moves) if found[0] <= target + 1e-9 else None
        solved = solve(osts, files, target, fill_cap, time_limit=exact_s)
        if solved is not None and (cost is None or solved.bytes_moved < cost):
            number = {id(f): i for i, f in enumerate(files)}
            moves = {number[id(m.file)]: m.to for m in solved.moves}
            result.algorithm = "milp"
    after_load = _apply(load, files, moves)
    result.seconds = time.monotonic() - started
    result.moves = [Move(files[i], to) for i, to in sorted(moves.items(), key=lambda kv: files[kv[0]].path)]
    result.spread_after = spread(after_load, capacity)
    result.reached = result.spread_after <= target + 1e-9
    return result


def target_under(osts: list[Ost], ceiling: float, target: float = DEFAULT_TARGET) -> float | None:
    """The widest spread target, at most ``target``, whose balanced band (:func:`balance_point`) tops out at or
    under the fill ``ceiling``: a plan for it brings the fullest OST down to about ``ceiling`` as well (the
    balancing service's low-water mark). None when the OSTs' mean fill is above ``ceiling`` (moving files
    between them cannot get there)."""
    capacity = {o.index: o.capacity for o in osts}
    load = {o.index: float(o.used) for o in osts}
    if len(osts) < 2:
        return target
    if sum(load.values()) / sum(capacity.values()) > ceiling:
        return None

    def top(t: float) -> float:
        return balance_point(load, capacity, t)[0] + t

    if top(target) <= ceiling:
        return target
    lo, hi = 0.0, target
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if top(mid) <= ceiling else (lo, mid)
    return lo if lo > 0 else None
