"""``random``: every stripe on a uniformly drawn usable OST (seeded), a floor for comparisons."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from iez.allocate.base import Policy, Refused
from iez.model import ClusterState, WriteRequest


class RandomPolicy(Policy):
    name = "random"

    def __init__(self, seed: int = 0, **kw):
        super().__init__(seed, **kw)
        self._rng = np.random.default_rng(seed)

    def _place(self, cluster: ClusterState, requests: Sequence[WriteRequest], counts, sizes
               ) -> list[Sequence[int] | Refused]:
        free = np.array([ost.bytes_avail for ost in cluster.osts], dtype=np.int64)
        index = np.array([ost.index for ost in cluster.osts])
        out: list[Sequence[int] | Refused] = []
        for count, size in zip(counts, sizes):
            fits = np.flatnonzero(free >= size)
            if len(fits) < count:
                out.append(Refused(f"random: fewer than {count} OSTs still have {size} bytes free"))
                continue
            chosen = self._rng.choice(fits, size=count, replace=False)
            free[chosen] -= size
            out.append(index[chosen].tolist())
        return out
