"""What mirrors buy and cost, per policy (issue 17, seed 003): failures, hot servers, write bandwidth.

For a scenario whose files ask for mirrors, :func:`mirror_report` places its
jobs with one policy (each job on the starting cluster) and reports:

- **readability**: with each OSS failed in turn, and each pair of OSSs (and,
  when the cluster groups OSSs in failure domains, each domain and each pair),
  how many files still have a complete copy (every OST of one mirror alive):
  the worst case and the mean over the failures tried;
- **domain sharing**: mirrored files with two mirrors in one failure domain;
- **reads with one hot server**: the OSS holding the most primary bytes gets
  background load of ``hot_share`` of its bandwidth (spread over its OSTs);
  the modelled time to read every file once (:func:`iez.model.io_time`) from
  its primary copy, with CEFT's hot-spot skipping (each file from the copy
  whose busiest OST or OSS is least loaded), and with skipping plus CEFT's
  doubled parallelism (each file's bytes split evenly over the copies that
  avoid hot servers);
- **the write cost**: the modelled time to write every copy against the same
  files placed by the same policy with one copy each.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations
from typing import Sequence

from iez.allocate import make_policy
from iez.allocate.base import Refused
from iez.allocate.mirrors import busiest, copy_osts, domain_of, mirror_domains_shared
from iez.model import Allocation, ClusterState, Layout, WriteRequest, io_time

#: Background load a hot server carries, as a share of its bandwidth.
HOT_SHARE = 0.9
#: Above this many pairs of servers, pairs are sampled evenly.
MAX_PAIRS = 400


def copy_bytes(copy, file_bytes: int) -> dict[int, float]:
    """Bytes per OST of one copy (:meth:`Layout.stripe_bytes` of the copy as a layout)."""
    return {o: float(b) for o, b in _summed(Layout.from_components(copy).stripe_bytes(file_bytes)).items()}


def _add(into: dict[int, float], more: dict[int, float], share: float = 1.0) -> None:
    for ost, b in more.items():
        into[ost] = into.get(ost, 0.0) + b * share


def place_jobs(cluster: ClusterState, jobs: Sequence[Sequence[WriteRequest]], policy_name: str, seed: int,
               one_copy: bool = False, options: dict | None = None) -> list[tuple[WriteRequest, Allocation]]:
    policy = make_policy(policy_name, seed=seed, **(options or {}))
    placed: list[tuple[WriteRequest, Allocation]] = []
    for requests in jobs:
        if one_copy:
            requests = [replace(r, mirror_count=1) for r in requests]
        placement = policy.place(cluster, requests)
        placed.extend((r, o) for r, o in zip(placement.requests, placement.outcomes) if not isinstance(o, Refused))
    return placed


def readable(placed, failed_osts: set[int]) -> int:
    """Files with at least one copy none of whose OSTs failed."""
    return sum(1 for _, a in placed if any(not (copy_osts(c) & failed_osts) for c in a.copies()))


def _failures(groups: dict[str, set[int]], placed, k: int) -> dict:
    names = sorted(groups)
    cases = list(combinations(names, k))
    if len(cases) > MAX_PAIRS:
        step = len(cases) / MAX_PAIRS
        cases = [cases[int(i * step)] for i in range(MAX_PAIRS)]
    if not cases:
        return {}
    counts = [(readable(placed, set().union(*(groups[n] for n in case))), case) for case in cases]
    worst, worst_case = min(counts)
    return {"worst_readable": worst, "mean_readable": sum(c for c, _ in counts) / len(counts),
            "worst_failed": list(worst_case), "cases": len(cases)}


def hot_cluster(cluster: ClusterState, oss_id: str, share: float = HOT_SHARE) -> ClusterState:
    """``cluster`` with background load ``share`` of ``oss_id``'s bandwidth spread over its OSTs."""
    osts = [o for o in cluster.osts if o.oss_id == oss_id]
    server = cluster.osses[oss_id]
    each = share * server.bandwidth / max(1, len(osts))
    loaded = [replace(o, load=max(o.load, min(each, share * o.bandwidth))) if o.oss_id == oss_id else o
              for o in cluster.osts]
    return ClusterState(tuple(loaded), dict(cluster.osses), cluster.fill_cap)


def read_times(cluster: ClusterState, placed) -> dict:
    primary_bytes: dict[str, float] = {}
    by_index = {o.index: o for o in cluster.osts}
    for r, a in placed:
        for ost, b in copy_bytes(a.copies()[0], r.write_bytes).items():
            oss = by_index[ost].oss_id
            primary_bytes[oss] = primary_bytes.get(oss, 0.0) + b
    if not primary_bytes:
        return {}
    hot_oss = max(sorted(primary_bytes), key=lambda s: primary_bytes[s])
    hot = hot_cluster(cluster, hot_oss)
    plain: dict[int, float] = {}
    skipping: dict[int, float] = {}
    split: dict[int, float] = {}
    for r, a in placed:
        copies = a.copies()
        per_copy = [copy_bytes(c, r.write_bytes) for c in copies]
        _add(plain, per_copy[0])
        loads = [busiest(hot, copy_osts(c)) for c in copies]
        best = min(range(len(copies)), key=lambda k: (loads[k], k))
        _add(skipping, per_copy[best])
        cool = [k for k in range(len(copies)) if loads[k] <= loads[best] + 1e-12]
        for k in cool:
            _add(split, per_copy[k], 1.0 / len(cool))
    t_plain, t_skip, t_split = io_time(hot, plain), io_time(hot, skipping), io_time(hot, split)
    return {"hot_oss": hot_oss, "hot_share": HOT_SHARE, "read_primary_s": t_plain, "read_skipping_s": t_skip,
            "read_skipping_split_s": t_split,
            "skipping_speedup": t_plain / t_skip if t_skip > 0 else None}


def mirror_report(cluster: ClusterState, jobs: Sequence[Sequence[WriteRequest]], policy_name: str, seed: int = 0,
                  options: dict | None = None) -> dict:
    """The figures of the module docstring for one policy."""
    placed = place_jobs(cluster, jobs, policy_name, seed, options=options)
    single = place_jobs(cluster, jobs, policy_name, seed, one_copy=True, options=options)
    by_oss: dict[str, set[int]] = {}
    by_domain: dict[str, set[int]] = {}
    dom = domain_of(cluster)
    for o in cluster.osts:
        by_oss.setdefault(o.oss_id, set()).add(o.index)
        by_domain.setdefault(dom[o.index], set()).add(o.index)
    mirrored = [(r, a) for r, a in placed if a.mirrors]
    write = {}
    for name, pairs in (("all_copies", placed), ("one_copy", single)):
        total: dict[int, float] = {}
        for r, a in pairs:
            _add(total, {o: float(b) for o, b in _summed(a.stripe_bytes(r.write_bytes)).items()})
        write[name] = io_time(cluster, total)
    out = {
        "files": len(placed),
        "mirrored_files": len(mirrored),
        "refused_files": sum(len(j) for j in jobs) - len(placed),
        "shared_domain_files": sum(1 for _, a in mirrored if mirror_domains_shared(cluster, a)),
        "one_oss_failed": _failures(by_oss, placed, 1),
        "two_oss_failed": _failures(by_oss, placed, 2),
        "write_all_copies_s": write["all_copies"],
        "write_one_copy_s": write["one_copy"],
        "write_cost": write["all_copies"] / write["one_copy"] if write["one_copy"] > 0 else None,
        **read_times(cluster, placed),
    }
    if len(by_domain) != len(by_oss):
        out["one_domain_failed"] = _failures(by_domain, placed, 1)
        out["two_domains_failed"] = _failures(by_domain, placed, 2)
    return out


def _summed(pairs) -> dict[int, int]:
    out: dict[int, int] = {}
    for ost, b in pairs:
        out[ost] = out.get(ost, 0) + b
    return out
