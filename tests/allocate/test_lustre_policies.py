"""Every policy honours Lustre's own policies: pools, OST states, PFL templates, overstriping, Data-on-MDT.

Property tests over random clusters and templates check the rules for iez and
for Lustre's baselines alike; example tests pin the details (what is refused
and why, stripe sizes, the degraded note).
"""

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iez.allocate import make_policy
from iez.allocate.base import Refused
from iez.model import OSS, OST, ClusterState, Component, WriteRequest

MiB = 1 << 20
POLICIES = ["iez", "rr", "qos"]
STATES = ["active", "active", "active", "degraded", "inactive", "readonly", "nocreate"]


@st.composite
def clusters(draw):
    n_oss = draw(st.integers(1, 4))
    per = draw(st.integers(1, 5))
    osts = []
    for i in range(n_oss * per):
        pools = tuple(p for p in ("flash", "disk") if draw(st.booleans()))
        total = 64 << 20  # KiB: 64 GiB
        osts.append(OST(i, f"oss{i // per}", total, draw(st.integers(total // 4, total)),
                        state=draw(st.sampled_from(STATES)), pools=pools))
    return ClusterState.build(osts, [OSS(f"oss{k}") for k in range(n_oss)])


@st.composite
def requests(draw):
    out = []
    for n in range(draw(st.integers(1, 12))):
        pool = draw(st.sampled_from([None, "flash", "disk"]))
        size = draw(st.sampled_from([0, 300 << 10, 3 * MiB, 40 * MiB, 700 * MiB]))
        kind = draw(st.sampled_from(["plain", "pfl", "dom", "over"]))
        if kind == "plain":
            out.append(WriteRequest("app", f"/f{n}", size, draw(st.integers(1, 4)), n, pool))
            continue
        comps = [Component(0, MiB, 0 if kind == "dom" else 1, MiB, dom=kind == "dom")]
        comps.append(Component(MiB, 64 * MiB, draw(st.integers(1, 3)), MiB,
                               draw(st.sampled_from([None, "flash", "disk"]))))
        comps.append(Component(64 * MiB, -1, draw(st.integers(1, 8)) if kind == "over" else draw(st.integers(1, 3)),
                               MiB, overstriping=kind == "over"))
        out.append(WriteRequest("app", f"/f{n}", size, 1, n, pool, tuple(comps)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), batch=requests())
def test_placements_stay_in_pools_off_closed_osts_and_distinct(policy, cluster, batch):
    by_index = {o.index: o for o in cluster.osts}
    placement = make_policy(policy).place(cluster, batch)
    for request, outcome in zip(batch, placement.outcomes):
        if isinstance(outcome, Refused):
            assert outcome.reason
            continue
        comps = outcome.components or (Component(0, -1, outcome.stripe_count, outcome.stripe_size, outcome.pool,
                                                 outcome.osts),)
        healthy_left = {}
        for c in comps:
            pool = c.pool
            if c.dom or not c.reached(request.write_bytes):
                assert not c.osts  # nothing on OSTs for the MDT or for extents the file does not reach
                continue
            assert c.osts, (request, c)
            for o in c.osts:
                ost = by_index[o]
                assert ost.takes_stripes, f"{policy} put {request.file} on {ost.state} OST {o}"
                assert pool is None or pool in ost.pools, f"{policy} put {request.file} outside pool {pool}"
            if not c.overstriping:
                assert len(set(c.osts)) == len(c.osts)
            healthy_left[c.start] = [o for o in cluster.osts if o.state == "active" and (pool is None or pool in o.pools)]
            if any(by_index[o].state == "degraded" for o in c.osts):
                assert "degraded" in outcome.note
        assert sum(b for _, b in outcome.stripe_bytes(request.write_bytes)) == request.write_bytes - sum(
            c.bytes_in(request.write_bytes) for c in comps if c.dom)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_pool_restricts_the_candidates_and_a_too_small_pool_refuses_alone(policy):
    osts = [OST(i, f"oss{i % 3}", 1 << 24, 1 << 23, pools=("flash",) if i < 3 else ()) for i in range(9)]
    cluster = ClusterState.build(osts)
    batch = [WriteRequest("a", "/in", 8 * MiB, 3, 0, "flash"), WriteRequest("a", "/wide", 8 * MiB, 4, 1, "flash"),
             WriteRequest("a", "/free", 8 * MiB, 6, 2)]
    placed = make_policy(policy).place(cluster, batch)
    assert set(placed.outcomes[0].osts) == {0, 1, 2} and placed.outcomes[0].pool == "flash"
    assert isinstance(placed.outcomes[1], Refused)
    assert placed.outcomes[1].reason == "stripe count 4 exceeds the 3 OSTs of pool flash that take new stripes"
    assert len(set(placed.outcomes[2].osts)) == 6


@pytest.mark.parametrize("state", ["inactive", "readonly", "nocreate"])
def test_an_ost_that_takes_no_stripes_is_never_chosen_even_when_needed(state):
    osts = [OST(i, f"oss{i}", 1 << 24, 1 << 23, state=state if i == 0 else "active") for i in range(4)]
    cluster = ClusterState.build(osts)
    for policy in POLICIES:
        placed = make_policy(policy).place(cluster, [WriteRequest("a", "/f", MiB, 4), WriteRequest("a", "/g", MiB, 3)])
        assert isinstance(placed.outcomes[0], Refused) and "3 OSTs of the file system" in placed.outcomes[0].reason
        assert set(placed.outcomes[1].osts) == {1, 2, 3}


def test_degraded_is_last_resort_for_iez_with_the_reason_in_the_note():
    osts = [OST(i, f"oss{i}", 1 << 24, 1 << 23, state="degraded" if i == 0 else "active") for i in range(4)]
    cluster = ClusterState.build(osts)
    placed = make_policy("iez").place(cluster, [WriteRequest("a", "/three", 64 * MiB, 3),
                                                WriteRequest("a", "/four", 64 * MiB, 4)])
    assert set(placed.outcomes[0].osts) == {1, 2, 3} and placed.outcomes[0].note == ""
    assert 0 in placed.outcomes[1].osts
    assert placed.outcomes[1].note == "degraded OST 0 used: no other OST could take the file"


def test_a_composite_template_gets_osts_per_reached_component_with_its_stripe_sizes():
    osts = [OST(i, f"oss{i % 4}", 1 << 24, 1 << 23) for i in range(8)]
    cluster = ClusterState.build(osts)
    template = (Component(0, MiB, 1, MiB), Component(MiB, 256 * MiB, 4, 4 * MiB), Component(256 * MiB, -1, 8))
    placed = make_policy("iez").place(cluster, [WriteRequest("a", "/f", 100 * MiB, 1, components=template)])
    a = placed.outcomes[0]
    assert [len(c.osts) for c in a.components] == [1, 4, 0]
    assert [c.stripe_size for c in a.components] == [MiB, 4 * MiB, None]  # the third is the template, unplaced
    assert a.stripe_count == 5 and a.osts == a.components[0].osts + a.components[1].osts
    per = dict(Counter())
    for ost, b in a.stripe_bytes(100 * MiB):
        per[ost] = per.get(ost, 0) + b
    assert sum(per.values()) == 100 * MiB


def test_a_template_without_stripe_size_gets_one_that_divides_its_extent():
    cluster = ClusterState.build([OST(i, f"oss{i}", 1 << 26, 1 << 26) for i in range(4)])
    template = (Component(0, 3 * MiB, 2), Component(3 * MiB, -1, 4))
    a = make_policy("iez").place(cluster, [WriteRequest("a", "/f", 64 * MiB, 1, components=template)]).outcomes[0]
    first, second = a.components
    assert 3 * MiB % first.stripe_size == 0 and first.stripe_size % 65536 == 0
    assert 3 * MiB % second.stripe_size == 0


def test_overstriping_only_where_the_template_asks_for_it():
    cluster = ClusterState.build([OST(i, f"oss{i % 2}", 1 << 24, 1 << 23) for i in range(4)])
    plain = (Component(0, -1, 8, MiB, None, (), False, False),)
    over = (Component(0, -1, 8, MiB, None, (), False, True),)
    for policy in POLICIES:
        placed = make_policy(policy).place(cluster, [WriteRequest("a", "/plain", 64 * MiB, 1, components=plain),
                                                     WriteRequest("a", "/over", 64 * MiB, 1, components=over)])
        assert isinstance(placed.outcomes[0], Refused) and "stripe count 8 exceeds the 4 OSTs" in placed.outcomes[0].reason
        comp = placed.outcomes[1].components[0]
        assert comp.overstriping and len(comp.osts) == 8 and Counter(comp.osts) == {0: 2, 1: 2, 2: 2, 3: 2}


def test_a_file_that_fits_its_data_on_mdt_component_is_left_to_lustre():
    cluster = ClusterState.build([OST(i, f"oss{i}", 1 << 24, 1 << 23) for i in range(4)])
    template = (Component(0, MiB, 0, MiB, dom=True), Component(MiB, -1, 2, MiB))
    placed = make_policy("iez").place(cluster, [WriteRequest("a", "/small", 512 << 10, 1, components=template),
                                                WriteRequest("a", "/big", 9 * MiB, 1, components=template)])
    assert isinstance(placed.outcomes[0], Refused) and "Data-on-MDT" in placed.outcomes[0].reason
    big = placed.outcomes[1]
    assert big.components[0].dom and not big.components[0].osts and len(big.components[1].osts) == 2
    assert sum(b for _, b in big.stripe_bytes(9 * MiB)) == 8 * MiB  # the first MiB lives on the MDT


@pytest.mark.slow
def test_the_degraded_note_reaches_the_db_alloc_show_and_the_api(tmp_path):
    """An administrator sees why a file got a degraded OST: ``iez alloc show`` and ``GET /v1/allocations``."""
    import json
    import subprocess
    import sys

    from fastapi.testclient import TestClient

    from iez.api.app import create_app
    from iez.config import Settings, database_url
    from iez.db.engine import make_engine, write_session
    from iez.db.ingest import store_batch
    from iez.db.models import utcnow
    from iez.db.requests import RequestIn, upsert_requests
    from iez.db.schema import upgrade
    from iez.db.stats import OssReport, OstReport
    from iez.placement import PlacementSettings, place_app

    db = str(tmp_path / "iez.db")
    engine = make_engine(database_url(db))
    upgrade(engine)
    now = utcnow()
    osts = tuple(OstReport(f"fs-OST{i:04x}", i, 1 << 24, 1 << 23, state="degraded" if i == 0 else "active")
                 for i in range(3))
    store_batch(engine, [(OssReport("oss0", 1, now, 0.0, 0.0, osts, 60.0), now)])
    with write_session(engine) as session:
        upsert_requests(session, "app", [RequestIn("/d/wide", 8 * MiB, 3)])
    done = place_app(engine, "app", PlacementSettings(), stale_s=3600, reservation_ttl_s=600)
    assert done.placed and done.placed[0].note == "degraded OST 0 used: no other OST could take the file"
    shown = subprocess.run([sys.executable, "-m", "iez.cli", "alloc", "show", "--db", db, "--file", "/d/wide",
                            "--json"], capture_output=True, text=True)
    assert json.loads(shown.stdout)["note"] == done.placed[0].note
    client = TestClient(create_app(Settings.from_env(env={"IEZ_DB": db, "IEZ_STATE_DIR": str(tmp_path)})))
    answer = client.get("/v1/allocations", params={"path": "/d/wide"})
    assert answer.status_code == 200 and answer.json()["note"] == done.placed[0].note
