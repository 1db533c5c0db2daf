"""A seeded family of random, realistic placement instances (issue 29), to judge ``iez`` beyond the named scenarios.

Why: the named scenarios were written by the people who tuned the allocator.
An instance here draws, from one seed, a heterogeneous cluster (OSS and OST
bandwidths, uneven fill and live load, a pool on some servers, degraded and
inactive OSTs) and a few applications' jobs mixing file-per-process and
shared files, small files at stripe count -1, wrapped files (larger than
stripe count x 4 GiB), PFL templates, pooled files and mirrored files. The same
seed always gives the same instance (:func:`instance`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from iez.model import ALL_OSTS, EOF_END, OSS, OST, ClusterState, Component, WriteRequest
from iez.sim.cluster import DescribedCluster
from iez.sim.scenarios import Scenario
from iez.sim.workloads import Job

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

#: Pool name the generator gives the servers it puts in a pool.
POOL = "flash"


@dataclass(frozen=True)
class Instance:
    """One drawn instance: its seed, the scenario the simulator runs, and a one-line summary."""

    seed: int
    scenario: Scenario
    summary: str


#: How many OSSs an instance's cluster has, at least and at most (``instance(seed, servers=...)`` draws others).
SERVERS = (2, 8)


def _cluster(rng: random.Random, servers: tuple[int, int] = SERVERS) -> tuple[ClusterState, bool]:
    n_oss = rng.randint(*servers)
    osses, osts = [], []
    pooled = rng.random() < 0.4
    pool_servers = set(rng.sample(range(n_oss), k=max(1, n_oss // 3))) if pooled else set()
    index = 0
    for k in range(n_oss):
        per = rng.randint(2, 6)
        ost_bw = rng.choice((200, 400, 800, 1500)) * MiB
        oss_bw = ost_bw * per * rng.choice((0.5, 0.75, 1.0, 2.0))  # some servers cap their OSTs' sum
        osses.append(OSS(f"oss{k}", cpu_pct=rng.choice((0.0, 0.0, 30.0, 80.0)), bandwidth=oss_bw))
        for _ in range(per):
            total_kb = rng.choice((256 << 20, 1 << 30, 4 << 30))  # 256 GiB - 4 TiB, in KiB
            fill = rng.uniform(0.0, 0.85)
            state = rng.choices(("active", "degraded", "inactive"), weights=(0.9, 0.06, 0.04))[0]
            load = ost_bw * rng.choice((0.0, 0.0, 0.0, 0.3, 0.9))
            osts.append(OST(index, f"oss{k}", total_kb, int(total_kb * (1 - fill)), ost_bw, load, state,
                            (POOL,) if k in pool_servers else ()))
            index += 1
    if not any(o.takes_stripes and (not pooled or POOL in o.pools) for o in osts):
        osts[0] = OST(osts[0].index, osts[0].oss_id, osts[0].kbytes_total, osts[0].kbytes_avail, osts[0].bandwidth,
                      osts[0].load, "active", osts[0].pools)
    return ClusterState.build(osts, osses, rng.choice((0.9, 0.95))), pooled


def _job(rng: random.Random, app: str, pooled: bool, n_osts: int) -> Job:
    kind = rng.choice(("fpp", "fpp", "small", "wrapped", "shared", "pfl", "mixed"))
    pool = POOL if pooled and rng.random() < 0.5 else None
    mirrors = 2 if rng.random() < 0.1 else 1
    requests = []
    files = rng.randint(4, 64)
    pfl = (Component(0, 1 * MiB, 1), Component(1 * MiB, 256 * MiB, 4), Component(256 * MiB, EOF_END, ALL_OSTS))
    for i in range(files):
        count = rng.choice((1, 2, 4, 8, ALL_OSTS))
        size = int(rng.choice((1, 16, 256, 1024, 8192, 65536)) * MiB * rng.uniform(0.8, 1.2))
        stripe_size: int | None = None
        components: tuple[Component, ...] = ()
        if kind == "small":
            count, size, stripe_size = ALL_OSTS, rng.choice((256 * KiB, 1 * MiB, 3 * MiB)), 128 * KiB
        elif kind == "wrapped":
            count = rng.choice((2, 4, 8))
            size = count * 4 * GiB + rng.randint(1, 8) * GiB + rng.randint(0, 1 << 20)
        elif kind == "shared":
            files, count, size = 1, ALL_OSTS, rng.randint(64, 512) * GiB
        elif kind == "pfl" or (kind == "mixed" and rng.random() < 0.3):
            components = pfl
        if isinstance(count, int) and count > n_osts:
            count = ALL_OSTS
        requests.append(WriteRequest(app, f"/{app}/f{i}", max(size, 1), count, rank=i if files > 1 else -1,
                                     pool=pool, components=components, stripe_size=stripe_size,
                                     mirror_count=mirrors if not components else 1))
        if len(requests) >= files:
            break
    return Job(app, tuple(requests))


def instance(seed: int, servers: tuple[int, int] = SERVERS) -> Instance:
    """The instance drawn from ``seed``: a cluster of ``servers`` OSSs (at least, at most) and 1-3 applications'
    jobs, arriving one after another."""
    rng = random.Random(seed)
    cluster, pooled = _cluster(rng, servers)
    jobs = [_job(rng, f"app{a}", pooled, len(cluster.osts)) for a in range(rng.randint(1, 3))]
    summary = (f"seed {seed}: {len(cluster.osses)} OSS, {len(cluster.osts)} OSTs"
               f"{', pool ' + POOL if pooled else ''}; jobs " +
               ", ".join(f"{len(j.requests)} files" for j in jobs))
    scenario = Scenario(f"family-{seed}", summary, DescribedCluster(cluster, f"family-{seed}"), lambda: jobs)
    return Instance(seed, scenario, summary)
