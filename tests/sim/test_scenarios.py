"""The simulator's scenarios and metrics, and the targets issue 12 sets the placement engine on them.

Bounds hold for every policy; the targets (iez's modelled I/O time within 1 % of Lustre's better
baseline and within 5 % of the bound, within the fill cap, no ENOSPC, no refusal) are checked per
scenario, and known allocator shortfalls are marked with the reason.
"""

import numpy as np
import pytest

from iez.sim.engine import prepare, run
from iez.sim.metrics import balance, ost_cost_bound, window_bound
from iez.sim.scenarios import SCENARIOS, resolve

PAPER = [s for s in SCENARIOS if s.startswith("paper-")]
SKEWED = [s for s in SCENARIOS if s.startswith("skewed-")]
FAMILIES = ("hetfill", "hetbw", "few-files", "bigstripe", "sequence")
NEW = [s.name for s in SCENARIOS.values() if set(s.tags) & set(FAMILIES) and s.name != "seq-mixed-jobs"]
CONTRACT_NAMES = ["paper-ior-fpp-sc8-8", "paper-ior-fpp-sc8-16", "paper-ior-fpp-sc8-64", "paper-ior-fpp-sc4-64",
                  "paper-hacc-fpp-sc8-8", "paper-hacc-fpp-sc8-16", "paper-hacc-fpp-sc8-32",
                  "paper-ior-ssf-sc8-16", "paper-ior-ssf-sc8-32", "paper-concurrent"]
#: Where the allocator does not (yet) meet issue 12's targets, and why (the simulator shows it).
KNOWN: dict[str, str] = {}
#: Where a baseline is faster only by writing past the fill cap that iez keeps (iez is at the bound there).
CAP_BOUND = {"hetfill-new-oss-3"}


@pytest.fixture(scope="module")
def results():
    names = PAPER + SKEWED + ["seq-mixed-jobs"] + NEW
    out = {}
    for name in names:
        prepared = prepare(SCENARIOS[name])
        for policy in ("rr", "qos", "iez"):
            out[(name, policy)] = run(SCENARIOS[name], policy, prepared=prepared)
    return out


def test_every_contract_scenario_exists():
    assert set(CONTRACT_NAMES) <= set(SCENARIOS) and set(PAPER) == set(CONTRACT_NAMES)


@pytest.mark.parametrize("family", FAMILIES)
def test_each_new_family_has_three_variants_or_more(family):
    assert len(resolve(family)) >= 3


@pytest.mark.slow
def test_no_policy_beats_the_bounds(results):
    for (name, policy), r in results.items():
        assert r.ost_cost >= r.ost_cost_bound - 1e-9, (name, policy)
        if r.max_fill <= r.fill_cap and not r.refused:  # the makespan bound holds within the cap
            assert r.makespan_s >= r.makespan_bound_s * (1 - 1e-9), (name, policy)


@pytest.mark.slow
def test_bounds_do_not_depend_on_the_policy(results):
    for name in {n for n, _ in results}:
        assert len({results[(name, p)].makespan_bound_s for p in ("rr", "qos", "iez")}) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", PAPER + SKEWED + ["seq-mixed-jobs"] + NEW)
def test_iez_meets_the_targets_of_issue_12(results, name):
    if name in KNOWN:
        pytest.xfail(KNOWN[name])
    iez, rr, qos = (results[(name, p)] for p in ("iez", "rr", "qos"))
    assert not iez.refused and iez.enospc_files == 0 and iez.excluded_bytes == 0
    assert iez.max_fill <= iez.fill_cap + 1e-12
    assert iez.makespan_s <= 1.05 * iez.makespan_bound_s
    baselines = [r.makespan_s for r in (rr, qos) if r.max_fill <= r.fill_cap and not r.refused]
    if name not in CAP_BOUND:
        baselines = [rr.makespan_s, qos.makespan_s]
    if baselines:
        assert iez.makespan_s <= 1.01 * min(baselines)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in NEW if n.startswith("seq-skewed")])
def test_every_job_of_a_sequence_is_as_fast_as_round_robin_and_fill_spreads_no_more(results, name):
    iez, rr = results[(name, "iez")], results[(name, "rr")]
    assert len(iez.job_makespans_s) == len(iez.fill_spread_by_job) == 100
    assert all(a <= b * (1 + 1e-9) for a, b in zip(iez.job_makespans_s, rr.job_makespans_s))
    assert iez.fill_spread_after <= rr.fill_spread_after


@pytest.mark.slow
def test_cap_bound_scenarios_are_where_round_robin_passes_the_cap(results):
    for name in CAP_BOUND:
        rr, iez = results[(name, "rr")], results[(name, "iez")]
        assert rr.max_fill > rr.fill_cap and rr.makespan_s < iez.makespan_bound_s
        assert iez.makespan_s <= iez.makespan_bound_s * 1.001


@pytest.mark.slow
def test_skewed_fill_turns_lustre_to_its_weighted_allocator(results):
    # Lustre's QoS only takes over once free space is more than 17 % apart: the paper fill
    # (10-22 % full) keeps it in round-robin, the skewed fill (20-80 %) does not.
    for name in PAPER:
        assert results[(name, "rr")].ost_util == results[(name, "qos")].ost_util
    for name in SKEWED:
        assert results[(name, "rr")].ost_util != results[(name, "qos")].ost_util


def test_bound_is_exact_for_equal_stripes_on_equal_osts():
    # 8 files x 8 equal stripes on 15 equal OSTs: one OST holds 5 against a mean of 64/15.
    assert ost_cost_bound(np.full(64, 1.0), np.full(15, 100.0)) == pytest.approx(5 / (64 / 15))
    assert ost_cost_bound(np.full(60, 1.0), np.full(15, 100.0)) == pytest.approx(1.0)


def test_window_bound_picks_the_most_similar_osts_for_a_shared_file():
    avail = np.array([10.0, 50, 51, 52, 53, 90])
    assert window_bound(np.full(4, 1.0), avail) == pytest.approx((1 / 50) / np.mean(1 / avail[1:5]))


def test_ost_cost_is_max_over_mean_of_bytes_over_initial_free_space():
    app = np.array([30.0, 10, 20])
    avail = np.array([60.0, 20, 40])
    b = balance(app, avail, used=np.array([40.0, 80, 60]), total=np.full(3, 100.0),
                oss_of=np.array(["a", "a", "b"]), evaluated=np.ones(3, dtype=bool))
    assert b.ost_cost == pytest.approx(1.0) and b.max_ost_util == pytest.approx(0.5)
    assert b.max_fill == pytest.approx(0.9) and b.mean_fill == pytest.approx(0.8)


def test_resolve_knows_families_and_refuses_unknown_names():
    assert {s.name for s in resolve("paper")} == set(PAPER)
    assert {s.name for s in resolve("hetfill")} == {f"hetfill-{k}-{v}" for k in ("new-oss", "wide", "one-full")
                                                    for v in (1, 2, 3)}
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        resolve("paper-ior-fpp-sc8-8,nope")
