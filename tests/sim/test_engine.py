"""The simulator's engine: exact byte accounting, ENOSPC, refusals, pools and states, per-job results."""

import json

import numpy as np
import pytest

from iez.model import WriteRequest, io_time, raid0_bytes
from iez.sim.cluster import ClusterSpec, DescribedCluster, FillProfile, GiB, Overrides
from iez.sim.description import parse_json
from iez.sim.engine import Settings, _view, error_row, prepare, run
from iez.sim.scenarios import SCENARIOS, Scenario
from iez.sim.workloads import Job, ior

POLICIES = ("rr", "qos", "paper", "iez", "random")


def scenario(jobs, cluster=None, name="test"):
    return Scenario(name, "a test", cluster or ClusterSpec(3, 5, 10 * GiB, FillProfile("random", 0.1, 0.3, 1)),
                    lambda: jobs)


def job(app, sizes, stripe_count=1, pool=None):
    return Job(app, tuple(WriteRequest(app, f"/l/{app}/f{i}", size, stripe_count, i, pool)
                          for i, size in enumerate(sizes)))


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_every_byte_is_counted_exactly_even_below_one_kib(policy):
    sizes = [0, 1, 100, 1023, 1025, 4097, 65535, 131073, 999_999_937, 3 * GiB + 7]
    result = run(scenario([job("a", sizes, 1), job("b", sizes, 4), job("c", sizes, -1)]), policy)
    assert result.placed_files == result.files == 3 * len(sizes) and not result.refused
    assert sum(result.ost_bytes) == result.written_bytes == 3 * sum(sizes)
    assert result.enospc_files == 0 and result.excluded_bytes == 0


def test_fill_after_is_exact_bytes_over_capacity():
    sc = scenario([job("a", [1, 2, 3], 1)])
    result = run(sc, "rr")
    cluster, used0 = sc.cluster.build()
    total = np.array([o.bytes_total for o in cluster.osts])
    after = (used0 + np.array(result.ost_bytes)) / total
    assert result.ost_fill_after == pytest.approx(tuple(after), rel=0, abs=0)


@pytest.mark.parametrize("name", ["hetfill-one-full-1", "hetfill-one-full-2", "hetfill-one-full-3"])
def test_size_blind_round_robin_runs_the_nearly_full_ost_out_of_space(name):
    rr = run(SCENARIOS[name], "rr")
    assert rr.enospc_files >= 1
    assert rr.max_fill == 1.0  # the OST is written up to its capacity, not past it
    assert rr.written_bytes < sum(rr.ost_bytes)  # what did not fit was not written
    iez = run(SCENARIOS[name], "iez")
    assert iez.enospc_files == 0 and iez.max_fill <= iez.fill_cap and not iez.refused


def test_a_refused_file_is_listed_with_its_reason_and_the_rest_still_reported():
    jobs = [Job("a", (WriteRequest("a", "/l/wide", GiB, 20),
                      WriteRequest("a", "/l/nopool", GiB, 1, pool="flash"),
                      *(WriteRequest("a", f"/l/ok{i}", GiB, 2, i) for i in range(4))))]
    for policy in ("rr", "qos", "iez"):
        result = run(scenario(jobs), policy)
        refused = {r["file"]: r["reason"] for r in result.refused}
        assert set(refused) == {"/l/wide", "/l/nopool"}, policy
        assert "stripe count 20 exceeds the 15 OSTs" in refused["/l/wide"]
        assert "pool flash" in refused["/l/nopool"]
        assert result.placed_files == 4 and result.written_bytes == 4 * GiB
        assert result.as_json()["refused"][0] == {"file": "/l/wide", "app": "a", "reason": refused["/l/wide"]}


def test_an_error_row_still_names_scenario_and_policy():
    assert error_row("paper-concurrent", "qos", "boom") == {"scenario": "paper-concurrent", "policy": "qos",
                                                            "error": "boom"}


POOLED = {"oss": [
    {"id": "a", "osts": [
        {"index": 0, "kbytes_total": 10 << 20, "kbytes_avail": 8 << 20, "pools": ["flash"]},
        {"index": 1, "kbytes_total": 10 << 20, "kbytes_avail": 8 << 20, "pools": ["flash"], "state": "readonly"},
        {"index": 2, "kbytes_total": 10 << 20, "kbytes_avail": 8 << 20, "state": "inactive"}]},
    {"id": "b", "osts": [
        {"index": 3, "kbytes_total": 10 << 20, "kbytes_avail": 8 << 20, "pools": ["flash"], "state": "degraded"},
        {"index": 4, "kbytes_total": 10 << 20, "kbytes_avail": 8 << 20, "state": "nocreate"},
        {"index": 5, "kbytes_total": 10 << 20, "kbytes_avail": 8 << 20, "pools": ["flash"]},
        {"index": 6, "kbytes_total": 10 << 20, "kbytes_avail": 9 << 20}]}]}


@pytest.mark.parametrize("policy", ["iez", "rr", "qos"])
def test_no_bytes_land_outside_the_pool_or_on_osts_that_refuse_stripes(policy):
    cluster = DescribedCluster(parse_json(json.dumps(POOLED)), "pooled.json")
    jobs = [job("flash", [GiB] * 6, 2, pool="flash"), job("any", [GiB // 2] * 6, 1)]
    result = run(scenario(jobs, cluster), policy)
    assert result.excluded_bytes == 0 and not result.refused
    placed = dict(zip(result.ost_index, result.ost_bytes))
    assert placed[1] == placed[2] == placed[4] == 0  # readonly, inactive, nocreate
    assert sum(placed[i] for i in (0, 3, 5)) >= 6 * GiB  # the flash pool's files stay in it


def test_the_view_carries_bandwidth_load_states_pools_and_the_cap_with_free_space_rounded_down():
    cluster = parse_json(json.dumps(POOLED))
    used = np.array([o.bytes_total - o.bytes_avail + 1023 for o in cluster.osts], dtype=np.int64)
    view = _view(cluster, used)
    for seen, real in zip(view.osts, cluster.osts):
        assert (seen.bandwidth, seen.load, seen.state, seen.pools) == (real.bandwidth, real.load, real.state,
                                                                         real.pools)
        assert seen.kbytes_avail == real.kbytes_avail - 1  # 1023 bytes more used: one KiB less to offer
    assert view.fill_cap == cluster.fill_cap and view.osses == cluster.osses


def test_the_fill_cap_setting_reaches_the_policy():
    sc = scenario([ior(16, 16 * GiB, 4)])
    result = run(sc, "iez", settings=Settings(Overrides(fill_cap=0.5)))
    assert result.fill_cap == 0.5 and result.max_fill <= 0.5


def test_jobs_run_one_after_another_each_against_what_the_earlier_left():
    jobs = [ior(15, 15 * GiB, 1, app=f"j{k}", directory=f"/l/j{k}") for k in range(3)]
    sc = scenario(jobs, ClusterSpec(3, 5, 10 * GiB, FillProfile("random", 0.1, 0.8, 5)))
    result = run(sc, "iez")
    assert len(result.job_makespans_s) == len(result.fill_spread_by_job) == 3
    assert sum(result.job_makespans_s) == pytest.approx(result.makespan_s)
    assert result.fill_spread_by_job[-1] == pytest.approx(result.fill_spread_after)
    assert result.makespan_bound_s == pytest.approx(sum(result.job_makespan_bounds_s))
    assert result.makespan_s >= result.makespan_bound_s


def test_makespan_is_the_models_io_time_with_bandwidth_and_congestion():
    spec = ClusterSpec(3, 5, 10 * GiB, FillProfile("random", 0.1, 0.3, 2), oss_bandwidth_factor=(1, 0.5, 1),
                       ost_load_share=((0, 0.9), (7, 0.5)))
    sc = scenario([ior(8, 8 * GiB, 4)], spec)
    prepared = prepare(sc)
    result = run(sc, "rr", prepared=prepared)
    expected = io_time(prepared.cluster, dict(zip(result.ost_index, result.ost_bytes)))
    assert result.makespan_s == pytest.approx(expected, rel=1e-12)


def test_bandwidth_overrides_scale_a_scenario_and_fill_seed_changes_only_the_fill():
    spec = SCENARIOS["hetbw-slow-oss-1"].cluster
    base, _ = spec.build()
    faster, _ = spec.build(Overrides(ost_bandwidth=400 << 20, oss_bandwidth=1200 << 20))
    assert faster.osts[0].bandwidth == 2 * base.osts[0].bandwidth
    assert [s.bandwidth for s in faster.osses.values()] == [2 * s.bandwidth for s in base.osses.values()]
    _, used = spec.build()
    _, reseeded = spec.build(Overrides(fill_seed=1234))
    assert not np.array_equal(used, reseeded)


def test_per_object_bytes_follow_raid0_with_capped_stripes():
    result = run(SCENARIOS["bigstripe-ssf-64g-sc8"], "rr")
    sizes = sorted(b for b in result.ost_bytes if b)
    stripe = (1 << 32) - 2 * 65536  # Method II's even multiple of 64 KiB under the 32-bit limit
    assert sorted(sizes) == sorted(raid0_bytes(64 * GiB, stripe, 8))
    assert sum(sizes) == 64 * GiB
