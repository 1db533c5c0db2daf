"""The simulator's bounds are true bounds: no placement of whole stripe objects beats them.

Random small instances (unequal bandwidths, congestion, OSS limits, rooms under a cap, mixed object
sizes) are solved by enumerating every assignment of objects to OSTs; the bound must not exceed the
best of them. Distinctness within a file is left out of the enumeration, which only lowers the best,
so the check is stricter than needed.
"""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iez.model import OSS, OST, ClusterState
from iez.sim.metrics import Bandwidths, makespan, makespan_bound, ost_cost_bound

MiB = 1 << 20


@st.composite
def instances(draw):
    n = draw(st.integers(2, 4))
    n_oss = draw(st.integers(1, min(2, n)))
    osts = []
    for i in range(n):
        total = draw(st.integers(64, 512)) * 1024  # KiB
        osts.append(OST(i, f"s{i % n_oss}", total, draw(st.integers(total // 3, total)),
                        bandwidth=draw(st.integers(50, 400)) * MiB,
                        load=draw(st.sampled_from([0, 0, 30, 120, 390])) * MiB))
    osses = [OSS(f"s{k}", cpu_pct=draw(st.sampled_from([0, 0, 50])), bandwidth=draw(st.integers(100, 900)) * MiB)
             for k in range(n_oss)]
    cluster = ClusterState.build(osts, osses, draw(st.sampled_from([0.5, 0.8, 0.95, 1.0])))
    objects = draw(st.lists(st.integers(1, 300 << 10), min_size=1, max_size=5))
    candidates = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    return cluster, np.array(objects, dtype=np.int64), candidates, draw(st.sampled_from([0.0, 0.5]))


def best_placement(cluster, objects, candidates, room, bandwidths):
    """The least makespan over every assignment of whole objects to candidate OSTs within their room."""
    on = np.flatnonzero(candidates)
    best = np.inf
    for choice in itertools.product(on, repeat=len(objects)):
        load = np.zeros(len(cluster.osts), dtype=np.int64)
        np.add.at(load, list(choice), objects)
        if (load <= room).all():
            best = min(best, makespan(load, bandwidths))
    return best


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(instances())
def test_no_placement_within_the_cap_beats_the_makespan_bound(instance):
    cluster, objects, candidates, oss_load_weight = instance
    bandwidths = Bandwidths.of(cluster, oss_load_weight)
    room = np.array([o.room_bytes(cluster.fill_cap) for o in cluster.osts], dtype=np.int64)
    bound = makespan_bound(objects, candidates, room, bandwidths)
    best = best_placement(cluster, objects, candidates, room, bandwidths)
    assert bound <= best * (1 + 1e-12)  # (when nothing fits, best is infinite and any bound holds)


def test_infeasible_instances_have_an_infinite_bound_and_whole_objects_count():
    cluster = ClusterState.build([OST(i, "s", 1024, 1024) for i in range(3)], fill_cap=1.0)
    bandwidths = Bandwidths.of(cluster)
    room = np.full(3, 1024 * 1024)
    everything = np.ones(3, dtype=bool)
    assert np.isinf(makespan_bound(np.array([1024 * 1024 + 1]), everything, room, bandwidths))  # too big for one
    assert np.isinf(makespan_bound(np.array([600 * 1024] * 4), everything, room, bandwidths))  # 4 on 3 OSTs
    # 64 equal objects on 15 equal OSTs: some OST streams 5 of them, not the mean 4.27.
    cluster = ClusterState.build([OST(i, f"s{i % 3}", 1 << 30, 1 << 30) for i in range(15)],
                                 [OSS(f"s{k}", bandwidth=1e12) for k in range(3)], fill_cap=1.0)
    bound = makespan_bound(np.full(64, 1 << 20), np.ones(15, dtype=bool), np.full(15, 1 << 30),
                           Bandwidths.of(cluster))
    assert bound == pytest.approx(5 * (1 << 20) / (200 * MiB), rel=1e-9)


def test_the_bound_sees_oss_limits_and_congestion():
    # Two OSSs of 2 OSTs; OSS s1 at 100 MiB/s, OST 0 congested to its 2 % floor.
    osts = [OST(0, "s0", 1 << 30, 1 << 30, load=1e12), OST(1, "s0", 1 << 30, 1 << 30),
            OST(2, "s1", 1 << 30, 1 << 30), OST(3, "s1", 1 << 30, 1 << 30)]
    cluster = ClusterState.build(osts, [OSS("s0"), OSS("s1", bandwidth=100 * MiB)], fill_cap=1.0)
    bandwidths = Bandwidths.of(cluster)
    assert bandwidths.oss[0] == pytest.approx(600 * MiB * 0.02)  # the congested OST's load swamps its OSS
    objects = np.full(12, 100 * MiB)
    bound = makespan_bound(objects, np.ones(4, dtype=bool), np.full(4, 1 << 40), bandwidths)
    # Fluid: 1200 MiB over 12 + 100 MiB/s of OSSs is 10.7 s; whole objects of 100 MiB: by 11 s OSS s1 has
    # streamed 11 of them and OSS s0 one (132 MiB): 11 s.
    assert bound == pytest.approx(11.0, rel=1e-9)


@st.composite
def pieces_and_osts(draw):
    n = draw(st.integers(2, 4))
    avail = np.array(draw(st.lists(st.integers(10, 200), min_size=n, max_size=n)), dtype=float)
    pieces = np.array(draw(st.lists(st.integers(1, 120), min_size=1, max_size=5)), dtype=float)
    return pieces, avail


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(pieces_and_osts())
def test_no_placement_beats_the_ost_cost_bound_with_mixed_sizes(instance):
    pieces, avail = instance
    best = np.inf
    for choice in itertools.product(range(len(avail)), repeat=len(pieces)):
        load = np.zeros(len(avail))
        np.add.at(load, list(choice), pieces)
        util = load / avail
        best = min(best, util.max() / util.mean())
    assert ost_cost_bound(pieces, avail) <= best * (1 + 1e-9)


def test_one_big_file_among_tiny_ones_bounds_ost_cost_by_the_big_one():
    # One single-stripe file of 10 GiB and 100 files of 1 KiB on 15 equal OSTs: the big object sits
    # whole on one OST, so max utilisation >= 10 GiB / a while the mean is about 10 GiB / (15 a).
    pieces = np.array([10 << 30] + [1024] * 100, dtype=float)
    avail = np.full(15, 100.0 * (1 << 30))
    best = (10 << 30) / ((10 << 30) + 100 * 1024) * 15  # everything tiny beside the big one: ratio of the means
    assert ost_cost_bound(pieces, avail) == pytest.approx(best, rel=1e-6)
    assert ost_cost_bound(pieces, avail) > 14.99
