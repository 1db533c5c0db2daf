"""Modelled clusters: OSS and OST counts, capacities, initial fill and bandwidth.

A scenario states its cluster completely, including the seeded pre-existing
data on each OST, so every run of it starts from the same file system.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from iez.model import OSS, OST, ClusterState

GiB = 1 << 30
MiB = 1 << 20


@dataclass(frozen=True)
class FillProfile:
    """Pre-existing data per OST as a fraction of its capacity.

    ``kind`` is ``empty``, ``uniform`` (every OST ``low`` full) or ``random``
    (each OST drawn uniformly in ``[low, high]`` with ``seed``).
    """

    kind: str = "empty"
    low: float = 0.0
    high: float = 0.0
    seed: int = 0

    def fractions(self, count: int) -> np.ndarray:
        if self.kind == "empty":
            return np.zeros(count)
        if self.kind == "uniform":
            return np.full(count, self.low)
        if self.kind == "random":
            return np.random.default_rng(self.seed).uniform(self.low, self.high, count)
        raise ValueError(f"unknown fill profile {self.kind!r}: use empty, uniform or random")

    def describe(self) -> str:
        if self.kind == "random":
            return f"{self.low:.0%}-{self.high:.0%} full (seed {self.seed})"
        return "empty" if self.kind == "empty" else f"{self.low:.0%} full"


@dataclass(frozen=True)
class ClusterSpec:
    """A Lustre pool: ``oss_count`` servers with ``osts_per_oss`` targets each."""

    oss_count: int = 3
    osts_per_oss: int = 5
    ost_bytes: int = 10 * GiB
    fill: FillProfile = field(default_factory=FillProfile)
    ost_bandwidth: float = 200 * MiB  # bytes/s one OST sustains (modelled)
    oss_bandwidth: float = 600 * MiB  # bytes/s one OSS sustains over all its OSTs (modelled)
    oss_cpu_pct: tuple[float, ...] = ()
    oss_mem_pct: tuple[float, ...] = ()

    @property
    def ost_count(self) -> int:
        return self.oss_count * self.osts_per_oss

    def oss_id(self, k: int) -> str:
        return f"oss{k + 1}"

    def build(self) -> tuple[ClusterState, np.ndarray]:
        """The cluster state and the bytes already used on each OST (OST index = position + 1)."""
        if self.oss_count < 1 or self.osts_per_oss < 1 or self.ost_bytes < MiB:
            raise ValueError("a cluster needs at least one OSS, one OST per OSS and 1 MiB per OST")
        kbytes_total = self.ost_bytes // 1024
        used = np.floor(self.fill.fractions(self.ost_count) * kbytes_total).astype(np.int64) * 1024
        osts = [
            OST(i + 1, self.oss_id(i // self.osts_per_oss), kbytes_total, kbytes_total - int(used[i]) // 1024)
            for i in range(self.ost_count)
        ]
        osses = [
            OSS(
                self.oss_id(k),
                self.oss_cpu_pct[k] if k < len(self.oss_cpu_pct) else 0.0,
                self.oss_mem_pct[k] if k < len(self.oss_mem_pct) else 0.0,
            )
            for k in range(self.oss_count)
        ]
        return ClusterState.build(osts, osses), used

    def describe(self) -> str:
        return (
            f"{self.oss_count} OSS x {self.osts_per_oss} OSTs of {self.ost_bytes / GiB:g} GiB, "
            f"{self.fill.describe()}"
        )
