"""Emulated clusters on which a job is run placed by iez, rr and qos, measured wall-clock (``iez demo``,
``benchmarks/measured_placement.py``).

A scenario is a cluster description (the JSON contract of :mod:`iez.sim.description`: sizes, fill,
each server's bandwidth, which is the emulated hardware's physics), the jobs to place, and the
competing jobs already running on it: real processes reading their datasets through the emulated
bandwidth, which the MDS learns about only from the servers' counters.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

MiB = 1 << 20
GiB_KB = 1 << 20
#: The HACC-IO file of the paper's 8-rank run (10 M particles), as the demo's job writes it.
HACC_8 = 803_405_824


@dataclass(frozen=True)
class Job:
    """An application: ``ranks`` processes, one file of ``file_bytes`` each, ``stripe_count`` stripes."""

    app: str
    ranks: int = 16
    stripe_count: int = 8
    file_bytes: int = HACC_8 * 8 // 16

    @property
    def prefix(self) -> str:
        return self.app.upper().replace("-", "")


@dataclass(frozen=True)
class Competitor:
    """Another job already running: it re-reads a dataset striped over ``osts`` (one file per OSS it
    uses, as Lustre places a job's files within the pool it was given), as fast as the servers let it
    within ``share`` of each server (its I/O class's cap, as a site's NRS TBF rule holds a job)."""

    name: str
    osts: tuple[int, ...]
    share: float = 0.45


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    description: dict
    jobs: tuple[Job, ...] = (Job("hacc-io"),)
    competitors: tuple[Competitor, ...] = ()
    notes: dict = field(default_factory=dict)


def cluster(osses: list[dict], fill_cap: float = 0.95) -> dict:
    """A description from ``{"id", "bandwidth_mib_s", "osts": [(kbytes_total, fill, bandwidth_mib_s)]}``:
    OST indices run OSS by OSS."""
    out, index = [], 0
    for oss in osses:
        osts = []
        for total, fill, bw in oss["osts"]:
            osts.append({"index": index, "kbytes_total": total, "kbytes_avail": int(total * (1 - fill)),
                         "bandwidth_mib_s": bw})
            index += 1
        out.append({"id": oss["id"], "bandwidth_mib_s": oss["bandwidth_mib_s"], "osts": osts})
    return {"fill_cap": fill_cap, "oss": out}


def used_osses(n: int, fill: tuple[float, float] = (0.20, 0.80), seed: int = 11, ost_gib: int = 10,
               per: int = 5, ost_mib_s: float = 200, oss_mib_s: float = 600) -> list[dict]:
    """The paper's testbed: ``n`` OSS x ``per`` OSTs of ``ost_gib`` GiB, unevenly used (seeded)."""
    rng = random.Random(seed)
    return [{"id": f"oss{k}", "bandwidth_mib_s": oss_mib_s,
             "osts": [(ost_gib * GiB_KB, rng.uniform(*fill), ost_mib_s) for _ in range(per)]} for k in range(n)]


def new_oss(k: int, ost_gib: int = 10, per: int = 5, ost_mib_s: float = 200, oss_mib_s: float = 600) -> dict:
    return {"id": f"oss{k}", "bandwidth_mib_s": oss_mib_s, "osts": [(ost_gib * GiB_KB, 0.0, ost_mib_s)] * per}


def demo() -> Scenario:
    """``iez demo``: a used file system of 3 OSS, a 4th OSS just added (empty), and another job busy on oss0."""
    return Scenario(
        "congested-oss-and-new-oss",
        "3 OSS x 5 OSTs of 10 GiB, 20-80 % full (seeded), plus a 4th OSS just added, empty; another job "
        "re-reads its dataset on oss0's OSTs (up to 45 % of each server); 200 MiB/s per OST, 600 per OSS",
        cluster(used_osses(3) + [new_oss(3)]),
        competitors=(Competitor("other-job", (0, 1, 2, 3, 4)),))


def benchmark() -> list[Scenario]:
    """The measured placement benchmark's five clusters (benchmarks/measured_placement.py)."""
    slow = used_osses(3)
    slow[2] = {**slow[2], "bandwidth_mib_s": 200}  # an older OSS: a third of the others' network
    full = used_osses(3, fill=(0.30, 0.50))
    full[1]["osts"][2] = (10 * GiB_KB, 0.93, 200)  # one OST nearly full (cap 95 %)
    return [
        Scenario("competing-job", "3 OSS x 5 OSTs, 20-80 % full; another job re-reads its dataset on oss0 "
                 "(up to 45 % of each server)", cluster(used_osses(3)),
                 competitors=(Competitor("other-job", (0, 1, 2, 3, 4)),)),
        Scenario("new-empty-oss", "3 OSS x 5 OSTs 50-85 % full, plus a 4th OSS just added, empty",
                 cluster(used_osses(3, fill=(0.50, 0.85)) + [new_oss(3)])),
        Scenario("slow-oss", "3 OSS x 5 OSTs, 20-80 % full; oss2 has 200 MiB/s of network against 600",
                 cluster(slow)),
        Scenario("nearly-full-ost", "3 OSS x 5 OSTs 30-50 % full, OST 7 at 93 % (cap 95 %)", cluster(full),
                 jobs=(Job("hacc-io", ranks=16, stripe_count=4),)),
        Scenario("concurrent-jobs", "3 OSS x 5 OSTs, 20-80 % full; three jobs at once (8 ranks each, stripe "
                 "counts 8, 4, 2) beside another job on oss0", cluster(used_osses(3)),
                 jobs=(Job("hacc-io", 8, 8, HACC_8 // 2), Job("ior", 8, 4, HACC_8 // 2), Job("vpic", 8, 2, HACC_8 // 4)),
                 competitors=(Competitor("other-job", (0, 1, 2, 3, 4)),)),
    ]
