"""The ``iez`` policy is optimal for its objective, and never breaks distinctness, capacity or the fill cap.

Objective (iez/allocate/bandwidth.py): requests with the same stripe-object size
and stripe count form a class; classes go largest objects first, and each class
gets the placement with the least modelled I/O time given what earlier classes
placed: the largest, over OSTs and OSSs, of bytes over usable bandwidth. The
exact reference is an integer programme (scipy's HiGHS MILP) over the stripes per
OST of that class, with the fill cap, the one-stripe-per-request-per-OST rule
and the OSS bandwidths, solved from the same starting bytes.
"""

from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import Bounds, LinearConstraint, milp

from iez.allocate import make_policy
from iez.model import MIN_BANDWIDTH_SHARE, OSS, OST, ClusterState, WriteRequest

MiB = 1 << 20
STRIPE = 4 * MiB  # write_bytes = stripe_count * k * STRIPE gives stripe objects of exactly k * STRIPE (Method II)


def build(instance) -> ClusterState:
    osses = [OSS(f"oss{k}", bandwidth=bw * MiB) for k, bw in enumerate(instance["oss_bw"])]
    osts = []
    for i, (total, avail, bw, load) in enumerate(instance["osts"]):
        osts.append(OST(i, f"oss{i % len(osses)}", total * STRIPE // 1024, min(avail, total) * STRIPE // 1024,
                        bandwidth=bw * MiB, load=load * MiB))
    return ClusterState.build(osts, osses, fill_cap=instance["cap"])


def exact_class_time(cluster: ClusterState, placed: np.ndarray, b: int, m: int, c: int) -> float | None:
    """Least makespan for ``m`` requests of ``c`` distinct ``b``-byte stripes, given ``placed`` bytes."""
    n = len(cluster.osts)
    oss_ids = sorted({o.oss_id for o in cluster.osts})
    room = np.array([o.room_bytes(cluster.fill_cap) for o in cluster.osts]) - placed
    upper = np.minimum(np.maximum(room, 0) // b, m)
    bw = np.array([o.usable_bandwidth for o in cluster.osts])
    rows, lo, hi = [], [], []
    # variables: y_0..y_{n-1}, T
    rows.append(np.r_[np.ones(n), 0.0]); lo.append(m * c); hi.append(m * c)
    for o in range(n):  # b*y_o - bw_o*T <= -placed_o
        row = np.zeros(n + 1); row[o] = b; row[n] = -bw[o]
        rows.append(row); lo.append(-np.inf); hi.append(-placed[o])
    for s in oss_ids:
        server = cluster.osses[s]
        members = [o for o, ost in enumerate(cluster.osts) if ost.oss_id == s]
        oss_bw = max(server.bandwidth - sum(cluster.osts[o].load for o in members),
                     server.bandwidth * MIN_BANDWIDTH_SHARE)
        row = np.zeros(n + 1); row[members] = b; row[n] = -oss_bw
        rows.append(row); lo.append(-np.inf); hi.append(-placed[members].sum())
    cost = np.r_[np.zeros(n), 1.0]
    result = milp(cost, constraints=LinearConstraint(np.array(rows), lo, hi),
                  integrality=np.r_[np.ones(n), 0], bounds=Bounds(np.r_[np.zeros(n), 0], np.r_[upper, np.inf]))
    return float(result.x[n]) if result.success else None


def makespan(cluster: ClusterState, placed: np.ndarray) -> float:
    bw = np.array([o.usable_bandwidth for o in cluster.osts])
    worst = float((placed / bw).max())
    for s, server in cluster.osses.items():
        members = [o for o, ost in enumerate(cluster.osts) if ost.oss_id == s]
        oss_bw = max(server.bandwidth - sum(cluster.osts[o].load for o in members),
                     server.bandwidth * MIN_BANDWIDTH_SHARE)
        worst = max(worst, placed[members].sum() / oss_bw)
    return worst


ost_entry = st.tuples(st.integers(4, 24), st.integers(0, 24), st.sampled_from([100, 200, 400]),
                      st.sampled_from([0, 0, 50, 150]))
instances = st.fixed_dictionaries({
    "osts": st.lists(ost_entry, min_size=2, max_size=7),
    "oss_bw": st.lists(st.sampled_from([250, 600, 1200]), min_size=1, max_size=3),
    "cap": st.sampled_from([0.8, 0.95, 1.0]),
    "classes": st.lists(st.tuples(st.integers(1, 4), st.integers(1, 7), st.integers(1, 3)), min_size=1, max_size=3),
})


def requests_of(instance, n):
    out = []
    for g, (m, c, k) in enumerate(instance["classes"]):
        c = min(c, n)
        out += [WriteRequest("app", f"/f/{g}-{i}", c * k * STRIPE, c, i) for i in range(m)]
    return out


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances)
def test_each_class_gets_the_exact_least_makespan_and_no_rule_is_broken(instance):
    cluster = build(instance)
    n = len(cluster.osts)
    requests = requests_of(instance, n)
    placement = make_policy("iez", greedy_check=False).place(cluster, requests)  # the class solver itself
    position = {o.index: p for p, o in enumerate(cluster.osts)}
    # Regroup by class in the policy's order: largest objects first, then larger stripe counts.
    classes = defaultdict(list)
    for request, outcome in zip(placement.requests, placement.outcomes):
        classes[(request.write_bytes // request.stripe_count, request.stripe_count)].append((request, outcome))
    placed = np.zeros(n)
    for (b, c) in sorted(classes, key=lambda k: (-k[0], -k[1])):
        members = classes[(b, c)]
        kept = [(r, a) for r, a in members if not hasattr(a, "reason")]
        refused = len(members) - len(kept)
        if refused:  # refusal is minimal: one more request of this class has no feasible placement
            assert exact_class_time(cluster, placed, b, len(kept) + 1, c) is None
        if not kept:
            continue
        best = exact_class_time(cluster, placed, b, len(kept), c)
        assert best is not None
        for request, allocation in kept:
            assert allocation.stripe_size == b
            assert len(set(allocation.osts)) == len(allocation.osts) == c
            for ost in allocation.osts:
                placed[position[ost]] += b
        assert makespan(cluster, placed) <= best * (1 + 1e-9) + 1e-12
    for ost, p in zip(cluster.osts, placed):
        assert p <= ost.room_bytes(cluster.fill_cap)  # the fill cap and the free space hold


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances, st.sampled_from([0.05, 0.2, 1.0]))
def test_fill_weight_stays_within_its_time_budget_and_never_raises_the_fullest_fill(instance, weight):
    cluster = build(instance)
    requests = requests_of(instance, len(cluster.osts))
    requests = [r for r in requests if r.write_bytes // r.stripe_count == requests[0].write_bytes // requests[0].stripe_count
                and r.stripe_count == requests[0].stripe_count]  # one class: the budget is per class
    fast = make_policy("iez").place(cluster, requests)
    even = make_policy("iez", fill_weight=weight).place(cluster, requests)
    assert len(fast.refused) == len(even.refused)

    def per_ost(placement):
        bytes_on = Counter()
        for a in placement.allocations:
            for o in a.osts:
                bytes_on[o] += a.stripe_size
        return np.array([bytes_on[o.index] for o in cluster.osts], dtype=float)

    fast_bytes, even_bytes = per_ost(fast), per_ost(even)
    assert makespan(cluster, even_bytes) <= makespan(cluster, fast_bytes) * (1 + weight) * (1 + 1e-9)
    used = np.array([o.bytes_total - o.bytes_avail for o in cluster.osts], dtype=float)
    total = np.array([o.bytes_total for o in cluster.osts], dtype=float)
    touched = (fast_bytes + even_bytes) > 0
    if touched.any():
        assert ((used + even_bytes) / total)[touched].max() <= ((used + fast_bytes) / total)[touched].max() + 1e-12


def test_a_new_empty_oss_gets_its_bandwidth_share_not_its_free_space_share():
    """Nearly full file system (85 %) plus an empty OSS: the job's bytes follow bandwidth, as rr's do."""
    GiB = 1 << 30
    osts = [OST(i, f"oss{i // 4}", 100 * GiB // 1024, (15 if i < 12 else 100) * GiB // 1024) for i in range(16)]
    cluster = ClusterState.build(osts)
    requests = [WriteRequest("ior", f"/l/f.{i}", GiB, 1, i) for i in range(64)]
    counts = Counter(a.osts[0] for a in make_policy("iez").allocate(cluster, requests))
    assert sorted(counts.values()) == [4] * 16


def test_fewer_files_than_osts_spread_over_every_oss():
    GiB = 1 << 30
    osts = [OST(i, f"oss{i // 5}", 10 * GiB // 1024, (9 - i % 5) * GiB // 1024) for i in range(15)]
    cluster = ClusterState.build(osts)
    requests = [WriteRequest("ior", f"/l/f.{i}", GiB, 1, i) for i in range(4)]
    servers = Counter(cluster.osts[a.osts[0]].oss_id for a in make_policy("iez").allocate(cluster, requests))
    assert sorted(servers.values()) == [1, 1, 2]


def test_congested_osts_get_less_of_the_job():
    GiB = 1 << 30
    osts = [OST(i, f"oss{i}", 10 * GiB // 1024, 10 * GiB // 1024, load=(150 if i < 2 else 0) * MiB)
            for i in range(4)]
    cluster = ClusterState.build(osts, [OSS(f"oss{i}", bandwidth=10_000 * MiB) for i in range(4)])
    requests = [WriteRequest("ior", f"/l/f.{i}", 256 * MiB, 1, i) for i in range(40)]
    counts = Counter(a.osts[0] for a in make_policy("iez").allocate(cluster, requests))
    assert counts[0] < counts[2] and counts[1] < counts[3]
    assert counts[2] == pytest.approx(4 * counts[0], abs=2)  # 200 MiB/s free against 50 MiB/s


def test_one_unplaceable_file_is_refused_alone_with_its_reason():
    GiB = 1 << 30
    osts = [OST(i, f"oss{i % 2}", 10 * GiB // 1024, 2 * GiB // 1024) for i in range(4)]
    cluster = ClusterState.build(osts)  # 80 % full: 1.5 GiB of room per OST under the 95 % cap
    requests = [WriteRequest("a", "/l/small", GiB, 2, 0), WriteRequest("a", "/l/huge", 40 * GiB, 4, 1),
                WriteRequest("a", "/l/wide", GiB, 8, 2)]
    placement = make_policy("iez").place(cluster, requests)
    assert [a.file for a in placement.allocations] == ["/l/small"]
    reasons = dict((r.file, why) for r, why in placement.refused)
    assert "fill cap" in reasons["/l/huge"] and "stripe count 8 exceeds the 4 OSTs" in reasons["/l/wide"]


def test_a_file_beyond_the_stripe_size_limit_wraps_around_with_a_capped_stripe():
    GiB = 1 << 30
    osts = [OST(i, f"oss{i % 4}", 100 * GiB // 1024, 100 * GiB // 1024) for i in range(8)]
    [allocation] = make_policy("iez").allocate(ClusterState.build(osts), [WriteRequest("a", "/l/big", 64 * GiB, 8, -1)])
    assert allocation.stripe_size < 4 * GiB and allocation.stripe_size % 65536 == 0
    assert len(set(allocation.osts)) == 8


def test_degraded_osts_are_used_only_when_nothing_else_fits():
    GiB = 1 << 30
    osts = [OST(i, f"oss{i % 2}", 10 * GiB // 1024, 10 * GiB // 1024, state="degraded" if i == 0 else "active")
            for i in range(4)] + [OST(9, "oss1", 10 * GiB // 1024, 10 * GiB // 1024, state="inactive")]
    cluster = ClusterState.build(osts)
    few = make_policy("iez").allocate(cluster, [WriteRequest("a", f"/l/{i}", GiB, 3, i) for i in range(3)])
    assert all(0 not in a.osts and 9 not in a.osts for a in few)
    wide = make_policy("iez").allocate(cluster, [WriteRequest("a", "/l/w", GiB, 4, 0)])
    assert sorted(wide[0].osts) == [0, 1, 2, 3]
