"""Run a scenario under a policy: allocate each job against the fill the earlier ones left, then measure.

The model is simple and stated: a stripe object holds the bytes RAID-0
striping gives it; jobs write everything they requested; free space seen by
an allocation is the initial free space minus what earlier jobs wrote. Times
are modelled from bandwidths, never measured.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from iez.allocate import make_policy
from iez.model import OST, Allocation, ClusterState, raid0_bytes
from iez.sim.metrics import balance, makespan, ost_cost_bound, window_bound
from iez.sim.scenarios import Scenario


@dataclass(frozen=True)
class Result:
    """One scenario under one policy; ``ost_bytes`` is per OST in index order."""

    scenario: str
    policy: str
    ost_cost: float
    ost_cost_bound: float
    oss_cost: float
    max_ost_util: float
    mean_ost_util: float
    max_fill: float
    mean_fill: float
    makespan_s: float
    files: int
    allocate_seconds: float
    ost_util: tuple[float, ...]

    def as_json(self) -> dict:
        out = asdict(self)
        out["makespan_modelled"] = True
        return out


def _with_space(cluster: ClusterState, used: np.ndarray) -> ClusterState:
    osts = tuple(
        OST(o.index, o.oss_id, o.kbytes_total, max(0, o.kbytes_total - int(-(-u // 1024))))
        for o, u in zip(cluster.osts, used)
    )
    return ClusterState(osts, cluster.osses)


def run(scenario: Scenario, policy_name: str, seed: int = 0) -> Result:
    cluster, used0 = scenario.cluster.build()
    position = {ost.index: i for i, ost in enumerate(cluster.osts)}
    n = len(cluster.osts)
    app_bytes = np.zeros(n, dtype=np.int64)
    holding = np.zeros(n, dtype=bool)
    pieces: list[int] = []
    policy = make_policy(policy_name, seed=seed)
    spent = 0.0
    files = 0
    for job in scenario.jobs():
        view = _with_space(cluster, used0 + app_bytes)
        start = time.perf_counter()
        allocations = policy.allocate(view, job.requests)
        spent += time.perf_counter() - start
        for request, allocation in zip(job.requests, allocations):
            _account(request.write_bytes, allocation, position, app_bytes, holding, pieces)
        files += len(job.requests)
    total = np.array([o.bytes_total for o in cluster.osts], dtype=float)
    avail = total - used0
    oss_of = np.array([o.oss_id for o in cluster.osts])
    evaluated = holding if scenario.evaluate_over == "holding" else np.ones(n, dtype=bool)
    metrics = balance(app_bytes.astype(float), avail, used0.astype(float), total, oss_of, evaluated)
    piece_array = np.array(pieces, dtype=float)
    bound = window_bound(piece_array, avail) if scenario.evaluate_over == "holding" else ost_cost_bound(
        piece_array, avail)
    util = np.divide(app_bytes, avail, out=np.zeros(n), where=avail > 0)
    return Result(
        scenario=scenario.name,
        policy=policy_name,
        makespan_s=makespan(app_bytes.astype(float), oss_of, scenario.cluster.ost_bandwidth,
                            scenario.cluster.oss_bandwidth),
        ost_cost_bound=bound,
        files=files,
        allocate_seconds=spent,
        ost_util=tuple(float(u) for u in util),
        **metrics.__dict__,
    )


def _account(write_bytes: int, allocation: Allocation, position: dict[int, int], app_bytes: np.ndarray,
             holding: np.ndarray, pieces: list[int]) -> None:
    for ost, stored in zip(allocation.osts, raid0_bytes(write_bytes, allocation.stripe_size, allocation.stripe_count)):
        app_bytes[position[ost]] += stored
        holding[position[ost]] = True
        pieces.append(stored)
