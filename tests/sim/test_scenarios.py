"""The simulator's scenarios, metrics and bound, and the targets the placement engine must meet."""

import numpy as np
import pytest

from iez.sim.engine import run
from iez.sim.metrics import balance, ost_cost_bound, window_bound
from iez.sim.scenarios import SCENARIOS, resolve

PAPER = [s for s in SCENARIOS if s.startswith("paper-")]
SKEWED = [s for s in SCENARIOS if s.startswith("skewed-")]
CONTRACT_NAMES = ["paper-ior-fpp-sc8-8", "paper-ior-fpp-sc8-16", "paper-ior-fpp-sc8-64", "paper-ior-fpp-sc4-64",
                  "paper-hacc-fpp-sc8-8", "paper-hacc-fpp-sc8-16", "paper-hacc-fpp-sc8-32",
                  "paper-ior-ssf-sc8-16", "paper-ior-ssf-sc8-32", "paper-concurrent"]


@pytest.fixture(scope="module")
def results():
    names = PAPER + SKEWED + ["seq-mixed-jobs"]
    return {(n, p): run(SCENARIOS[n], p) for n in names for p in ("rr", "qos", "iez", "random")}


def test_every_contract_scenario_exists():
    assert set(CONTRACT_NAMES) <= set(SCENARIOS) and set(PAPER) == set(CONTRACT_NAMES)


@pytest.mark.parametrize("name", PAPER)
def test_iez_is_near_perfect_or_optimal_and_beats_lustre_on_paper_scenarios(results, name):
    iez = results[(name, "iez")]
    assert iez.ost_cost <= max(1.02, iez.ost_cost_bound + 0.01)
    assert iez.ost_cost < results[(name, "rr")].ost_cost
    assert iez.ost_cost < results[(name, "qos")].ost_cost


@pytest.mark.parametrize("name", SKEWED)
def test_iez_stays_balanced_on_skewed_fill_where_lustre_does_not(results, name):
    iez = results[(name, "iez")]
    assert iez.ost_cost <= max(1.05, iez.ost_cost_bound + 0.01)
    assert results[(name, "rr")].ost_cost > 1.05 and results[(name, "qos")].ost_cost > 1.05


def test_skewed_fill_turns_lustre_to_its_weighted_allocator(results):
    # Lustre's QoS only takes over once free space is more than 17 % apart: the paper fill
    # (10-22 % full) keeps it in round-robin, the skewed fill (20-80 %) does not.
    for name in PAPER:
        assert results[(name, "rr")].ost_util == results[(name, "qos")].ost_util
    for name in SKEWED:
        assert results[(name, "rr")].ost_util != results[(name, "qos")].ost_util


def test_sequential_jobs_stay_balanced(results):
    assert results[("seq-mixed-jobs", "iez")].ost_cost <= 1.03
    assert results[("seq-mixed-jobs", "iez")].ost_cost < results[("seq-mixed-jobs", "rr")].ost_cost


def test_no_policy_beats_the_bound(results):
    for (name, policy), r in results.items():
        assert r.ost_cost >= r.ost_cost_bound - 1e-9, (name, policy)


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
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        resolve("paper-ior-fpp-sc8-8,nope")
