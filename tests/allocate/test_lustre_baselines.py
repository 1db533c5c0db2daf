"""Lustre's own allocators as baselines: round-robin (``rr``) and weighted QoS (``qos``)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iez.allocate import make_policy
from iez.allocate.base import AllocationError
from iez.allocate.lustre_qos import QosPolicy, decayed
from iez.allocate.lustre_rr import RESEED_MIN, RESEED_MULT, RoundRobinPolicy, interleaved_order
from iez.model import ALL_OSTS, OSS, OST, ClusterState, WriteRequest

GIB_IN_KIB = 1 << 20
MIB = 1 << 20


def paper_testbed(avail_gib: list[float] | None = None, contiguous: bool = True) -> ClusterState:
    """The paper's testbed: 3 OSS x 5 OSTs of 10 GiB; OSS of OST i is i // 5 (or i % 3)."""
    avail_gib = avail_gib or [10.0] * 15
    osts = [
        OST(i, f"oss{(i // 5 if contiguous else i % 3) + 1}", 10 * GIB_IN_KIB, int(a * GIB_IN_KIB))
        for i, a in enumerate(avail_gib)
    ]
    return ClusterState.build(osts, [OSS("oss1"), OSS("oss2"), OSS("oss3")])


def files(n: int, stripe_count: int, write_bytes: int = 64 * MIB, tag: str = "f") -> list[WriteRequest]:
    return [WriteRequest("ior", f"{tag}{i}", write_bytes, stripe_count, rank=i) for i in range(n)]


def oss_of(cluster: ClusterState) -> dict[int, str]:
    return {ost.index: ost.oss_id for ost in cluster.osts}


# --- round-robin -------------------------------------------------------------------------


@pytest.mark.parametrize("contiguous", [True, False])
def test_rr_array_alternates_oss_on_3_oss_by_5_osts(contiguous):
    cluster = paper_testbed(contiguous=contiguous)
    order = interleaved_order(cluster.osts)
    servers = oss_of(cluster)
    assert sorted(order) == list(range(15))
    for pos, index in enumerate(order):
        assert servers[index] != servers[order[(pos + 1) % 15]], order


def test_rr_array_spreads_a_larger_oss_evenly():
    osts = [OST(i, "big" if i < 6 else "small", 100, 100) for i in range(9)]
    order = interleaved_order(osts)
    big_slots = [pos for pos, index in enumerate(order) if index < 6]
    assert big_slots == [0, 1, 3, 4, 6, 7]


def test_rr_puts_15_single_stripe_files_on_15_distinct_osts():
    cluster = paper_testbed()
    layouts = make_policy("rr", seed=1).allocate(cluster, files(15, 1))
    osts = [a.osts[0] for a in layouts]
    assert sorted(osts) == list(range(15))
    servers = oss_of(cluster)
    assert all(servers[a] != servers[b] for a, b in zip(osts, osts[1:]))
    assert {a.policy for a in layouts} == {"rr"}


def test_rr_file_takes_consecutive_entries_of_the_array():
    cluster = paper_testbed()
    policy = RoundRobinPolicy(seed=3)
    for layout in policy.allocate(cluster, files(6, 4)):
        array = policy.rr_array
        first = array.index(layout.osts[0])
        assert list(layout.osts) == [array[(first + k) % 15] for k in range(4)]


def test_rr_state_carries_over_between_calls():
    cluster = paper_testbed()
    split = RoundRobinPolicy(seed=7)
    first = split.allocate(cluster, files(5, 1, tag="a"))
    second = split.allocate(cluster, files(5, 1, tag="b"))
    together = RoundRobinPolicy(seed=7).allocate(cluster, files(10, 1))
    assert [a.osts for a in first + second] == [a.osts for a in together]
    assert len({a.osts[0] for a in first + second}) == 10


def test_rr_offset_bump_keeps_files_from_repeating_the_same_starts():
    # 15 % 5 == 0: without the offset bump every file would start at one of 3 OSTs forever.
    policy = RoundRobinPolicy(seed=0)
    layouts = policy.allocate(paper_testbed(), files(12, 5))
    assert len({a.osts[0] for a in layouts}) > 3
    assert policy.cursor.offset_idx > 0


def test_rr_no_offset_bump_when_ost_count_mod_stripe_count_is_one():
    policy = RoundRobinPolicy(seed=0)
    policy.allocate(paper_testbed(), files(20, 7))  # 15 % 7 == 1
    assert policy.cursor.offset_idx == 0


def test_rr_reseeds_start_on_first_create_and_counts_down_to_the_next():
    period = (RESEED_MIN // 15 + RESEED_MULT) * 15
    policy = RoundRobinPolicy(seed=5)
    policy.allocate(paper_testbed(), files(3, 1))
    assert policy.cursor.creates_until_reseed == period - 2
    starts = {RoundRobinPolicy(seed=s).allocate(paper_testbed(), files(1, 1))[0].osts for s in range(10)}
    assert len(starts) > 1


def test_rr_skips_only_full_osts_and_keeps_the_order():
    avail = [10.0] * 15
    avail[5] = 0.0  # OST 5 is full
    avail[6] = 0.01  # OST 6 cannot hold a 64 MiB stripe, but rr does not know the file's size
    cluster = paper_testbed(avail)
    layouts = RoundRobinPolicy(seed=1).allocate(cluster, files(28, 1))
    used = Counter(a.osts[0] for a in layouts)
    assert 5 not in used and 6 in used
    assert set(used) == set(range(15)) - {5} and max(used.values()) == 2


def test_rr_wide_file_uses_every_ost_once():
    layout = RoundRobinPolicy(seed=2).allocate(paper_testbed(), files(1, ALL_OSTS))[0]
    assert sorted(layout.osts) == list(range(15))


# --- QoS ---------------------------------------------------------------------------------


def test_qos_falls_back_to_rr_when_free_space_is_balanced():
    cluster = paper_testbed([10.0] * 10 + [8.7] * 5)  # least/most free = 0.87 > 1 - 0.17
    qos, rr = make_policy("qos", seed=4), make_policy("rr", seed=4)
    for call in range(3):
        batch = files(7, 2, tag=f"c{call}-")
        assert [a.osts for a in qos.allocate(cluster, batch)] == [a.osts for a in rr.allocate(cluster, batch)]
    assert qos.last_mode == "rr"


def test_qos_goes_weighted_once_free_space_differs_beyond_threshold():
    qos = QosPolicy(seed=4)
    qos.allocate(paper_testbed([10.0] * 10 + [7.9] * 5), files(1, 1))  # 0.79 < 0.83
    assert qos.last_mode == "weighted"
    loose = QosPolicy(seed=4, threshold_rr=0.30)
    loose.allocate(paper_testbed([10.0] * 10 + [7.9] * 5), files(1, 1))
    assert loose.last_mode == "rr"


def test_qos_weighted_gives_emptier_osts_clearly_more_stripes():
    cluster = paper_testbed([9.0] * 5 + [3.0] * 10)  # oss1 empty, oss2 and oss3 two-thirds full
    qos = make_policy("qos", seed=11)
    stripes = Counter()
    for call in range(15):
        for layout in qos.allocate(cluster, files(20, 2, write_bytes=MIB, tag=f"c{call}-")):
            stripes.update(layout.osts)
    empty = sum(stripes[i] for i in range(5)) / 5
    full = sum(stripes[i] for i in range(5, 15)) / 10
    assert qos.last_mode == "weighted"
    assert empty > 2 * full, stripes


def test_qos_same_seed_same_layouts_and_different_seeds_differ():
    cluster = paper_testbed([9.0] * 5 + [3.0] * 10)

    def run(seed: int) -> list[tuple[int, ...]]:
        policy = QosPolicy(seed=seed)
        return [a.osts for call in range(3) for a in policy.allocate(cluster, files(10, 3, tag=f"c{call}-"))]

    assert run(21) == run(21)
    assert run(21) != run(22)


def test_qos_pick_penalises_the_ost_and_its_oss_and_balanced_call_resets():
    cluster = paper_testbed([9.0] * 5 + [3.0] * 10)
    qos = QosPolicy(seed=2)
    qos.allocate(cluster, files(30, 2))
    assert sum(qos.state.ost_penalty.values()) > 0
    qos.allocate(paper_testbed(), files(1, 1))  # balanced: rr, and the next weighted call starts clean
    assert qos.last_mode == "rr"
    (layout,) = qos.allocate(cluster, files(1, 1, tag="g"))
    picked = layout.osts[0]
    assert {i for i, p in qos.state.ost_penalty.items() if p} == {picked}
    assert {s for s, p in qos.state.oss_penalty.items() if p} == {oss_of(cluster)[picked]}


def test_qos_without_prio_wide_has_no_penalties():
    qos = QosPolicy(seed=2, prio_free=1.0)
    qos.allocate(paper_testbed([9.0] * 5 + [3.0] * 10), files(30, 2))
    assert not any(qos.state.ost_penalty.values()) and not any(qos.state.oss_penalty.values())


def test_penalty_decays_by_half_per_eight_idle_calls_and_is_forgotten():
    assert decayed(1024, 8) == 1024
    assert decayed(1024, 9) == 512
    assert decayed(1024, 16) == 256
    assert decayed(1024, 257) == 0


def test_qos_rejects_settings_outside_unit_interval():
    with pytest.raises(ValueError, match="prio_free"):
        QosPolicy(prio_free=1.5)


# --- shared contract ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rr", "qos"])
def test_a_file_is_placed_without_knowing_its_size_and_a_refused_one_changes_nothing(name):
    # Every OST has room for one stripe but not two; Lustre's allocators do not know that, so
    # "late" still gets an OST (its write would hit ENOSPC). "wide" wants more OSTs than are not full:
    # it alone is refused and leaves the policy's state as it was.
    stripe = 2 * MIB
    free_kib = [3 * 1024, 3 * 1024, 3891, 0]
    cluster = ClusterState.build([OST(i, f"oss{i % 2 + 1}", 64 * 1024, kib) for i, kib in enumerate(free_kib)])
    batch = [WriteRequest("ior", "first", 3 * stripe, 3), WriteRequest("ior", "wide", 4 * stripe, 4),
             WriteRequest("ior", "late", stripe, 1)]
    policy = make_policy(name, seed=3)
    placement = policy.place(cluster, batch)
    assert [r.file for r, _ in placement.refused] == ["wide"]
    assert [a.file for a in placement.allocations] == ["first", "late"]
    fresh = make_policy(name, seed=3)
    skipped = fresh.place(cluster, [batch[0], batch[2]])
    assert skipped.allocations == placement.allocations


@pytest.mark.parametrize("name", ["rr", "qos"])
def test_stripe_count_above_ost_count_raises(name):
    with pytest.raises(AllocationError, match="big"):
        make_policy(name).allocate(paper_testbed(), [WriteRequest("ior", "big", MIB, 16)])


@st.composite
def small_clusters(draw):
    n = draw(st.integers(2, 6))
    servers = draw(st.integers(1, 3))
    osts = []
    for i in range(n):
        total = draw(st.integers(1024, 64 * 1024))
        osts.append(OST(i, f"oss{draw(st.integers(1, servers))}", total, draw(st.integers(0, total))))
    return ClusterState.build(osts)


@st.composite
def request_batches(draw, ost_count: int):
    size = draw(st.integers(1, 5))
    return [
        WriteRequest(
            "app",
            f"f{i}",
            draw(st.integers(0, 24 * MIB)),
            draw(st.sampled_from([ALL_OSTS, *range(1, ost_count + 1)])),
        )
        for i in range(size)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rr", "qos"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_layouts_are_distinct_and_avoid_full_osts(name, data):
    cluster = data.draw(small_clusters())
    policy = make_policy(name, seed=data.draw(st.integers(0, 9)))
    for _ in range(3):
        batch = data.draw(request_batches(len(cluster.osts)))
        try:
            layouts = policy.allocate(cluster, batch)
        except AllocationError:
            continue
        placed = Counter()
        for request, layout in zip(batch, layouts):
            assert len(set(layout.osts)) == len(layout.osts)
            assert request.stripe_count in (ALL_OSTS, len(layout.osts))
            for index in layout.osts:
                placed[index] += layout.stripe_size
        for ost in cluster.osts:
            assert ost.bytes_avail > 0 or placed[ost.index] == 0
