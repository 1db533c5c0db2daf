"""Issue 29's property over a seeded random family (iez/sim/family.py): iez at the bound or no slower than the
best simple alternative, within the fill cap, no ENOSPC, and no refusal where the size-aware greedy places all.

Each job is judged on its own on the instance's cluster, against the greedy, rr and qos on the same job. Jobs of
mirrored files are judged too: iez and the greedy keep every copy in failure domains no other copy uses, and the
bound counts what that forces (iez.sim.mirror_bounds). Not judged for speed: jobs where iez places more files
than the greedy (more bytes)."""

import sys
from pathlib import Path

import pytest

from iez.sim.engine import prepare, run
from iez.sim.family import instance
from iez.sim.scenarios import Scenario

pytestmark = pytest.mark.slow

#: A modest count keeps this test to seconds; benchmarks/placement_family.py runs 200 and more.
SEEDS = range(12)
#: Known open failures (issue 29, left): strict, so a fix shows up as a pass to record here. Fixed: seed 7 (a PFL
#: component's objects follow the file's offsets, not RAID-0 from stripe 0: the cap was passed by a few MB) and
#: seed 8 (a stripe-count -1 class placed last onto an OSS the earlier classes had filled: the batch repair).
OPEN: dict[int, str] = {}


def _case(seed):
    return pytest.param(seed, marks=pytest.mark.xfail(strict=True, reason=OPEN[seed])) if seed in OPEN else seed


def judge(seed: int) -> list[str]:
    inst = instance(seed)
    problems = []
    for k, job in enumerate(inst.scenario.jobs()):
        scenario = Scenario(f"{inst.scenario.name}/job{k}", "", inst.scenario.cluster, lambda job=job: [job])
        prepared = prepare(scenario)
        rows = {p: run(scenario, p, prepared=prepared) for p in ("iez", "greedy", "rr", "qos")}
        iez, greedy = rows["iez"], rows["greedy"]
        where = f"{inst.summary}, job {k}"
        if iez.enospc_files:
            problems.append(f"{where}: {iez.enospc_files} ENOSPC")
        if iez.max_fill > prepared.cluster.fill_cap + 1e-9:
            problems.append(f"{where}: max fill {iez.max_fill:.4f} past the cap")
        if iez.refused and not greedy.refused:
            problems.append(f"{where}: iez refused {len(iez.refused)} files the greedy placed")
        if len(iez.refused) < len(greedy.refused) or not iez.makespan_bound_s:
            continue
        best = min(rows[p].makespan_s for p in ("greedy", "rr", "qos") if not rows[p].enospc_files)
        if iez.makespan_s > 1.05 * iez.makespan_bound_s and iez.makespan_s > 1.01 * best:
            problems.append(f"{where}: iez {iez.makespan_s:.1f}s, bound {iez.makespan_bound_s:.1f}s, best simple "
                            f"{best:.1f}s")
    return problems


#: The worst iez/greedy of the first 200-instance benchmark (2.39 over its sequence of jobs, 2.19 since the batch
#: repair, the greedy refusing 28 files iez places; job by job it holds).
WORST = 175


@pytest.mark.parametrize("seed", [_case(s) for s in [*SEEDS, WORST]])
def test_iez_on_a_random_instance(seed):
    assert judge(seed) == []


def test_seed_2_over_its_sequence_is_no_slower_than_the_greedy():
    """Seed 2 broke the benchmark's property over its sequence of jobs (iez / greedy 2.64: the mirrored job's
    domains were dealt by the bandwidth their OSTs report, putting a copy on a server whose OSS lets through a
    fraction of it). Domains dealt by usable speed over the file's pool: 0.91, every copy in domains of its own."""
    inst = instance(2)
    prepared = prepare(inst.scenario)
    iez, greedy = (run(inst.scenario, p, prepared=prepared) for p in ("iez", "greedy"))
    assert not iez.refused and not iez.enospc_files
    assert iez.makespan_s <= 1.01 * greedy.makespan_s


def test_seed_143_refuses_only_files_whose_copies_cannot_have_domains_of_their_own():
    """Seed 143 refused two mirrored files at stripe count 4 that fit: the copy its group could not hold was
    left the one domain of two OSTs its other copy did not use. A refused mirrored file now tries the splits of
    its pool's domains into one set per copy: only the files whose copies need more distinct OSTs than the
    instance has stay refused."""
    inst = instance(143)
    prepared = prepare(inst.scenario)
    iez = run(inst.scenario, "iez", prepared=prepared)
    files = {r.file: r for job in prepared.jobs for r in job.requests}
    osts = sum(o.takes_stripes for o in prepared.cluster.osts)
    assert iez.refused and not iez.enospc_files
    for refused in iez.refused:
        r = files[refused["file"]]
        assert r.mirror_count * r.stripe_count > osts, refused


def test_seed_101_small_mirrored_files_at_minus_1_keep_off_the_slow_servers():
    """Seed 101: 59 small files at stripe count -1 with 2 copies. Each copy took every OST of its group of failure
    domains, 20 MiB/s OSTs and a server letting 12.5 MiB/s an OST through included (iez 0.087 s, greedy 0.037 s,
    bound 0.016 s). Domains chosen per file: each copy on servers the file finishes soonest on, every copy in
    domains of its own, within 5 % of the bound."""
    from iez.allocate import make_policy
    from iez.allocate.mirrors import mirror_domains_shared

    inst = instance(101)
    prepared = prepare(inst.scenario)
    iez, greedy = (run(inst.scenario, p, prepared=prepared) for p in ("iez", "greedy"))
    assert not iez.refused and not iez.enospc_files
    assert iez.makespan_s <= 1.05 * iez.makespan_bound_s
    assert iez.makespan_s <= 1.01 * greedy.makespan_s
    for job in prepared.jobs:
        placement = make_policy("iez").place(prepared.cluster, job.requests)
        assert not any(mirror_domains_shared(prepared.cluster, a) for a in placement.allocations)


def test_seed_179_mirrored_jobs_end_at_what_their_failure_domains_force():
    """Seed 179 (iez 986 s over its sequence, greedy 770 s). Job 0: pool flash has two servers and every file two
    copies, so each file has a copy on each; a -1 copy takes every OST of its server, two of oss1's at 20 MiB/s:
    iez is at the bound that forces (``domain_bound``, part of ``makespan_bound_s``); the greedy was faster only by
    putting both copies on the same OSTs, and keeping them apart it ends there too. Job 2: a 285 GiB file at -1,
    placed with domains chosen for it (164 s -> 123 s); the domain-aware greedy places it too (243 s; its
    Lustre-like rounds refused it)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from placement_family import judge as benchmark_judge

    from iez.allocate import make_policy
    from iez.allocate.mirrors import mirror_domains_shared
    from iez.sim.mirror_bounds import domain_bound

    inst = instance(179)
    prepared = prepare(inst.scenario)
    first, last = prepared.jobs[0], prepared.jobs[-1]
    for job in (first, last):
        scenario = Scenario("family-179/job", "", inst.scenario.cluster, lambda job=job: [job])
        alone = prepare(scenario)
        iez, greedy = (run(scenario, p, prepared=alone) for p in ("iez", "greedy"))
        placement = make_policy("iez").place(alone.cluster, job.requests)
        assert not any(mirror_domains_shared(alone.cluster, a) for a in placement.allocations)
        if job is first:
            assert iez.makespan_s <= 1.01 * domain_bound(alone, job)
        else:
            assert not iez.refused and not greedy.refused and iez.makespan_s <= 1.01 * greedy.makespan_s
    assert benchmark_judge(179)["problems"] == []


def test_seed_33_of_the_16_to_64_server_family_is_no_slower_than_the_greedy():
    """Seed 33 of ``--servers 16-64`` (52 OSSs, 220 OSTs): a mirrored job took 229.5 s against the greedy's 222.2 s
    with the failure domains dealt into fixed groups; chosen per file (the splits dealt best first, too many
    servers to try all), it keeps the benchmark's property."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from placement_family import judge as benchmark_judge

    got = benchmark_judge(33, (16, 64))
    assert got["problems"] == [], got
    assert got["iez"] <= 1.01 * got["greedy"]


def test_seed_58_of_the_16_to_64_server_family_deals_domains_by_what_the_osts_report_too():
    """Seed 58 of ``--servers 16-64``: the last job, one 368 GiB file at -1 with 2 copies in pool flash (17
    servers), took 109 s where the domain-aware greedy took 84 s: too many servers to try every split, iez dealt
    only the domains ordered by the speed their OSSs let through, and the prefixes of that order all kept a slow
    OST. Also dealt in the order of what the OSTs report (the greedy's), iez takes 46 s there."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from placement_family import judge as benchmark_judge

    got = benchmark_judge(58, (16, 64))
    assert got["problems"] == [], got
    assert got["iez"] <= 1.01 * got["greedy"]


def test_seed_149_refuses_only_the_mirrored_files_no_split_of_the_domains_can_hold():
    """Seed 149, job 1: two servers, every file with 2 copies, so each copy takes one server. Four small files at
    -1 were refused (iez and the greedy alike): the larger files' copies had filled oss0's fastest OST, which a
    -1 copy on oss0 must use, though a placement holding them all exists. iez now moves objects of copies at a
    fixed stripe count off that OST to another of their domain's (mirrors._make_room): only the 19 files whose
    copies need more OSTs than a server has stay refused, and iez stays within the property."""
    from iez.sim.mirror_bounds import domains_can_hold

    inst = instance(149)
    prepared = prepare(inst.scenario)
    iez, greedy = (run(inst.scenario, p, prepared=prepared) for p in ("iez", "greedy"))
    files = {r.file: r for job in prepared.jobs for r in job.requests}
    assert not iez.enospc_files and len(iez.refused) < len(greedy.refused)
    assert all(not domains_can_hold(prepared.cluster, files[x["file"]]) for x in iez.refused)
    assert iez.makespan_s <= 1.05 * iez.makespan_bound_s
