"""Issue 29: the greedy keeps every copy of a mirrored file in failure domains no other copy of the file uses, as
iez does, so a mirrored placement it returns answers the same problem (iez/allocate/greedy.py)."""

import pytest

from iez.allocate import make_policy
from iez.allocate.base import Refused
from iez.allocate.mirrors import domain_of, mirror_domains_shared
from iez.model import ALL_OSTS, EOF_END, OSS, OST, Allocation, ClusterState, Component, MiB, WriteRequest

GiB = 1 << 30


def _cluster(servers=4, per=4, domains=None, states=None, pools=None, bw=None, avail=None, cap=0.95):
    osts = []
    for k in range(servers):
        for j in range(per):
            i = k * per + j
            osts.append(OST(i, f"oss{k}", 1 << 30, (avail or {}).get(i, 1 << 30), (bw or {}).get(k, 200) * MiB, 0.0,
                            (states or {}).get(i, "active"), tuple((pools or {}).get(k, ()))))
    osses = [OSS(f"oss{k}", bandwidth=10_000 * MiB, domain=(domains or {}).get(k, "")) for k in range(servers)]
    return ClusterState.build(osts, osses, cap)


def _copy_domains(cluster, allocation):
    dom = domain_of(cluster)
    return [{dom[o] for c in mirror for o in c.osts} for mirror in allocation.mirrors]


@pytest.mark.parametrize("count", [1, 2, 4, ALL_OSTS])
def test_every_copy_keeps_to_failure_domains_of_its_own(count):
    """Four servers in two racks, 2 and 3 copies, stripe counts 1 to -1: no two copies of a file share a rack,
    each copy's stripes are on distinct OSTs, every copy writes the file's bytes."""
    cluster = _cluster(domains={0: "r0", 1: "r0", 2: "r1", 3: "r1"})
    requests = [WriteRequest("a", f"/m/{i}", (i + 1) * GiB, count, rank=i, mirror_count=2) for i in range(6)]
    placement = make_policy("greedy").place(cluster, requests)
    assert not placement.refused
    for a in placement.allocations:
        assert len(a.mirrors) == 2
        assert not mirror_domains_shared(cluster, a)
        for mirror in a.mirrors:
            osts = [o for c in mirror for o in c.osts]
            assert len(osts) == len(set(osts))
            if count == ALL_OSTS:  # a -1 copy takes every OST of its rack
                assert len(osts) == 8
            else:
                assert len(osts) == count


def test_copies_do_not_pile_onto_the_fast_servers():
    """Two fast servers and two slow ones, one OST each, files at stripe count 2 with 2 copies: a copy placed
    first would take both fast servers and leave the other copy both slow ones; taking objects in turn, each
    copy gets one fast and one slow server."""
    cluster = _cluster(per=1, bw={0: 800, 1: 800, 2: 200, 3: 200})
    requests = [WriteRequest("a", "/m/0", 4 * GiB, 2, rank=0, mirror_count=2)]
    (a,) = make_policy("greedy").place(cluster, requests).allocations
    fast = {0, 1}
    for mirror in a.mirrors:
        assert len({o for c in mirror for o in c.osts} & fast) == 1


def test_a_copy_leaves_enough_domains_for_the_copies_after_it():
    """Three servers of 2 OSTs. 2 copies at stripe count 4: whichever two servers one copy takes, the other has 2
    OSTs left, so the file is refused, the reason naming the domains. 3 copies at stripe count 2: a copy that
    spread over two servers would leave the third copy none, so each copy keeps to a server of its own."""
    cluster = _cluster(servers=3, per=2)
    refused = make_policy("greedy").place(cluster, [WriteRequest("a", "/m/0", GiB, 4, rank=0, mirror_count=2)])
    ((_, reason),) = refused.refused
    assert "oss0, oss1, oss2" in reason
    placed = make_policy("greedy").place(cluster, [WriteRequest("a", "/m/0", GiB, 2, rank=0, mirror_count=3)])
    (a,) = placed.allocations
    assert sorted(len(d) for d in _copy_domains(cluster, a)) == [1, 1, 1]


def test_fewer_domains_than_copies_is_refused_alone():
    cluster = _cluster(servers=2, per=4, pools={0: ("flash",)})
    requests = [WriteRequest("a", "/m/0", GiB, 1, rank=0, mirror_count=2, pool="flash"),
                WriteRequest("a", "/m/1", GiB, 1, rank=1, mirror_count=2)]
    placement = make_policy("greedy").place(cluster, requests)
    assert type(placement.outcomes[0]) is Refused and "pool flash has 1 (oss0)" in placement.outcomes[0].reason
    assert isinstance(placement.outcomes[1], Allocation) and not mirror_domains_shared(cluster, placement.outcomes[1])


def test_pools_degraded_osts_and_the_fill_cap_are_kept():
    """Pool flash on servers 0-2; OST 0 degraded; OSTs 4-7 (server 1) nearly full: every copy stays in the pool,
    off the degraded OST (room elsewhere), within the cap, and the copies keep to domains of their own."""
    avail = {i: 60 * MiB for i in range(4, 8)}
    cluster = _cluster(pools={0: ("flash",), 1: ("flash",), 2: ("flash",)}, states={0: "degraded"}, avail=avail)
    requests = [WriteRequest("a", f"/m/{i}", 512 * MiB, 2, rank=i, mirror_count=2, pool="flash") for i in range(4)]
    placement = make_policy("greedy").place(cluster, requests)
    assert not placement.refused
    added: dict[int, int] = {}
    for r, a in zip(requests, placement.allocations):
        assert not mirror_domains_shared(cluster, a)
        for _, ost, b in a.objects(r.write_bytes):
            assert ost < 12 and ost != 0
            added[ost] = added.get(ost, 0) + b
    for o in cluster.osts:
        assert added.get(o.index, 0) <= o.room_bytes(cluster.fill_cap)


def test_a_mirrored_pfl_file_keeps_every_component_of_a_copy_in_its_domains():
    comps = (Component(0, 64 * MiB, 1), Component(64 * MiB, EOF_END, 2))
    cluster = _cluster()
    requests = [WriteRequest("a", "/m/0", GiB, 2, rank=0, mirror_count=2, components=comps)]
    placement = make_policy("greedy").place(cluster, requests)
    (a,) = placement.allocations
    assert len(a.mirrors) == 2 and all(len(m) == 2 for m in a.mirrors)
    assert not mirror_domains_shared(cluster, a)


def test_unmirrored_batches_are_placed_as_before():
    """A batch without mirrors takes the plain list schedule; mixed with a mirrored file, the plain files are
    placed exactly as alone when they come first (largest first)."""
    cluster = _cluster()
    plain = [WriteRequest("a", f"/p/{i}", 4 * GiB, 2, rank=i) for i in range(4)]
    alone = make_policy("greedy").place(cluster, plain).allocations
    mixed = make_policy("greedy").place(cluster, plain + [WriteRequest("a", "/m/0", GiB, 2, rank=9,
                                                                        mirror_count=2)]).allocations
    assert [a.osts for a in alone] == [a.osts for a in mixed[:4]]
