"""Named scenarios: the paper's testbed runs (IV-A to IV-F) and harder variants.

Every ``paper-*`` scenario runs on the paper's testbed (3 OSS x 5 OSTs of
10 GiB) that already holds data: 10-22 % of each OST, seeded, so about 84 % is
available, as the paper's figures imply (64 GB of IOR at a mean of 51 %
utilisation means about 125 GB of the 150 GB were available). ``skewed-*``
scenarios start from OSTs 20-80 % full. ``seq-*`` scenarios run jobs one after
another, each allocation seeing the fill the earlier ones left. ``large-*``
scenarios model a big machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from iez.sim.cluster import GiB, ClusterSpec, FillProfile
from iez.sim.workloads import GB, Job, hacc_io, interleave, ior

PAPER_FILL = FillProfile("random", 0.10, 0.22, seed=7)
SKEWED_FILL = FillProfile("random", 0.20, 0.80, seed=11)


@dataclass(frozen=True)
class Scenario:
    """A cluster and the jobs that run on it, in order of arrival."""

    name: str
    description: str
    cluster: ClusterSpec
    jobs: Callable[[], list[Job]]
    evaluate_over: str = "pool"  # "pool": every OST; "holding": OSTs holding the files (SSF)
    tags: tuple[str, ...] = field(default_factory=tuple)


def _paper(fill: FillProfile = PAPER_FILL) -> ClusterSpec:
    return ClusterSpec(oss_count=3, osts_per_oss=5, ost_bytes=10 * GiB, fill=fill)


def _scenarios() -> list[Scenario]:
    out: list[Scenario] = []
    for fill_name, fill in (("paper", PAPER_FILL), ("skewed", SKEWED_FILL)):
        cluster = _paper(fill)
        ior_fpp = [(8, 8, 16), (8, 16, 32), (8, 64, 64), (4, 64, 64)]
        if fill_name == "skewed":  # 20-80 % full leaves ~75 GB: keep the runs that fit
            ior_fpp = [(8, 16, 32), (4, 16, 32), (8, 64, 48), (4, 64, 48)]
        for sc, ranks, gb in ior_fpp:
            out.append(Scenario(
                f"{fill_name}-ior-fpp-sc{sc}-{ranks}",
                f"IOR FPP, {ranks} processes writing {gb} GB, stripe count {sc}",
                cluster, lambda sc=sc, ranks=ranks, gb=gb: [ior(ranks, gb * GB, sc)], tags=(fill_name,)))
        for ranks in (8, 16, 32):
            out.append(Scenario(
                f"{fill_name}-hacc-fpp-sc8-{ranks}",
                f"HACC-IO FPP, {ranks} processes, 10 M particles, stripe count 8",
                cluster, lambda ranks=ranks: [hacc_io(ranks, 8)], tags=(fill_name,)))
        if fill_name == "paper":  # one 32/64 GB file needs 8 OSTs with 4/8 GB free: only the paper's fill has them
            for ranks, gb in ((16, 32), (32, 64)):
                out.append(Scenario(
                    f"paper-ior-ssf-sc8-{ranks}",
                    f"IOR SSF, {ranks} processes writing one {gb} GB file, stripe count 8",
                    cluster, lambda gb=gb: [ior(1, gb * GB, 8, mode="ssf")], evaluate_over="holding",
                    tags=(fill_name,)))
        out.append(Scenario(
            f"{fill_name}-concurrent",
            "HACC-IO (16 processes, stripe count 8) and IOR (16 processes, 32 GB, stripe count 4) at once",
            cluster, lambda: [interleave([hacc_io(16, 8), ior(16, 32 * GB, 4)])], tags=(fill_name,)))
    out.append(Scenario(
        "seq-mixed-jobs",
        "Five jobs one after another (IOR and HACC-IO, stripe counts 1, 4, 8, -1) on the paper's testbed",
        _paper(),
        lambda: [ior(16, 8 * GB, 4, app="ior-a"), hacc_io(16, 8), ior(32, 8 * GB, 1, app="ior-b"),
                 ior(8, 4 * GB, -1, app="ior-wide"), hacc_io(8, 8, app="hacc-b")],
        tags=("sequence",)))
    out.append(Scenario(
        "large-fpp-1000osts",
        "250 OSS x 4 OSTs of 100 TiB, 10-60 % full: 20,000 files of 4 GiB at stripe count 4, "
        "then 2,000 checkpoint files of 64 GiB at stripe count 16",
        ClusterSpec(oss_count=250, osts_per_oss=4, ost_bytes=100 * 1024 * GiB,
                    fill=FillProfile("random", 0.10, 0.60, seed=3),
                    ost_bandwidth=2 * GiB, oss_bandwidth=6 * GiB),
        lambda: [ior(20000, 20000 * 4 * GiB, 4, app="sim-fpp"), ior(2000, 2000 * 64 * GiB, 16, app="ckpt")],
        tags=("large",)))
    return out


SCENARIOS: dict[str, Scenario] = {s.name: s for s in _scenarios()}


def resolve(names: str) -> list[Scenario]:
    """Scenarios from a comma list; ``all`` means every one, ``paper`` / ``skewed`` a family."""
    chosen: list[Scenario] = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name == "all":
            chosen.extend(SCENARIOS.values())
        elif name in SCENARIOS:
            chosen.append(SCENARIOS[name])
        elif any(name in s.tags for s in SCENARIOS.values()):
            chosen.extend(s for s in SCENARIOS.values() if name in s.tags)
        else:
            raise ValueError(f"unknown scenario {name!r}; `iez simulate --list` shows them")
    if not chosen:
        raise ValueError("no scenario named")
    return list(dict.fromkeys(chosen))
