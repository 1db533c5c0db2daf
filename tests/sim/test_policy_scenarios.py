"""Issue 13's simulator scenarios: pools, OST states and PFL defaults.

iez never puts a byte outside a file's pool or on an OST that takes no stripes
(``excluded_bytes`` 0), refuses nothing, stays within the cap, and is as fast
as the better Lustre baseline (within 1 %) and within 5 % of the bound.
"""

import pytest

from iez.allocate import make_policy
from iez.sim.engine import _view, prepare, run
from iez.sim.scenarios import SCENARIOS, resolve

POLICY = [s.name for s in resolve("policy")]


@pytest.fixture(scope="module")
def results():
    out = {}
    for name in POLICY:
        prepared = prepare(SCENARIOS[name])
        for policy in ("rr", "qos", "iez"):
            out[(name, policy)] = run(SCENARIOS[name], policy, prepared=prepared)
    return out


def test_the_issue_names_a_scenario_for_each_policy():
    assert {"policy-pools-flash-disk", "policy-degraded-ost", "policy-inactive-ost", "policy-pfl-default"} <= set(
        POLICY)


@pytest.mark.slow
@pytest.mark.parametrize("name", POLICY)
def test_iez_honours_the_policies_and_is_fastest(results, name):
    iez, rr, qos = (results[(name, p)] for p in ("iez", "rr", "qos"))
    assert iez.excluded_bytes == 0 and not iez.refused and iez.enospc_files == 0
    assert iez.max_fill <= iez.fill_cap + 1e-12
    assert iez.makespan_s <= 1.05 * iez.makespan_bound_s
    assert iez.makespan_s <= 1.01 * min(rr.makespan_s, qos.makespan_s)


@pytest.mark.parametrize("name", POLICY)
def test_lustre_baselines_honour_pools_and_states_too(results, name):
    """Lustre's own allocators only choose from the pool and skip OSTs that take no stripes."""
    for policy in ("rr", "qos"):
        assert results[(name, policy)].excluded_bytes == 0


def _placements(name, policy):
    prepared = prepare(SCENARIOS[name])
    view = _view(prepared.cluster, prepared.used0)
    return view, [make_policy(policy).place(view, job.requests) for job in prepared.jobs]


@pytest.mark.parametrize("policy", ["iez", "rr", "qos"])
def test_a_degraded_ost_is_used_only_by_files_that_need_it(policy):
    view, (placement,) = _placements("policy-degraded-ost", policy)
    degraded = {o.index for o in view.osts if o.state == "degraded"}
    assert degraded == {5}
    for allocation in placement.allocations:
        assert not set(allocation.osts) & degraded and not allocation.note
    view, (placement,) = _placements("policy-degraded-ost-needed", policy)
    for allocation in placement.allocations:  # every OST is needed: the degraded one too, and the note says so
        assert 5 in allocation.osts and "degraded OST 5" in allocation.note


@pytest.mark.parametrize("policy", ["iez", "rr", "qos"])
def test_inactive_nocreate_and_readonly_osts_get_nothing(policy):
    view, (placement,) = _placements("policy-inactive-ost", policy)
    banned = {o.index for o in view.osts if not o.takes_stripes}
    assert banned == {3, 10, 13}
    assert placement.allocations and all(not set(a.osts) & banned for a in placement.allocations)


def test_pfl_default_instantiates_only_the_extents_each_file_reaches():
    view, (placement,) = _placements("policy-pfl-default", "iez")
    for request, allocation in zip(placement.requests, placement.outcomes):
        comps = allocation.components
        assert [(c.start, c.end) for c in comps] == [(0, 1 << 20), (1 << 20, 256 << 20), (256 << 20, -1)]
        reached = [bool(c.osts) for c in comps]
        assert reached == [True, request.write_bytes > 1 << 20, request.write_bytes > 256 << 20]
        for c in comps:
            assert len(set(c.osts)) == len(c.osts) and c.stripe_size == 1 << 20
            if c.osts:
                assert len(c.osts) == c.stripe_count == {0: 1, 1 << 20: 4, 256 << 20: 8}[c.start]
        assert sum(b for _, b in allocation.stripe_bytes(request.write_bytes)) == request.write_bytes


def test_pfl_components_stay_in_their_own_pools():
    view, (placement,) = _placements("policy-pfl-pools", "iez")
    pools = {o.index: set(o.pools) for o in view.osts}
    for allocation in placement.allocations:
        for c in allocation.components:
            assert all(c.pool in pools[o] for o in c.osts), (allocation.file, c)
