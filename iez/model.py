"""Domain model shared by every part of iez: servers, targets, requests, layouts.

Units follow Lustre: OST space is in KiB (``kbytes_*`` as ``lctl get_param``
prints it), file sizes and stripe sizes in bytes. OST indices are Lustre's
(``fs-OST000a`` has index 10).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

#: Lustre's ``-1`` stripe count: stripe over every usable OST.
ALL_OSTS = -1

MiB = 1 << 20
#: Bandwidth an OST / an OSS sustains when the cluster description does not say (bytes/s).
DEFAULT_OST_BANDWIDTH = 200 * MiB
DEFAULT_OSS_BANDWIDTH = 600 * MiB
#: No OST is pushed past this fill by iez unless the site says otherwise.
DEFAULT_FILL_CAP = 0.95
#: A congested target still serves this share of its bandwidth (a busy OST is slow, not dead).
MIN_BANDWIDTH_SHARE = 0.02
#: Lustre's OST states (``state`` in the cluster description). Only the first two take new stripes;
#: a degraded OST only when nothing else fits.
OST_STATES = ("active", "degraded", "inactive", "readonly", "nocreate")


@dataclass(frozen=True)
class OSS:
    """An object storage server and the load it last reported."""

    id: str
    cpu_pct: float = 0.0
    mem_pct: float = 0.0
    bandwidth: float = DEFAULT_OSS_BANDWIDTH  # bytes/s over all its OSTs (network, CPU)
    domain: str = ""  # failure domain (rack, controller pair); the OSS itself when empty
    # bytes/s its OSTs outside an allocator's view carry (another pool, OSTs taking no stripes): the
    # server's bandwidth they use is not there for a job either (set by ClusterState.with_osts)
    hidden_load: float = 0.0

    def __post_init__(self) -> None:
        for name in ("cpu_pct", "mem_pct"):
            value = getattr(self, name)
            if not 0.0 <= value <= 100.0:
                raise ValueError(f"OSS {self.id}: {name}={value} is outside 0..100")
        if not self.bandwidth > 0:
            raise ValueError(f"OSS {self.id}: bandwidth={self.bandwidth} must be positive")


@dataclass(frozen=True)
class OST:
    """An object storage target: where stripes land."""

    index: int
    oss_id: str
    kbytes_total: int
    kbytes_avail: int
    bandwidth: float = DEFAULT_OST_BANDWIDTH  # bytes/s the target sustains
    load: float = 0.0  # bytes/s other jobs drive on it now (live congestion): bandwidth a new job cannot have
    state: str = "active"
    pools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.bandwidth > 0:
            raise ValueError(f"OST {self.index}: bandwidth={self.bandwidth} must be positive")
        if not self.load >= 0:
            raise ValueError(f"OST {self.index}: load={self.load} must not be negative")
        if self.state not in OST_STATES:
            raise ValueError(f"OST {self.index}: state {self.state!r} is not one of {', '.join(OST_STATES)}")
        if self.index < 0:
            raise ValueError(f"OST index {self.index} is negative")
        if self.kbytes_total <= 0:
            raise ValueError(f"OST {self.index}: kbytes_total={self.kbytes_total} must be positive")
        if not 0 <= self.kbytes_avail <= self.kbytes_total:
            raise ValueError(
                f"OST {self.index}: kbytes_avail={self.kbytes_avail} is outside 0..kbytes_total={self.kbytes_total}"
            )

    @property
    def bytes_total(self) -> int:
        return self.kbytes_total * 1024

    @property
    def bytes_avail(self) -> int:
        return self.kbytes_avail * 1024

    @property
    def fill(self) -> float:
        """Fraction of the OST already used."""
        return 1.0 - self.kbytes_avail / self.kbytes_total

    @property
    def usable_bandwidth(self) -> float:
        """What a new job can get here: the bandwidth less live congestion, never below a small share."""
        return max(self.bandwidth - self.load, self.bandwidth * MIN_BANDWIDTH_SHARE)

    @property
    def takes_stripes(self) -> bool:
        return self.state in ("active", "degraded")

    def room_bytes(self, fill_cap: float) -> int:
        """Bytes that may still be added without passing ``fill_cap`` (and never past the free space)."""
        used = self.bytes_total - self.bytes_avail
        return max(0, min(self.bytes_avail, int(fill_cap * self.bytes_total) - used))


@dataclass(frozen=True)
class WriteRequest:
    """One file an application will write (a row of the paper's Table I)."""

    app: str
    file: str
    write_bytes: int
    stripe_count: int
    rank: int = 0
    pool: str | None = None

    def __post_init__(self) -> None:
        if self.write_bytes < 0:
            raise ValueError(f"{self.file}: write_bytes={self.write_bytes} is negative")
        if self.stripe_count == 0 or self.stripe_count < ALL_OSTS:
            raise ValueError(f"{self.file}: stripe_count={self.stripe_count} must be >= 1 or -1 (all OSTs)")


@dataclass(frozen=True)
class Allocation:
    """The layout chosen for one file: stripe ``i`` goes to ``osts[i]``."""

    file: str
    stripe_size: int
    osts: tuple[int, ...]
    policy: str = ""

    @property
    def stripe_count(self) -> int:
        return len(self.osts)


@dataclass(frozen=True)
class ClusterState:
    """What an allocator sees: the usable OSTs and the load of their servers."""

    osts: tuple[OST, ...]
    osses: dict[str, OSS] = field(default_factory=dict)
    fill_cap: float = DEFAULT_FILL_CAP

    def __post_init__(self) -> None:
        if not 0.0 < self.fill_cap <= 1.0:
            raise ValueError(f"fill_cap={self.fill_cap} is outside (0, 1]")
        seen: set[int] = set()
        for ost in self.osts:
            if ost.index in seen:
                raise ValueError(f"OST index {ost.index} appears twice")
            seen.add(ost.index)

    @classmethod
    def build(cls, osts: Sequence[OST], osses: Sequence[OSS] = (), fill_cap: float = DEFAULT_FILL_CAP
              ) -> "ClusterState":
        known = {oss.id: oss for oss in osses}
        for ost in osts:
            known.setdefault(ost.oss_id, OSS(ost.oss_id))
        return cls(tuple(sorted(osts, key=lambda o: o.index)), known, fill_cap)

    def oss_of(self, ost: OST) -> OSS:
        return self.osses[ost.oss_id]

    def with_osts(self, osts: Sequence[OST]) -> "ClusterState":
        """The same servers and settings over another OST list (a pool, the OSTs in a state); each
        server keeps the load of the OSTs left out, since it shares the server's bandwidth."""
        kept = {o.index for o in osts}
        hidden: dict[str, float] = {}
        for o in self.osts:
            if o.index not in kept and o.load:
                hidden[o.oss_id] = hidden.get(o.oss_id, 0.0) + o.load
        osses = {k: replace(v, hidden_load=v.hidden_load + hidden[k]) if k in hidden else v
                 for k, v in self.osses.items()}
        return ClusterState(tuple(osts), osses, self.fill_cap)


def oss_usable_bandwidth(server: OSS, osts_load: float, cpu_weight: float = 0.0) -> float:
    """What a new job can get through one OSS: its bandwidth (less ``cpu_weight`` of it at 100 % CPU) less
    the load its OSTs carry (``osts_load`` for those in view, plus its hidden load), never below a small share."""
    nominal = server.bandwidth * (1.0 - cpu_weight * server.cpu_pct / 100.0)
    return max(nominal - osts_load - server.hidden_load, server.bandwidth * MIN_BANDWIDTH_SHARE)


def oss_loads(cluster: "ClusterState") -> dict[str, float]:
    """Bytes/s each OSS's OSTs in view carry."""
    load = {oss_id: 0.0 for oss_id in cluster.osses}
    for o in cluster.osts:
        load[o.oss_id] = load.get(o.oss_id, 0.0) + o.load
    return load


def io_time(cluster: "ClusterState", bytes_per_ost: dict[int, float], cpu_weight: float = 0.0) -> float:
    """A job's modelled I/O time (makespan): the slowest OST or OSS, each streaming the job's bytes at the
    bandwidth the job can get there."""
    worst = 0.0
    per_oss: dict[str, float] = {}
    for ost in cluster.osts:
        b = float(bytes_per_ost.get(ost.index, 0))
        worst = max(worst, b / ost.usable_bandwidth)
        per_oss[ost.oss_id] = per_oss.get(ost.oss_id, 0.0) + b
    load = oss_loads(cluster)
    for oss_id, b in per_oss.items():
        worst = max(worst, b / oss_usable_bandwidth(cluster.osses[oss_id], load[oss_id], cpu_weight))
    return worst


def usable_kbytes(kbytes_avail: int, kbytes_total: int, reserved_bytes: int) -> int:
    """An OST's free space as allocation sees it: reported free (never above its size) less what earlier
    allocations reserved and have not yet written, rounded so the two together never exceed what it reported."""
    return max(0, min(kbytes_avail, kbytes_total) - -(-reserved_bytes // 1024))


def object_bytes(write_bytes: int, stripe_size: int, stripe_count: int) -> int:
    """Bytes of a file's fullest stripe object (the first one), RAID-0 wrap-around included."""
    full_rounds, rest = divmod(write_bytes, stripe_size * stripe_count)
    return full_rounds * stripe_size + min(stripe_size, rest)


def raid0_bytes(write_bytes: int, stripe_size: int, stripe_count: int) -> list[int]:
    """Bytes each stripe object holds for a file of ``write_bytes`` (RAID-0 striping).

    Stripe ``i`` holds chunks ``i, i + count, i + 2*count, ...`` of ``stripe_size`` bytes.
    """
    if stripe_size <= 0 or stripe_count <= 0:
        raise ValueError(f"stripe_size={stripe_size} and stripe_count={stripe_count} must be positive")
    full_rounds, rest = divmod(write_bytes, stripe_size * stripe_count)
    out = [full_rounds * stripe_size] * stripe_count
    for i in range(stripe_count):
        chunk = min(stripe_size, max(0, rest - i * stripe_size))
        out[i] += chunk
    return out
