"""Issue 29: iez chooses each mirrored file's failure domains, leaving a server too slow for a copy at stripe count
-1 out of every copy (a -1 copy takes every OST of its domains, as an unmirrored -1 file takes every OST of its
pool)."""

import time

import pytest

from iez.allocate import make_policy
from iez.allocate.mirrors import copy_osts, domain_of, mirror_domains_shared
from iez.model import OSS, OST, ClusterState, MiB, WriteRequest, component_stripe_bytes, io_time


def _cluster(servers=3):
    """Servers of 4 OSTs at 800 MiB/s an OST, but oss2 at 20 MiB/s an OST (its disks busy)."""
    osts = [OST(k * 4 + j, f"oss{k}", 1 << 30, 1 << 29, (20 if k == 2 else 800) * MiB, 0.0)
            for k in range(servers) for j in range(4)]
    return ClusterState.build(osts, [OSS(f"oss{k}", bandwidth=10_000 * MiB) for k in range(servers)], 0.95)


@pytest.mark.slow  # the first mirrored batch of a run imports SciPy's LP solver
@pytest.mark.parametrize("servers", [3, 10])
def test_a_mirrored_file_at_minus_1_leaves_the_slow_server_out(servers):
    """Groups dealt by bandwidth put oss2 beside a fast server, so a copy at -1 took its 20 MiB/s OSTs; with domains
    chosen per file each copy takes fast servers whole and oss2 gets nothing (10 servers: too many to try every
    split, the servers are dealt best first)."""
    cluster = _cluster(servers)
    requests = [WriteRequest("a", f"/m{i}", 3 * MiB, -1, stripe_size=128 * 1024, mirror_count=2) for i in range(4)]
    placement = make_policy("iez").place(cluster, requests)
    assert not placement.refused
    dom = domain_of(cluster)
    per_ost: dict[int, float] = {}
    for request, a in zip(requests, placement.outcomes):
        assert not mirror_domains_shared(cluster, a)
        for mirror in a.mirrors:
            osts = copy_osts(mirror)
            domains = {dom[o] for o in osts}
            # every OST of the copy's domains, none of oss2's
            assert osts == {o.index for o in cluster.osts if dom[o.index] in domains}
            assert "oss2" not in domains
            for comp in mirror:
                for ost, b in zip(comp.osts, component_stripe_bytes(comp, request.write_bytes)):
                    per_ost[ost] = per_ost.get(ost, 0.0) + b
    # at worst one fast server streams one copy of every file: 4 x 3 MiB over 4 x 800 MiB/s
    assert io_time(cluster, per_ost, 0.5) <= 1.01 * 4 * 3 / (4 * 800)


def test_a_split_that_keeps_the_slow_server_is_chosen_when_the_file_needs_its_osts():
    """Stripe count 6 with 2 copies on 4 servers of 4 OSTs: no copy fits one server, so one copy must have oss2;
    each copy still in domains of its own, on its count of distinct OSTs, the slow OSTs holding the fewest."""
    cluster = _cluster(4)
    requests = [WriteRequest("a", f"/w{i}", 64 * MiB, 6, mirror_count=2) for i in range(2)]
    start = time.process_time()
    placement = make_policy("iez").place(cluster, requests)
    assert time.process_time() - start < 5
    assert not placement.refused
    for a in placement.outcomes:
        assert not mirror_domains_shared(cluster, a)
        assert all(len(copy_osts(m)) == 6 for m in a.mirrors)
        assert sum(len(copy_osts(m) & {8, 9, 10, 11}) for m in a.mirrors) == 2  # 6 of 8 OSTs: 4 fast, 2 slow
