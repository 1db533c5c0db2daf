"""Domain model shared by every part of iez: servers, targets, requests, layouts.

Units follow Lustre: OST space is in KiB (``kbytes_*`` as ``lctl get_param``
prints it), file sizes and stripe sizes in bytes. OST indices are Lustre's
(``fs-OST000a`` has index 10).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

#: Lustre's ``-1`` stripe count: stripe over every usable OST.
ALL_OSTS = -1


@dataclass(frozen=True)
class OSS:
    """An object storage server and the load it last reported."""

    id: str
    cpu_pct: float = 0.0
    mem_pct: float = 0.0

    def __post_init__(self) -> None:
        for name in ("cpu_pct", "mem_pct"):
            value = getattr(self, name)
            if not 0.0 <= value <= 100.0:
                raise ValueError(f"OSS {self.id}: {name}={value} is outside 0..100")


@dataclass(frozen=True)
class OST:
    """An object storage target: where stripes land."""

    index: int
    oss_id: str
    kbytes_total: int
    kbytes_avail: int
    # Live I/O congestion, 0 (idle) .. 1 (the busiest OST the MDS sees); see iez.mds.view.
    io_load: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.io_load <= 1.0:
            raise ValueError(f"OST {self.index}: io_load={self.io_load} is outside 0..1")
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


@dataclass(frozen=True)
class WriteRequest:
    """One file an application will write (a row of the paper's Table I)."""

    app: str
    file: str
    write_bytes: int
    stripe_count: int
    rank: int = 0

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

    def __post_init__(self) -> None:
        seen: set[int] = set()
        for ost in self.osts:
            if ost.index in seen:
                raise ValueError(f"OST index {ost.index} appears twice")
            seen.add(ost.index)

    @classmethod
    def build(cls, osts: Sequence[OST], osses: Sequence[OSS] = ()) -> "ClusterState":
        known = {oss.id: oss for oss in osses}
        for ost in osts:
            known.setdefault(ost.oss_id, OSS(ost.oss_id))
        return cls(tuple(sorted(osts, key=lambda o: o.index)), known)

    def oss_of(self, ost: OST) -> OSS:
        return self.osses[ost.oss_id]


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
