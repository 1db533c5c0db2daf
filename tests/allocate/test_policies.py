"""Behaviour every policy shares, and what sets ``iez`` apart from the paper's literal Algorithm 2."""

from collections import Counter

import pytest

from iez.allocate import POLICY_NAMES, AllocationError, make_policy
from iez.model import OSS, OST, ClusterState, WriteRequest

GiB = 1 << 30


def cluster15(avail_gib=(10,) * 15, loads=None):
    osts = [OST(i + 1, f"oss{i // 5 + 1}", 10 * GiB // 1024, int(a * GiB) // 1024) for i, a in enumerate(avail_gib)]
    osses = [OSS(f"oss{k + 1}", *(loads[k] if loads else (0.0, 0.0))) for k in range(3)]
    return ClusterState.build(osts, osses)


def ior_requests(files=16, stripe_count=8, size=2 * GiB):
    return [WriteRequest("ior", f"/lustre/ior/f.{i}", size, stripe_count, i) for i in range(files)]


@pytest.mark.slow
def test_paper_policy_collapses_onto_eight_osts():
    stripes = Counter(o for a in make_policy("paper").allocate(cluster15(), ior_requests()) for o in a.osts)
    assert len(stripes) == 8 and set(stripes.values()) == {16}


def test_iez_spreads_the_same_requests_over_all_fifteen_osts():
    stripes = Counter(o for a in make_policy("iez").allocate(cluster15(), ior_requests()) for o in a.osts)
    assert len(stripes) == 15 and set(stripes.values()) == {8, 9}


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_same_input_and_seed_give_the_same_layouts(policy):
    cluster = cluster15(avail_gib=[3 + (i * 7) % 8 for i in range(15)])
    first = make_policy(policy, seed=5).allocate(cluster, ior_requests(12, 4, GiB))
    second = make_policy(policy, seed=5).allocate(cluster, ior_requests(12, 4, GiB))
    assert first == second


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_stripe_count_above_usable_osts_is_refused_naming_the_file(policy):
    with pytest.raises(AllocationError, match=r"/lustre/ior/f\.0.*stripe count 16 exceeds the 15 OSTs"):
        make_policy(policy).allocate(cluster15(), ior_requests(1, 16))


@pytest.mark.parametrize("policy", ["iez", "paper"])
def test_a_batch_larger_than_the_free_space_is_refused_by_size_aware_policies(policy):
    placement = make_policy(policy).place(cluster15(avail_gib=[1] * 15), ior_requests(16, 8, 2 * GiB))
    assert placement.refused and all("fill cap" in why or "flow" in why for _, why in placement.refused)


@pytest.mark.parametrize("policy", ["rr", "qos"])
def test_lustre_allocators_place_a_batch_larger_than_the_free_space_as_lustre_would(policy):
    placement = make_policy(policy).place(cluster15(avail_gib=[1] * 15), ior_requests(16, 8, 2 * GiB))
    assert not placement.refused and len(placement.allocations) == 16


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_minus_one_means_every_usable_ost(policy):
    (allocation,) = make_policy(policy).allocate(cluster15(), [WriteRequest("a", "/x", 15 * GiB // 2, -1)])
    assert sorted(allocation.osts) == list(range(1, 16))


def test_iez_gives_equal_osts_equal_shares_whatever_their_fill_below_the_cap():
    avail = [9] * 10 + [3] * 5  # 10 % and 70 % full: the job is as fast as its busiest OST
    stripes = Counter(o for a in make_policy("iez").allocate(cluster15(avail), ior_requests(30, 4, GiB)) for o in a.osts)
    assert set(stripes.values()) == {8}


def test_iez_avoids_a_loaded_oss_when_space_is_equal():
    loads = [(95.0, 90.0), (0.0, 0.0), (0.0, 0.0)]
    stripes = Counter(o for a in make_policy("iez").allocate(cluster15(loads=loads), ior_requests(6, 4, GiB))
                      for o in a.osts)
    assert sum(stripes[i] for i in range(1, 6)) < sum(stripes[i] for i in range(6, 11))


def test_iez_spreads_each_file_over_all_oss_when_the_stripes_allow():
    # 5 files x 3 stripes on 3 OSS x 5 OSTs: one stripe per OST, so every file can touch every OSS.
    for allocation in make_policy("iez").allocate(cluster15(), ior_requests(5, 3, GiB)):
        servers = [(o - 1) // 5 for o in allocation.osts]
        assert len(set(servers)) == 3


def test_iez_rounding_extra_goes_to_the_emptiest_ost_so_jobs_one_after_another_even_out():
    """16 stripes on 15 equal OSTs: one OST takes two; fill breaks the tie, so it is never the same OST twice."""
    policy = make_policy("iez")
    avail = [10.0] * 15
    stripes = Counter()
    for job in range(15):
        batch = [WriteRequest("j", f"/j{job}/f{i}", GiB, 4, i) for i in range(4)]
        for a in policy.allocate(cluster15(avail), batch):
            stripes.update(a.osts)
            for o in a.osts:
                avail[o - 1] -= a.stripe_size / GiB
    assert set(stripes.values()) == {16}
