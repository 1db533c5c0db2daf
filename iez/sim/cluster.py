"""Modelled clusters: OSS and OST counts, capacities, initial fill, bandwidth and live congestion.

A scenario states its cluster completely, including the seeded pre-existing
data on each OST, so every run of it starts from the same file system. A
cluster can also come from a description file (:mod:`iez.sim.description`):
:class:`DescribedCluster` wraps it so both build the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from iez.model import DEFAULT_FILL_CAP, DEFAULT_OSS_BANDWIDTH, DEFAULT_OST_BANDWIDTH, OSS, OST, ClusterState

GiB = 1 << 30
MiB = 1 << 20


@dataclass(frozen=True)
class Overrides:
    """Settings from the command line that change a scenario's cluster (``None``: the scenario's own).

    Bandwidths in bytes/s. A scenario's per-OSS factors and per-OST congestion scale with them.
    """

    fill_cap: float | None = None
    ost_bandwidth: float | None = None
    oss_bandwidth: float | None = None
    fill_seed: int | None = None


@dataclass(frozen=True)
class FillProfile:
    """Pre-existing data per OST as a fraction of its capacity.

    ``kind`` is ``empty``, ``uniform`` (every OST ``low`` full) or ``random``
    (each OST drawn uniformly in ``[low, high]`` with ``seed``). ``overrides``
    then sets single OSTs by position: ``((15, 0.0), ...)``.
    """

    kind: str = "empty"
    low: float = 0.0
    high: float = 0.0
    seed: int = 0
    overrides: tuple[tuple[int, float], ...] = ()

    def fractions(self, count: int) -> np.ndarray:
        if self.kind == "empty":
            out = np.zeros(count)
        elif self.kind == "uniform":
            out = np.full(count, self.low)
        elif self.kind == "random":
            out = np.random.default_rng(self.seed).uniform(self.low, self.high, count)
        else:
            raise ValueError(f"unknown fill profile {self.kind!r}: use empty, uniform or random")
        for position, fraction in self.overrides:
            if not 0 <= position < count or not 0 <= fraction < 1:
                raise ValueError(f"fill override ({position}, {fraction}) is outside {count} OSTs or [0, 1)")
            out[position] = fraction
        return out

    def describe(self) -> str:
        if self.kind == "random":
            text = f"{self.low:.0%}-{self.high:.0%} full (fill seed {self.seed})"
        else:
            text = "empty" if self.kind == "empty" else f"{self.low:.0%} full"
        if self.overrides:
            text += ", " + ", ".join(f"OST {p + 1} {f:.0%}" for p, f in self.overrides[:4])
            if len(self.overrides) > 4:
                text += f" and {len(self.overrides) - 4} more set"
        return text


@dataclass(frozen=True)
class ClusterSpec:
    """A Lustre pool: ``oss_count`` servers with ``osts_per_oss`` targets each (OST index = position + 1).

    ``oss_bandwidth_factor[k]`` scales OSS ``k``'s bandwidth (a slow server); ``ost_load_share``
    gives single OSTs live congestion as a share of their bandwidth: ``((3, 0.8),)``.
    """

    oss_count: int = 3
    osts_per_oss: int = 5
    ost_bytes: int = 10 * GiB
    fill: FillProfile = field(default_factory=FillProfile)
    ost_bandwidth: float = DEFAULT_OST_BANDWIDTH  # bytes/s one OST sustains (modelled)
    oss_bandwidth: float = DEFAULT_OSS_BANDWIDTH  # bytes/s one OSS sustains over all its OSTs (modelled)
    oss_cpu_pct: tuple[float, ...] = ()
    oss_mem_pct: tuple[float, ...] = ()
    oss_bandwidth_factor: tuple[float, ...] = ()
    ost_load_share: tuple[tuple[int, float], ...] = ()
    fill_cap: float = DEFAULT_FILL_CAP
    #: OST pools by OST position: ``(("flash", (0, 1, 2, 3)),)``; an OST may be in several.
    pools: tuple[tuple[str, tuple[int, ...]], ...] = ()
    #: OST states other than active, by position: ``((4, "degraded"),)``.
    states: tuple[tuple[int, str], ...] = ()
    #: Per-OST bandwidth factors by position (flash beside disk): ``((0, 4.0),)``.
    ost_bandwidth_factor: tuple[tuple[int, float], ...] = ()
    #: OSSs per failure domain (a rack, a controller pair): 1, each OSS its own domain.
    oss_per_domain: int = 1

    @property
    def ost_count(self) -> int:
        return self.oss_count * self.osts_per_oss

    def oss_id(self, k: int) -> str:
        return f"oss{k + 1}"

    def build(self, overrides: Overrides | None = None) -> tuple[ClusterState, np.ndarray]:
        """The cluster state and the bytes already used on each OST (in ``cluster.osts`` order)."""
        o = overrides or Overrides()
        if self.oss_count < 1 or self.osts_per_oss < 1 or self.ost_bytes < MiB:
            raise ValueError("a cluster needs at least one OSS, one OST per OSS and 1 MiB per OST")
        fill = self.fill if o.fill_seed is None else replace(self.fill, seed=o.fill_seed)
        ost_bw = o.ost_bandwidth or self.ost_bandwidth
        oss_bw = o.oss_bandwidth or self.oss_bandwidth
        kbytes_total = self.ost_bytes // 1024
        used_kb = np.floor(fill.fractions(self.ost_count) * kbytes_total).astype(np.int64)
        load = dict(self.ost_load_share)
        states = dict(self.states)
        factor = dict(self.ost_bandwidth_factor)
        pools: dict[int, list[str]] = {}
        for name, positions in self.pools:
            for p in positions:
                pools.setdefault(p, []).append(name)
        osts = [
            OST(i + 1, self.oss_id(i // self.osts_per_oss), kbytes_total, kbytes_total - int(used_kb[i]),
                bandwidth=ost_bw * factor.get(i, 1.0), load=ost_bw * factor.get(i, 1.0) * load.get(i, 0.0),
                state=states.get(i, "active"), pools=tuple(pools.get(i, ())))
            for i in range(self.ost_count)
        ]
        osses = [
            OSS(
                self.oss_id(k),
                self.oss_cpu_pct[k] if k < len(self.oss_cpu_pct) else 0.0,
                self.oss_mem_pct[k] if k < len(self.oss_mem_pct) else 0.0,
                bandwidth=oss_bw * (self.oss_bandwidth_factor[k] if k < len(self.oss_bandwidth_factor) else 1.0),
                domain=self.oss_id(k) if self.oss_per_domain <= 1 else f"rack{k // self.oss_per_domain + 1}",
            )
            for k in range(self.oss_count)
        ]
        cluster = ClusterState.build(osts, osses, o.fill_cap or self.fill_cap)
        return cluster, used_kb * 1024

    def describe(self) -> str:
        text = (f"{self.oss_count} OSS x {self.osts_per_oss} OSTs of {self.ost_bytes / GiB:g} GiB, "
                f"{self.fill.describe()}")
        slow = [f"oss{k + 1} at {f:g}x" for k, f in enumerate(self.oss_bandwidth_factor) if f != 1.0]
        if slow:
            text += "; " + ", ".join(slow) + " bandwidth"
        if self.ost_load_share:
            text += "; congested " + ", ".join(f"OST {p + 1} ({s:.0%} busy)" for p, s in self.ost_load_share)
        if self.ost_bandwidth_factor:
            text += "; " + ", ".join(f"OST {p + 1} at {f:g}x" for p, f in self.ost_bandwidth_factor) + " bandwidth"
        for name, positions in self.pools:
            text += f"; pool {name}: OSTs {','.join(str(p + 1) for p in positions)}"
        if self.states:
            text += "; " + ", ".join(f"OST {p + 1} {state}" for p, state in self.states)
        return text


@dataclass(frozen=True)
class DescribedCluster:
    """A cluster read from a description (JSON or ``lfs df``); ``label`` names where it came from."""

    cluster: ClusterState
    label: str

    def build(self, overrides: Overrides | None = None) -> tuple[ClusterState, np.ndarray]:
        """Bandwidth overrides were the description's defaults when it was read; the fill cap may change."""
        o = overrides or Overrides()
        cluster = self.cluster if o.fill_cap is None else ClusterState(self.cluster.osts, self.cluster.osses,
                                                                       o.fill_cap)
        used = np.array([(ost.kbytes_total - ost.kbytes_avail) * 1024 for ost in cluster.osts], dtype=np.int64)
        return cluster, used

    def describe(self) -> str:
        from iez.sim.description import describe

        return f"{self.label}: {describe(self.cluster)}"
