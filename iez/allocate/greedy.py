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
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from iez.allocate.servers import server_arrays
from iez.allocate.base import Policy, Refused, part_objects
from iez.allocate.bandwidth import oss_interleaved_rank
from iez.model import ClusterState, WriteRequest


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

    def _place_parts(self, cluster: ClusterState, requests: Sequence[WriteRequest], fixed: Sequence[int | None]
                     ) -> tuple[list[tuple[int, ...] | Refused], list[int]]:
        """Every pool's requests in one list schedule, so each file sees the bytes all earlier ones placed."""
        outcomes: list[tuple[int, ...] | Refused] = [Refused("")] * len(requests)
        chosen = [0] * len(requests)
        osts = [o for o in cluster.osts if o.takes_stripes]
        if not osts:
            for i in range(len(requests)):
                outcomes[i] = Refused("no OST of the file system takes new stripes")
            return outcomes, chosen
        cap = self.fill_cap if self.fill_cap is not None else cluster.fill_cap
        view = cluster.with_osts(osts)
        index = np.array([o.index for o in osts], dtype=np.int64)
        bw = np.array([o.usable_bandwidth for o in osts], dtype=float)
        room = np.array([o.room_bytes(cap) for o in osts], dtype=float)
        degraded = np.array([o.state == "degraded" for o in osts], dtype=bool)
        oss_ids, oss, oss_bw = server_arrays(osts, cluster.osses, self.oss_load_weight)
        rank = oss_interleaved_rank(view).astype(float)
        carried = getattr(self, "carried", None) or {}
        placed = np.array([float(carried.get(int(i), 0.0)) for i in index])
        oss_placed = np.bincount(oss, weights=placed, minlength=len(oss_ids))
        room = room - placed
        members: dict[str | None, np.ndarray] = {}
        todo: list[tuple[int, list[int]]] = []
        for i, request in enumerate(requests):
            pool = request.pool or None
            if pool not in members:
                members[pool] = np.array([pool is None or pool in o.pools for o in osts], dtype=bool)
            where = f"pool {pool}" if pool else "the file system"
            shape = self._shape(request, int(members[pool].sum()), where, fixed[i])
            if type(shape) is Refused:
                outcomes[i] = shape
                continue
            count, size = shape
            chosen[i] = size
            todo.append((i, part_objects(request, size, count)))
        todo.sort(key=lambda item: (-requests[item[0]].write_bytes, item[0]))
        for i, objects in todo:
            pool = requests[i].pool or None
            row = None
            for allow_degraded in (False, True):
                candidates = members[pool] if allow_degraded else members[pool] & ~degraded
                row = self._place_file(objects, candidates, bw, oss, oss_bw, room, placed, oss_placed, rank)
                if row is not None or not (degraded & members[pool]).any():
                    break
            if row is None:
                outcomes[i] = Refused(f"greedy: no {len(objects)} distinct OSTs of "
                                      f"{'pool ' + pool if pool else 'the file system'} have room for the file's "
                                      f"stripe objects under the {cap:.0%} fill cap")
            else:
                outcomes[i] = tuple(index[row].tolist())
        return outcomes, chosen

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

    def _place(self, cluster, requests, counts, sizes):  # pragma: no cover - _place_parts does the work
        raise NotImplementedError("greedy places every pool in one schedule (_place_parts)")


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
