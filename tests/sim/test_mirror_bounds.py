"""The makespan bound counts every copy of a mirrored (FLR) file, and stays a bound no placement beats.

Each copy of a mirrored file writes all of the file's stripe objects, so the bound the engine reports
(:func:`iez.sim.engine.job_bound`) must cover ``mirror_count`` times the objects. Checked against an
exhaustive search over small clusters: no assignment of every object of every copy to OSTs within the
room under the fill cap beats its domain-blind part (distinctness of OSTs and failure domains is left out of
that search, which only lowers its best), and no placement that keeps each copy's stripes on distinct OSTs and
the copies of a file in distinct failure domains (what iez and the greedy promise) beats the whole bound, which
also counts what the domains force (:mod:`iez.sim.mirror_bounds`); where the copies can be spread as evenly as
whole objects allow, that best placement meets the bound, and so does iez.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iez.allocate.base import StripeRules
from iez.allocate.mirrors import domain_of
from iez.model import OSS, OST, ClusterState, WriteRequest, raid0_bytes
from iez.sim.cluster import DescribedCluster
from iez.sim.engine import job_bound, prepare, run
from iez.sim.metrics import makespan
from iez.sim.scenarios import Scenario
from iez.sim.workloads import Job

MiB = 1 << 20
GiB = 1 << 30


def scenario(cluster: ClusterState, requests: list[WriteRequest]) -> Scenario:
    return Scenario("mirror-bound-test", "a small mirrored batch", DescribedCluster(cluster, "test"),
                    lambda: [Job("app", tuple(requests))])


def copy_objects(request: WriteRequest) -> list[int]:
    """One copy's stripe objects, sized as every policy sizes them."""
    size = StripeRules().size(request.write_bytes, request.stripe_count)
    return raid0_bytes(request.write_bytes, size, request.stripe_count)


def setting(cluster: ClusterState, requests: list[WriteRequest]):
    prepared = prepare(scenario(cluster, requests))
    room = np.array([o.room_bytes(cluster.fill_cap) for o in cluster.osts], dtype=np.int64)
    return prepared, room


def best_any(prepared, room, requests) -> float:
    """The least makespan over every assignment of every object of every copy to an OST within its room."""
    objects = [b for r in requests for _ in range(r.mirror_count) for b in copy_objects(r)]
    on = np.flatnonzero(prepared.candidates(None))
    best = np.inf
    for choice in itertools.product(on, repeat=len(objects)):
        load = np.zeros(len(room), dtype=np.int64)
        np.add.at(load, list(choice), objects)
        if (load <= room).all():
            best = min(best, makespan(load, prepared.bandwidths))
    return best


def best_honouring_domains(prepared, room, requests) -> float:
    """The least makespan over placements that put each copy's stripes on distinct OSTs and the copies of a
    file in distinct failure domains (what iez promises), within room."""
    cluster = prepared.cluster
    dom = domain_of(cluster)
    on = [int(p) for p in np.flatnonzero(prepared.candidates(None))]
    copies = [(f, copy_objects(r)) for f, r in enumerate(requests) for _ in range(r.mirror_count)]
    best = np.inf

    def walk(k: int, load: np.ndarray, taken: dict[int, set[str]]) -> None:
        nonlocal best
        if k == len(copies):
            best = min(best, makespan(load, prepared.bandwidths))
            return
        f, objects = copies[k]
        for osts in itertools.permutations(on, len(objects)):
            domains = {dom[cluster.osts[p].index] for p in osts}
            if domains & taken.get(f, set()):
                continue
            nxt = load.copy()
            np.add.at(nxt, list(osts), objects)
            if (nxt <= room).all():
                walk(k + 1, nxt, {**taken, f: taken.get(f, set()) | domains})

    walk(0, np.zeros(len(room), dtype=np.int64), {})
    return best


@st.composite
def instances(draw, racks: bool = False):
    n_oss = draw(st.integers(1, 3))
    # with ``racks``, some servers share a failure domain (the cluster description's ``domain``)
    domain = [draw(st.sampled_from(["", "r0", "r1"])) if racks else "" for _ in range(n_oss)]
    osses = [OSS(f"s{k}", cpu_pct=draw(st.sampled_from([0, 0, 50])), bandwidth=draw(st.integers(100, 900)) * MiB,
                 domain=domain[k]) for k in range(n_oss)]
    osts = []
    for k in range(n_oss):
        for _ in range(draw(st.integers(1, 2 if n_oss > 1 else 3))):
            total = draw(st.integers(256, 2048)) * 1024  # KiB
            osts.append(OST(len(osts), f"s{k}", total, draw(st.integers(total // 3, total)),
                            bandwidth=draw(st.integers(50, 400)) * MiB,
                            load=draw(st.sampled_from([0, 0, 30, 120])) * MiB))
    cluster = ClusterState.build(osts, osses, draw(st.sampled_from([0.8, 0.95, 1.0])))
    requests, objects = [], 0
    for f in range(draw(st.integers(1, 2))):
        count = draw(st.integers(1, min(2, len(osts))))
        mirrors = draw(st.integers(1, 3))
        if objects + count * mirrors > 6:
            break
        objects += count * mirrors
        requests.append(WriteRequest("app", f"/m/{f}", draw(st.integers(1, 600)) * MiB, count, f,
                                     mirror_count=mirrors))
    return cluster, requests or [WriteRequest("app", "/m/0", 64 * MiB, 1, 0, mirror_count=2)]


@pytest.mark.slow
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_no_placement_of_every_copy_within_the_cap_beats_the_domain_blind_bound(instance):
    cluster, requests = instance
    prepared, room = setting(cluster, requests)
    blind = job_bound(prepared, prepared.jobs[0], domains=False)
    assert blind <= best_any(prepared, room, requests) * (1 + 1e-12)  # both infinite when nothing fits


@pytest.mark.slow
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(instances(racks=True))
def test_no_placement_keeping_copies_in_domains_of_their_own_beats_the_bound(instance):
    cluster, requests = instance
    prepared, room = setting(cluster, requests)
    (bound,) = prepared.job_bounds
    assert bound <= best_honouring_domains(prepared, room, requests) * (1 + 1e-12)


def tight_cases():
    """Instances where whole copies can be spread as evenly as whole objects allow, so the bound is reached."""
    # 2 files of 1 GiB, 2 copies each, on 3 equal OSSs of one OST: 4 objects on 3 OSTs, one OST streams 2.
    three = ClusterState.build([OST(i, f"s{i}", 8 * GiB // 1024, 8 * GiB // 1024) for i in range(3)],
                               [OSS(f"s{i}") for i in range(3)], 1.0)
    yield "4-copies-on-3-osts", three, [WriteRequest("app", f"/m/{f}", GiB, 1, f, mirror_count=2)
                                        for f in range(2)], 2 * GiB / (200 * MiB)
    # 2 OSSs of 2 OSTs, each OSS capped at 300 MiB/s: 2 files x 2 stripes x 2 copies, 4 objects per OSS.
    capped = ClusterState.build([OST(i, f"s{i // 2}", 8 * GiB // 1024, 8 * GiB // 1024) for i in range(4)],
                                [OSS(f"s{k}", bandwidth=300 * MiB) for k in range(2)], 1.0)
    requests = [WriteRequest("app", f"/m/{f}", GiB, 2, f, mirror_count=2) for f in range(2)]
    yield "oss-capped", capped, requests, 4 * copy_objects(requests[0])[0] / (300 * MiB)
    # 3 copies of 2 files on 3 racks of 2 OSSs (one OST each): 6 objects, one per OST.
    racks = ClusterState.build([OST(i, f"s{i}", 8 * GiB // 1024, 8 * GiB // 1024) for i in range(6)],
                               [OSS(f"s{i}", domain=f"rack{i // 2}") for i in range(6)], 1.0)
    yield "racks", racks, [WriteRequest("app", f"/m/{f}", GiB, 1, f, mirror_count=3) for f in range(2)], \
        GiB / (200 * MiB)


@pytest.mark.parametrize("name, cluster, requests, expected", list(tight_cases()), ids=[c[0] for c in tight_cases()])
def test_the_bound_is_tight_where_copies_spread_evenly_and_iez_reaches_it(name, cluster, requests, expected):
    prepared, room = setting(cluster, requests)
    (bound,) = prepared.job_bounds
    assert bound == pytest.approx(expected, rel=1e-9)  # every copy counted: half of this without them
    best = best_honouring_domains(prepared, room, requests)
    assert best == pytest.approx(bound, rel=1e-9)
    iez = run(prepared.scenario, "iez", prepared=prepared)
    assert not iez.refused and iez.makespan_s == pytest.approx(best, rel=1e-9)
    assert sum(iez.ost_bytes) == sum(r.write_bytes * r.mirror_count for r in requests)


def test_the_bound_counts_what_failure_domains_force_and_stays_below_every_placement_that_keeps_them():
    """One file, 2 copies, on an OSS three times as fast as the other: keeping the copies apart costs a whole
    copy on the slow OSS. The domain-blind bound (both copies on the fast server, as Lustre's FLR may do) is
    2 GiB / 600 MiB/s; the bound iez and the greedy are judged by counts the forced copy, 1 GiB / 200 MiB/s,
    and the exhaustive search over placements that keep the copies apart meets it."""
    cluster = ClusterState.build([OST(0, "fast", 8 * GiB // 1024, 8 * GiB // 1024, bandwidth=600 * MiB),
                                  OST(1, "slow", 8 * GiB // 1024, 8 * GiB // 1024, bandwidth=200 * MiB)],
                                 [OSS("fast", bandwidth=600 * MiB), OSS("slow", bandwidth=200 * MiB)], 1.0)
    requests = [WriteRequest("app", "/m/0", GiB, 1, 0, mirror_count=2)]
    prepared, room = setting(cluster, requests)
    (bound,) = prepared.job_bounds
    blind = job_bound(prepared, prepared.jobs[0], domains=False)
    assert blind == pytest.approx(2 * GiB / (600 * MiB), rel=1e-9) == pytest.approx(best_any(prepared, room, requests))
    assert bound == pytest.approx(GiB / (200 * MiB), rel=1e-9) and bound > blind * 1.4
    assert best_honouring_domains(prepared, room, requests) >= bound * (1 - 1e-12)
    for policy in ("iez", "greedy"):
        got = run(prepared.scenario, policy, prepared=prepared)
        assert not got.refused and got.makespan_s == pytest.approx(bound, rel=1e-9), policy


def test_a_pool_with_as_many_racks_as_copies_forces_a_whole_copy_on_each_rack():
    """Two racks: a fast one of two servers and a slow one of one, 3 files of 2 stripes with 2 copies. Every
    copy that keeps to its own rack puts a whole copy of each file on the slow rack (3 GiB at 300 MiB/s); the
    domain-blind bound spreads 6 GiB over 900 MiB/s. The bound counts the forced bytes, and the best placement
    keeping copies in racks of their own (exhaustive) is no faster; iez and the greedy reach it."""
    osts = [OST(i, f"s{i // 2}", 16 * GiB // 1024, 16 * GiB // 1024, bandwidth=150 * MiB) for i in range(6)]
    osses = [OSS("s0", domain="fast"), OSS("s1", domain="fast"), OSS("s2", domain="slow", bandwidth=300 * MiB)]
    cluster = ClusterState.build(osts, osses, 1.0)
    requests = [WriteRequest("app", f"/m/{f}", GiB, 2, f, mirror_count=2) for f in range(3)]
    prepared, room = setting(cluster, requests)
    (bound,) = prepared.job_bounds
    blind = job_bound(prepared, prepared.jobs[0], domains=False)
    assert bound == pytest.approx(3 * GiB / (300 * MiB), rel=1e-9) and bound > blind * 1.4
    assert best_honouring_domains(prepared, room, requests) >= bound * (1 - 1e-12)
    for policy in ("iez", "greedy"):
        got = run(prepared.scenario, policy, prepared=prepared)
        assert not got.refused and got.makespan_s == pytest.approx(bound, rel=1e-9), policy


def test_files_alike_but_for_their_copies_are_each_counted_with_their_own():
    """Two 1 MiB files, one mirrored twice, one not, on one 50 MiB/s OST: 3 objects, 0.06 s (the shapes of
    identical requests were shared whatever their mirror count, so the bound counted 4)."""
    cluster = ClusterState.build([OST(0, "s0", 262144, 87381, bandwidth=50 * MiB)], [OSS("s0", bandwidth=100 * MiB)],
                                 0.8)
    requests = [WriteRequest("app", "/m/0", MiB, 1, 0, mirror_count=2), WriteRequest("app", "/m/1", MiB, 1, 1)]
    prepared, room = setting(cluster, requests)
    (bound,) = prepared.job_bounds
    assert bound <= best_any(prepared, room, requests) * (1 + 1e-12)
    assert bound == pytest.approx(3 * MiB / (50 * MiB), rel=1e-6)
