"""Run a scenario under a policy: allocate each job against the fill the earlier ones left, then measure.

The model is simple and stated:

- Jobs run one after another. Each job's requests reach the policy together
  (:meth:`Policy.place`), over a view of the cluster whose free space is what
  the earlier jobs left (in KiB, as Lustre reports it); bandwidth, live
  congestion, states, pools and the fill cap come from the cluster.
- A placed file writes its stripe objects in request order, each object's bytes
  (RAID-0 striping, :func:`iez.model.raid0_bytes`) onto its OST up to the OST's
  capacity. A file any of whose objects does not fit counts in ``enospc_files``;
  what fits is written. A refused file writes nothing and is listed with its
  reason.
- Accounting is in exact bytes. Utilisation, OSTCost and I/O time count every
  byte the placement sends (a write that hit ENOSPC still spent its time);
  fill counts what the OSTs hold.
- A job's modelled I/O time is :func:`iez.sim.metrics.makespan` of its bytes;
  ``makespan_s`` is the sum over the jobs (they run one after another), and
  ``makespan_bound_s`` the sum of per-job bounds computed on the space the run
  started with (a job never has more room than that, and less room never makes
  a job faster), so it bounds every placement that keeps to the fill cap. It
  counts every byte a policy must send: every stripe object of every copy of a
  mirrored file, and what keeping the copies of a file in failure domains of
  their own forces (:mod:`iez.sim.mirror_bounds`: a pool with as many domains
  as the file has copies puts a whole copy on each), as iez and the greedy do;
  so it bounds the placements that keep copies apart, not Lustre's FLR, which
  may put two copies on one server.
  Times are modelled from bandwidths, never measured.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from iez.allocate import make_policy
from iez.allocate.base import Refused, StripeRules, expand_requests, part_objects
from iez.model import ALL_OSTS, ClusterState, raid0_bytes
from iez.sim.cluster import Overrides
from iez.sim.metrics import (Bandwidths, balance, fill_spread, makespan, makespan_bound, ost_cost_bound,
                             window_bound)
from iez.sim.mirror_bounds import domain_bound
from iez.sim.scenarios import Scenario
from iez.sim.workloads import Job


@dataclass(frozen=True)
class Settings:
    """What the command line may change: the cluster (:class:`Overrides`) and the policies' knobs."""

    cluster: Overrides = field(default_factory=Overrides)
    fill_weight: float = 0.0
    oss_load_weight: float = 0.5
    threshold_rr: float = 0.17
    prio_free: float = 0.90

    def policy_options(self, name: str) -> dict:
        if name == "iez":
            return {"fill_weight": self.fill_weight, "oss_load_weight": self.oss_load_weight}
        if name == "greedy":
            return {"oss_load_weight": self.oss_load_weight}
        if name == "qos":
            return {"threshold_rr": self.threshold_rr, "prio_free": self.prio_free}
        return {}


@dataclass(frozen=True)
class Result:
    """One scenario under one policy; per-OST lists are in OST index order (``ost_index``)."""

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
    makespan_bound_s: float | None
    files: int
    allocate_seconds: float
    ost_util: tuple[float, ...]
    fill_cap: float = 0.95
    placed_files: int = 0
    enospc_files: int = 0
    excluded_bytes: int = 0
    written_bytes: int = 0
    refused: tuple[dict, ...] = ()
    fill_spread_before: float = 0.0
    fill_spread_after: float = 0.0
    job_makespans_s: tuple[float, ...] = ()
    job_makespan_bounds_s: tuple[float | None, ...] = ()
    fill_spread_by_job: tuple[float, ...] = ()
    ost_index: tuple[int, ...] = ()
    ost_bytes: tuple[int, ...] = ()
    ost_fill_before: tuple[float, ...] = ()
    ost_fill_after: tuple[float, ...] = ()
    #: Scenarios with mirrored files: :func:`iez.sim.failures.mirror_report` (None, and left out, otherwise).
    mirror_report: dict | None = None

    def as_json(self) -> dict:
        """A JSON object; a value that is not a finite number (no bound exists) becomes ``null``."""
        out = {k: _finite(v) for k, v in asdict(self).items()}
        if self.mirror_report is None:
            out.pop("mirror_report")
        else:
            out["mirror_report"] = {k: _finite(v) for k, v in self.mirror_report.items()}
        out["refused"] = list(self.refused)
        out["makespan_modelled"] = True
        return out


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (tuple, list)):
        return [_finite(v) for v in value]
    return value


@dataclass
class Prepared:
    """A scenario's cluster, jobs and policy-independent bounds, shared by the policies run on it."""

    scenario: Scenario
    settings: Settings
    cluster: ClusterState
    used0: np.ndarray  # bytes on each OST at the start (``cluster.osts`` order)
    jobs: list[Job]
    bandwidths: Bandwidths
    _bounds: list[float] | None = None

    @property
    def total(self) -> np.ndarray:
        return np.array([o.bytes_total for o in self.cluster.osts], dtype=np.int64)

    def candidates(self, pool: str | None) -> np.ndarray:
        """OSTs a request of ``pool`` may use: they take new stripes and belong to the pool."""
        return np.array([o.takes_stripes and (pool is None or pool in o.pools) for o in self.cluster.osts],
                        dtype=bool)

    @property
    def job_bounds(self) -> list[float]:
        if self._bounds is None:
            self._bounds = [job_bound(self, job) for job in self.jobs]
        return self._bounds


def prepare(scenario: Scenario, settings: Settings | None = None) -> Prepared:
    settings = settings or Settings()
    cluster, used0 = scenario.cluster.build(settings.cluster)
    return Prepared(scenario, settings, cluster, np.asarray(used0, dtype=np.int64), list(scenario.jobs()),
                    Bandwidths.of(cluster, settings.oss_load_weight))


def job_objects(prepared: Prepared, requests, rules: StripeRules | None = None) -> dict[str | None, list[int]]:
    """Per pool, the stripe-object sizes the job's files would have (every policy sizes stripes alike), each
    as many times as the file has copies: every mirror of an FLR file is written, so every copy costs time."""
    rules = rules or StripeRules()
    out: dict[str | None, list[int]] = {}
    usable: dict[str | None, int] = {}

    def usable_in(pool: str | None) -> int:
        if pool not in usable:
            usable[pool] = int(prepared.candidates(pool).sum())
        return usable[pool]

    parts, fixed, _ = expand_requests(requests, rules, usable_in)  # PFL components as the policies see them
    for request, stripe_size in zip(parts, fixed):
        pool = request.pool or None
        count = usable_in(pool) if request.stripe_count == ALL_OSTS else request.stripe_count
        if count < 1 or count > usable_in(pool):
            continue  # no policy can place it: it is refused everywhere
        size = stripe_size or rules.size(request.write_bytes, count)
        out.setdefault(pool, []).extend(part_objects(request, size, count) * request.mirror_count)
    return out


def job_bound(prepared: Prepared, job: Job, domains: bool = True) -> float:
    """The job's I/O time no placement within the fill cap can beat, on the room the run started with.

    Pools: each pool's files alone, and all files over the union of their OSTs (a relaxation);
    the largest of those bounds. With ``domains`` (the default, what ``makespan_bound_s`` sums), also what
    keeping every copy of a mirrored file in failure domains of its own forces
    (:func:`iez.sim.mirror_bounds.domain_bound`), as iez and the greedy do: the bound then holds for every
    placement that keeps the copies apart, not for one that shares a domain (Lustre's FLR may).
    """
    forced = domain_bound(prepared, job) if domains and any(r.mirror_count > 1 for r in job.requests) else 0.0
    return max(forced, _job_bound_blind(prepared, job))


def _job_bound_blind(prepared: Prepared, job: Job) -> float:
    room = np.array([o.room_bytes(prepared.cluster.fill_cap) for o in prepared.cluster.osts], dtype=np.int64)
    groups = job_objects(prepared, job.requests)
    if not groups:
        return 0.0
    union = np.zeros(len(room), dtype=bool)
    best = 0.0
    for pool, objects in groups.items():
        mask = prepared.candidates(pool)
        union |= mask
        if len(groups) > 1:
            best = max(best, makespan_bound(np.array(objects), mask, room, prepared.bandwidths))
    everything = np.array([b for objects in groups.values() for b in objects], dtype=np.int64)
    return max(best, makespan_bound(everything, union, room, prepared.bandwidths))


def _view(cluster: ClusterState, used: np.ndarray) -> ClusterState:
    """The cluster as the MDS sees it before a job: free space in whole KiB (rounded down)."""
    osts = tuple(
        replace(o, kbytes_avail=int(max(0, (o.bytes_total - int(u)) // 1024)))
        for o, u in zip(cluster.osts, used.tolist())
    )
    return ClusterState(osts, cluster.osses, cluster.fill_cap)


def run(scenario: Scenario, policy_name: str, seed: int = 0, settings: Settings | None = None,
        prepared: Prepared | None = None) -> Result:
    """One policy through the scenario's jobs (``prepared`` shares the cluster and bounds between policies)."""
    prepared = prepared or prepare(scenario, settings)
    settings = prepared.settings
    cluster = prepared.cluster
    policy = make_policy(policy_name, seed=seed, **settings.policy_options(policy_name))
    position = {ost.index: i for i, ost in enumerate(cluster.osts)}
    n = len(cluster.osts)
    total = prepared.total
    used = prepared.used0.copy()
    sent = np.zeros(n, dtype=np.int64)  # bytes the placements sent to each OST
    holding = np.zeros(n, dtype=bool)
    allowed_for: dict[str | None, np.ndarray] = {}
    takes = prepared.candidates(None)
    pieces: list[int] = []
    refused: list[dict] = []
    job_times: list[float] = []
    spreads: list[float] = []
    objects_of: dict[tuple[int, int, int], list[int]] = {}
    spent = 0.0
    files = placed = enospc = excluded = 0
    for job in prepared.jobs:
        view = _view(cluster, used)
        start = time.perf_counter()
        placement = policy.place(view, job.requests)
        spent += time.perf_counter() - start
        job_bytes = np.zeros(n, dtype=np.int64)
        for request, outcome in zip(placement.requests, placement.outcomes):
            files += 1
            if isinstance(outcome, Refused):
                refused.append({"file": request.file, "app": request.app, "reason": outcome.reason})
                continue
            placed += 1
            short = False
            for ost, size, pool in _pieces(request, outcome, objects_of):
                allowed = allowed_for.get(pool)
                if allowed is None:
                    allowed = allowed_for[pool] = prepared.candidates(pool)
                p = position[ost]
                job_bytes[p] += size
                holding[p] = True
                pieces.append(size)
                free = int(total[p] - used[p])
                if size > free:
                    short = True
                    size_written = max(free, 0)
                else:
                    size_written = size
                used[p] += size_written
                if not allowed[p]:
                    excluded += size
            enospc += short
        sent += job_bytes
        job_times.append(makespan(job_bytes, prepared.bandwidths))
        spreads.append(fill_spread(used, total, takes))
    return _result(prepared, policy_name, files, placed, enospc, excluded, refused, sent, used, holding, pieces,
                   job_times, spreads, spent)


def _pieces(request, outcome, objects_of: dict) -> list[tuple[int, int, str | None]]:
    """``(OST, bytes, pool)`` per stripe object of a placed file; a component's pool is its own (else the
    file's), and the bytes follow its extent; every copy of a mirrored file is written."""
    if outcome.mirrors or outcome.components:  # Layout.objects: every copy, each component by its extent
        return [(ost, size, component.pool or request.pool or None)
                for component, ost, size in outcome.objects(request.write_bytes)]
    key = (request.write_bytes, outcome.stripe_size, outcome.stripe_count)
    objects = objects_of.get(key)
    if objects is None:
        objects = objects_of[key] = raid0_bytes(*key)
    pool = outcome.pool or request.pool or None
    return [(ost, size, pool) for ost, size in zip(outcome.osts, objects)]


def _result(prepared: Prepared, policy_name: str, files: int, placed: int, enospc: int, excluded: int,
            refused: list[dict], sent: np.ndarray, used: np.ndarray, holding: np.ndarray, pieces: list[int],
            job_times: list[float], spreads: list[float], spent: float) -> Result:
    cluster = prepared.cluster
    scenario = prepared.scenario
    total = prepared.total
    used0 = prepared.used0
    avail = (total - used0).astype(float)
    oss_of = np.array([o.oss_id for o in cluster.osts])
    # OSTCost over the pool: the OSTs some request of the run may use; over the holders for SSF.
    pools = {r.pool or None for job in prepared.jobs for r in job.requests} or {None}
    pool_mask = np.zeros(len(total), dtype=bool)
    for pool in pools:
        pool_mask |= prepared.candidates(pool)
    evaluated = holding if scenario.evaluate_over == "holding" else pool_mask
    if not evaluated.any():
        evaluated = pool_mask if pool_mask.any() else np.ones(len(total), dtype=bool)
    metrics = balance(sent.astype(float), avail, used0.astype(float), total.astype(float), oss_of, evaluated,
                      stored=(used - used0).astype(float))
    piece_array = np.array(pieces, dtype=float)
    if scenario.evaluate_over == "holding":
        bound = window_bound(piece_array, avail)
    else:
        bound = ost_cost_bound(piece_array, avail[pool_mask])
    util = np.divide(sent, avail, out=np.zeros(len(avail)), where=avail > 0)
    bounds = prepared.job_bounds
    finite = all(np.isfinite(b) for b in bounds)
    takes = prepared.candidates(None)
    return Result(
        scenario=scenario.name,
        policy=policy_name,
        makespan_s=float(sum(job_times)),
        makespan_bound_s=float(sum(bounds)) if finite else None,
        ost_cost_bound=bound,
        files=files,
        allocate_seconds=spent,
        ost_util=tuple(float(u) for u in util),
        fill_cap=cluster.fill_cap,
        placed_files=placed,
        enospc_files=enospc,
        excluded_bytes=excluded,
        written_bytes=int((used - used0).sum()),
        refused=tuple(refused),
        fill_spread_before=fill_spread(used0, total, takes),
        fill_spread_after=fill_spread(used, total, takes),
        job_makespans_s=tuple(job_times),
        job_makespan_bounds_s=tuple(float(b) if np.isfinite(b) else None for b in bounds),
        fill_spread_by_job=tuple(spreads),
        ost_index=tuple(o.index for o in cluster.osts),
        ost_bytes=tuple(int(b) for b in sent),
        ost_fill_before=tuple(float(f) for f in used0 / total),
        ost_fill_after=tuple(float(f) for f in used / total),
        **metrics.__dict__,
    )


def error_row(scenario: str, policy: str, error: str) -> dict:
    """What ``--json`` prints for a run that failed: it still names the scenario and the policy."""
    return {"scenario": scenario, "policy": policy, "error": error}
