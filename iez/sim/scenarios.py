"""Named scenarios: the paper's testbed runs (IV-A to IV-F) and harder variants.

Every ``paper-*`` scenario runs on the paper's testbed (3 OSS x 5 OSTs of
10 GiB) that already holds data: 10-22 % of each OST, seeded, so about 84 % is
available, as the paper's figures imply (64 GB of IOR at a mean of 51 %
utilisation means about 125 GB of the 150 GB were available). ``skewed-*``
scenarios start from OSTs 20-80 % full. ``seq-*`` scenarios run jobs one after
another, each allocation seeing the fill the earlier ones left. ``large-*``
scenarios model a big machine.

Families where placement decides the job's speed (issue 12), each with three
seeded variants:

- ``hetfill-*``: unequal fill: an empty OSS added to a file system 80-88 % full,
  fill drawn from 5-90 %, one OST at 92-94 % among OSTs about a third full (an
  even split runs it out of space);
- ``hetbw-*``: unequal bandwidth: one slow OSS, a few congested OSTs;
- ``few-files-*``: fewer files than OSTs;
- ``bigstripe-*``: files whose stripes would pass Lustre's 4 GiB stripe-size
  limit, so capped stripes wrap around their OSTs;
- ``seq-skewed-100jobs-*``: 100 seeded jobs one after another on a skewed
  file system (each job's I/O time and the fill spread after it are reported).

Lustre's own policies (issue 13, tag ``policy``): a flash pool and a disk pool
used by different jobs; a degraded OST (avoided, and used when a file needs
every OST); inactive, no-create and read-only OSTs; a PFL default of 1 MiB on
1 OST, up to 256 MiB on 4, the rest on 8 (plain, and with its components in
the flash and disk pools). ``excluded_bytes`` counts bytes a policy put
outside a file's pool or on an OST that takes no stripes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable

from iez.model import Component, WriteRequest
from iez.sim.cluster import GiB, ClusterSpec, DescribedCluster, FillProfile
from iez.sim.workloads import GB, Job, hacc_io, interleave, ior, job_sequence, with_policy

MiB = 1 << 20
#: A typical site default (``lfs setstripe -E 1M -c 1 -E 256M -c 4 -E -1 -c 8 -S 1M``).
PFL_DEFAULT = (Component(0, MiB, 1, MiB), Component(MiB, 256 * MiB, 4, MiB), Component(256 * MiB, -1, 8, MiB))
#: The same with its small extents on flash and the rest on disk.
PFL_POOLS = (Component(0, MiB, 1, MiB, "flash"), Component(MiB, 256 * MiB, 4, MiB, "flash"),
             Component(256 * MiB, -1, 8, MiB, "disk"))

PAPER_FILL = FillProfile("random", 0.10, 0.22, seed=7)
SKEWED_FILL = FillProfile("random", 0.20, 0.80, seed=11)


@dataclass(frozen=True)
class Scenario:
    """A cluster and the jobs that run on it, in order of arrival."""

    name: str
    description: str
    cluster: ClusterSpec | DescribedCluster
    jobs: Callable[[], list[Job]]
    evaluate_over: str = "pool"  # "pool": every OST; "holding": OSTs holding the files (SSF)
    tags: tuple[str, ...] = field(default_factory=tuple)


def _one(make: Callable[[], Job]) -> Callable[[], list[Job]]:
    """A scenario's jobs: the one job ``make`` builds (when the scenario runs, as every scenario's jobs are)."""
    return lambda: [make()]


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
                cluster, _one(partial(ior, ranks, gb * GB, sc)), tags=(fill_name,)))
        for ranks in (8, 16, 32):
            out.append(Scenario(
                f"{fill_name}-hacc-fpp-sc8-{ranks}",
                f"HACC-IO FPP, {ranks} processes, 10 M particles, stripe count 8",
                cluster, _one(partial(hacc_io, ranks, 8)), tags=(fill_name,)))
        if fill_name == "paper":  # one 32/64 GB file needs 8 OSTs with 4/8 GB free: only the paper's fill has them
            for ranks, gb in ((16, 32), (32, 64)):
                out.append(Scenario(
                    f"paper-ior-ssf-sc8-{ranks}",
                    f"IOR SSF, {ranks} processes writing one {gb} GB file, stripe count 8",
                    cluster, _one(partial(ior, 1, gb * GB, 8, mode="ssf")), evaluate_over="holding",
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
    out.extend(_placement_families())
    out.extend(_policy_scenarios())
    out.extend(_mirror_scenarios())
    return out


def _mixed_sizes(app: str, directory: str) -> Job:
    """Files of every size a PFL default meets: 512 KiB, 64 MiB, 1 GiB and 4 GiB, 16 of each (but 8 of 4 GiB)."""
    files = [(f"small.{r:03d}", 512 << 10) for r in range(16)] + [(f"mid.{r:03d}", 64 * MiB) for r in range(16)]
    files += [(f"big.{r:03d}", GiB) for r in range(16)] + [(f"huge.{r:03d}", 4 * GiB) for r in range(8)]
    return Job(app, tuple(WriteRequest(app, f"{directory}/{name}", size, 1, r) for r, (name, size) in
                          enumerate(files)))


def _policy_scenarios() -> list[Scenario]:
    """Lustre's own policies: pools, OST states, PFL defaults (issue 13)."""
    out: list[Scenario] = []
    # One flash OSS (4 OSTs, 4x the bandwidth, 4x the server's) beside three disk OSSs.
    flash_disk = ClusterSpec(4, 4, 10 * GiB, FillProfile("random", 0.10, 0.30, 101), oss_bandwidth_factor=(4, 1, 1, 1),
                             ost_bandwidth_factor=tuple((p, 4.0) for p in range(4)),
                             pools=(("flash", (0, 1, 2, 3)), ("disk", tuple(range(4, 16)))))
    out.append(Scenario(
        "policy-pools-flash-disk",
        "a checkpoint job in pool flash (16 files of 1 GB, stripe count 2) and HACC-IO in pool disk (16 processes, "
        "stripe count 4) at once",
        flash_disk, lambda: [interleave([with_policy(ior(16, 16 * GB, 2, app="ckpt"), pool="flash"),
                                         with_policy(hacc_io(16, 4), pool="disk")])], tags=("policy",)))
    out.append(Scenario(
        "policy-degraded-ost",
        "IOR FPP, 16 processes writing 32 GB, stripe count 4; OST 5 degraded (RAID rebuild): no file needs it",
        ClusterSpec(3, 5, 10 * GiB, FillProfile("random", 0.10, 0.22, 102), states=((4, "degraded"),)),
        lambda: [ior(16, 32 * GB, 4)], tags=("policy",)))
    out.append(Scenario(
        "policy-degraded-ost-needed",
        "IOR FPP, 4 files of 2 GB at stripe count 15 (every OST); OST 5 degraded: each file needs it",
        ClusterSpec(3, 5, 10 * GiB, FillProfile("random", 0.10, 0.22, 103), states=((4, "degraded"),)),
        lambda: [ior(4, 8 * GB, 15)], tags=("policy",)))
    out.append(Scenario(
        "policy-inactive-ost",
        "IOR FPP, 32 processes writing 32 GB, stripe count 8; OST 3 inactive, OST 10 not accepting creates, "
        "OST 13 read-only",
        ClusterSpec(3, 5, 10 * GiB, FillProfile("random", 0.10, 0.22, 104),
                    states=((2, "inactive"), (9, "nocreate"), (12, "readonly"))),
        lambda: [ior(32, 32 * GB, 8)], tags=("policy",)))
    out.append(Scenario(
        "policy-pfl-default",
        "PFL default 1 MiB on 1 OST, up to 256 MiB on 4, the rest on 8: 56 files of 512 KiB to 4 GiB",
        _paper(FillProfile("random", 0.10, 0.22, 105)),
        lambda: [with_policy(_mixed_sizes("pfl-mix", "/lustre/scratch/pfl"), components=PFL_DEFAULT)],
        tags=("policy",)))
    out.append(Scenario(
        "policy-pfl-pools",
        "PFL default with its first two extents in pool flash and the rest in pool disk: 56 files of 512 KiB to "
        "4 GiB",
        flash_disk, lambda: [with_policy(_mixed_sizes("pfl-pools", "/lustre/scratch/pfl"), components=PFL_POOLS)],
        tags=("policy",)))
    return out


def _placement_families() -> list[Scenario]:
    """The scenario families of issue 12: where the choice of OSTs sets the job's I/O time."""
    out: list[Scenario] = []
    # An empty OSS joins a file system 80-88 % full (below the 95 % cap): the old OSTs still have room.
    new_oss_jobs = ((lambda: [ior(32, 16 * GB, 4)], "IOR FPP, 32 processes writing 16 GB, stripe count 4"),
                    (lambda: [hacc_io(32, 8)], "HACC-IO FPP, 32 processes, stripe count 8"),
                    (lambda: [ior(64, 24 * GB, 1)], "IOR FPP, 64 processes writing 24 GB, stripe count 1"))
    for v, (seed, (jobs, what)) in enumerate(zip((21, 22, 23), new_oss_jobs), start=1):
        fill = FillProfile("random", 0.80, 0.88, seed, tuple((p, 0.0) for p in range(15, 20)))
        out.append(Scenario(f"hetfill-new-oss-{v}", f"{what}; a new empty OSS (OSTs 16-20) beside three "
                            "80-88 % full", ClusterSpec(4, 5, 10 * GiB, fill), jobs, tags=("hetfill",)))
    wide_jobs = ((lambda: [ior(16, 24 * GB, 4)], "IOR FPP, 16 processes writing 24 GB, stripe count 4"),
                 (lambda: [ior(32, 24 * GB, 8)], "IOR FPP, 32 processes writing 24 GB, stripe count 8"),
                 (lambda: [hacc_io(16, 2)], "HACC-IO FPP, 16 processes, stripe count 2"))
    for v, (seed, (jobs, what)) in enumerate(zip((31, 32, 33), wide_jobs), start=1):
        out.append(Scenario(f"hetfill-wide-{v}", f"{what}; fill drawn from 5-90 %",
                            ClusterSpec(3, 5, 10 * GiB, FillProfile("random", 0.05, 0.90, seed)), jobs,
                            tags=("hetfill",)))
    one_full_jobs = ((lambda: [ior(30, 30 * GiB, 1)], "IOR FPP, 30 files of 1 GiB, stripe count 1"),
                     (lambda: [ior(15, 15 * 1536 << 20, 4)], "IOR FPP, 15 files of 1.5 GiB, stripe count 4"),
                     (lambda: [ior(16, 24 * GiB, 8)], "IOR FPP, 16 files of 1.5 GiB, stripe count 8"))
    for v, (seed, position, full, (jobs, what)) in enumerate(
            zip((41, 42, 43), (6, 0, 12), (0.94, 0.93, 0.92), one_full_jobs), start=1):
        fill = FillProfile("random", 0.30, 0.40, seed, ((position, full),))
        out.append(Scenario(f"hetfill-one-full-{v}", f"{what}; OST {position + 1} {full:.0%} full among OSTs "
                            "30-40 % full (an even split runs it out of space)",
                            ClusterSpec(3, 5, 10 * GiB, fill), jobs, tags=("hetfill",)))
    # Unequal bandwidth: one slow OSS; congested OSTs (load from other jobs, a share of their bandwidth).
    slow_jobs = ((lambda: [ior(16, 32 * GB, 8)], "IOR FPP, 16 processes writing 32 GB, stripe count 8"),
                 (lambda: [ior(64, 48 * GB, 4)], "IOR FPP, 64 processes writing 48 GB, stripe count 4"),
                 (lambda: [hacc_io(32, 8)], "HACC-IO FPP, 32 processes, stripe count 8"))
    for v, (seed, factor, (jobs, what)) in enumerate(
            zip((51, 52, 53), ((1, 1, 1 / 3), (0.5, 1, 1), (1, 0.25, 1)), slow_jobs), start=1):
        out.append(Scenario(f"hetbw-slow-oss-{v}", f"{what}; one OSS slower than the others",
                            ClusterSpec(3, 5, 10 * GiB, FillProfile("random", 0.10, 0.22, seed),
                                        oss_bandwidth_factor=factor), jobs, tags=("hetbw",)))
    congested = (((2, 0.9), (7, 0.75), (11, 0.95)), ((0, 0.8), (1, 0.8), (2, 0.8), (3, 0.8)),
                 ((4, 0.5), (9, 0.9), (13, 0.7), (14, 0.98)))
    congested_jobs = ((lambda: [ior(16, 32 * GB, 8)], "IOR FPP, 16 processes writing 32 GB, stripe count 8"),
                      (lambda: [ior(64, 48 * GB, 1)], "IOR FPP, 64 processes writing 48 GB, stripe count 1"),
                      (lambda: [ior(1, 32 * GB, 8, mode="ssf")], "IOR SSF, one 32 GB file, stripe count 8"))
    for v, (seed, loads, (jobs, what)) in enumerate(zip((61, 62, 63), congested, congested_jobs), start=1):
        out.append(Scenario(f"hetbw-congested-{v}", f"{what}; some OSTs busy with other jobs",
                            ClusterSpec(3, 5, 10 * GiB, FillProfile("random", 0.10, 0.22, seed),
                                        ost_load_share=loads), jobs, tags=("hetbw",)))
    # Fewer files than OSTs.
    out.append(Scenario("few-files-4x1-15osts", "IOR FPP, 4 files of 4 GiB, stripe count 1, on 15 OSTs / 3 OSS",
                        _paper(FillProfile("random", 0.10, 0.22, 71)), lambda: [ior(4, 16 * GiB, 1)],
                        tags=("few-files",)))
    out.append(Scenario("few-files-64x1-64osts", "IOR FPP, 64 files of 1 GiB, stripe count 1, on 64 OSTs "
                        "55-85 % full", ClusterSpec(16, 4, 10 * GiB, FillProfile("random", 0.55, 0.85, 72)),
                        lambda: [ior(64, 64 * GiB, 1)], tags=("few-files",)))
    out.append(Scenario("few-files-3x4-15osts", "IOR FPP, 3 files of 6 GiB, stripe count 4, on 15 OSTs "
                        "20-80 % full", _paper(FillProfile("random", 0.20, 0.80, 73)),
                        lambda: [ior(3, 18 * GiB, 4)], tags=("few-files",)))
    # Stripes past Lustre's 4 GiB - 64 KiB limit: the stripe size is capped and the file wraps around.
    big = ClusterSpec(3, 5, 100 * GiB, FillProfile("random", 0.10, 0.40, 81))
    out.append(Scenario("bigstripe-ssf-64g-sc8", "IOR SSF, one 64 GiB file at stripe count 8 (8 GiB stripes "
                        "capped, wrapping around)", big, lambda: [ior(1, 64 * GiB, 8, mode="ssf")],
                        evaluate_over="holding", tags=("bigstripe",)))
    out.append(Scenario("bigstripe-ssf-160g-sc4", "IOR SSF, one 160 GiB file at stripe count 4 (40 GiB per "
                        "object, about 10 rounds of capped stripes)",
                        ClusterSpec(3, 5, 100 * GiB, FillProfile("random", 0.10, 0.40, 82)),
                        lambda: [ior(1, 160 * GiB, 4, mode="ssf")], evaluate_over="holding", tags=("bigstripe",)))
    out.append(Scenario("bigstripe-fpp-4x48g-sc2", "IOR FPP, 4 files of 48 GiB at stripe count 2 (24 GiB per "
                        "object)", ClusterSpec(3, 5, 100 * GiB, FillProfile("random", 0.10, 0.40, 83)),
                        lambda: [ior(4, 4 * 48 * GiB, 2)], tags=("bigstripe",)))
    # 100 jobs one after another on a skewed file system.
    for v, seed in enumerate((91, 92, 93), start=1):
        out.append(Scenario(f"seq-skewed-100jobs-{v}", "100 seeded jobs one after another (IOR / HACC-IO FPP "
                            "and shared files, stripe counts 1-8 and -1, 4-32 ranks of 64 MiB-2 GiB)",
                            ClusterSpec(4, 6, 512 * GiB, FillProfile("random", 0.20, 0.80, seed)),
                            partial(job_sequence, 100, seed), tags=("sequence",)))
    return out


def _with_mirrors(job: Job, count: int) -> Job:
    return Job(job.app, tuple(replace(r, mirror_count=count) for r in job.requests))


def _mirrored_ior_fpp(count: int) -> Job:
    return _with_mirrors(ior(16, 16 * GB, 2), count)


def _mirror_scenarios() -> list[Scenario]:
    """Mirrors across failure domains (issue 17, tag ``mirror``): each row carries ``mirror_report``
    (:mod:`iez.sim.failures`: files readable with one and two OSSs or domains failed, reads with a hot server
    with and without skipping, the write cost of the copies)."""
    out = []
    for count in (2, 3):
        out.append(Scenario(
            f"mirror-ior-fpp-{count}copies", f"IOR FPP, 16 processes writing 16 GB with {count} mirrors each, "
            "stripe count 2, 6 OSS x 4 OSTs", ClusterSpec(6, 4, 20 * GiB, PAPER_FILL),
            _one(partial(_mirrored_ior_fpp, count)), tags=("mirror",)))
    out.append(Scenario(
        "mirror-racks-hacc-2copies", "HACC-IO, 16 processes, 2 mirrors, stripe count 2, 6 OSS x 4 OSTs in racks "
        "of 2 OSSs (the failure domain)", ClusterSpec(6, 4, 20 * GiB, PAPER_FILL, oss_per_domain=2),
        lambda: [_with_mirrors(hacc_io(16, 2), 2)], tags=("mirror",)))
    out.append(Scenario(
        "mirror-congested-ior-2copies", "IOR FPP, 16 processes, 2 mirrors, stripe count 1, 6 OSS x 4 OSTs, "
        "two congested OSTs", ClusterSpec(6, 4, 20 * GiB, PAPER_FILL, ost_load_share=((0, 0.8), (5, 0.8))),
        lambda: [_with_mirrors(ior(16, 16 * GB, 1), 2)], tags=("mirror",)))
    return out


SCENARIOS: dict[str, Scenario] = {s.name: s for s in _scenarios()}


def resolve(names: str) -> list[Scenario]:
    """Scenarios from a comma list; ``all`` means every one, a tag (``paper``, ``skewed``, ``hetfill``,
    ``hetbw``, ``few-files``, ``bigstripe``, ``sequence``, ``large``, ``policy``, ``mirror``) a family."""
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
