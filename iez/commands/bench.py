"""``iez bench allocate``: time one allocation of a synthetic batch on a synthetic cluster."""

from __future__ import annotations

import json
import resource
import time

import numpy as np

from iez.allocate import POLICY_NAMES, make_policy
from iez.model import OSS, OST, ClusterState, WriteRequest, io_time
from iez.sim.metrics import balance
from iez.units import parse_size


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="measure the allocators")
    sub = p.add_subparsers(dest="bench", metavar="WHAT", required=True)
    a = sub.add_parser("allocate", help="time one batch allocation",
                       description="Allocate R equal requests on N OSTs spread over M OSS (OSTs 10-60% full, "
                       "seeded) and print the time, peak memory and OSTCost.")
    a.add_argument("--osts", type=int, required=True, help="OSTs in the synthetic cluster")
    a.add_argument("--oss", type=int, required=True, help="OSSs the OSTs are spread over")
    a.add_argument("--requests", type=int, required=True, help="write requests (files) allocated in one batch")
    a.add_argument("--stripe-count", type=int, required=True, help="stripes per file; -1 means all OSTs")
    a.add_argument("--policy", required=True, choices=POLICY_NAMES, help="the allocator timed")
    a.add_argument("--file-size", default="4G", help="bytes per file (default 4G)")
    a.add_argument("--ost-size", default="100T", help="OST capacity (default 100T)")
    a.add_argument("--seed", type=int, default=0, help="seed of the OSTs' fill (default 0)")
    a.add_argument("--json", action="store_true", help="print one JSON object")
    a.set_defaults(handler=main)


def synthetic_cluster(osts: int, oss: int, ost_bytes: int, seed: int) -> ClusterState:
    if osts < 1 or oss < 1 or oss > osts:
        raise ValueError(f"need 1 <= --oss ({oss}) <= --osts ({osts})")
    kbytes = ost_bytes // 1024
    fill = np.random.default_rng(seed).uniform(0.10, 0.60, osts)
    return ClusterState.build(
        [OST(i, f"oss{i % oss}", kbytes, int(kbytes * (1 - f))) for i, f in enumerate(fill)],
        [OSS(f"oss{k}") for k in range(oss)],
    )


def main(args) -> int:
    if args.requests < 1:
        raise ValueError("--requests must be at least 1")
    cluster = synthetic_cluster(args.osts, args.oss, parse_size(args.ost_size), args.seed)
    file_size = parse_size(args.file_size)
    requests = [WriteRequest("bench", f"/lustre/bench/file.{i:08d}", file_size, args.stripe_count, i)
                for i in range(args.requests)]
    policy = make_policy(args.policy, seed=args.seed)
    start = time.perf_counter()
    allocations = policy.allocate(cluster, requests)
    seconds = time.perf_counter() - start
    position = {o.index: i for i, o in enumerate(cluster.osts)}
    app_bytes = np.zeros(len(cluster.osts))
    for a in allocations:
        for ost, stored in a.stripe_bytes(file_size):
            app_bytes[position[ost]] += stored
    avail = np.array([o.bytes_avail for o in cluster.osts], dtype=float)
    total = np.array([o.bytes_total for o in cluster.osts], dtype=float)
    oss_of = np.array([o.oss_id for o in cluster.osts])
    metrics = balance(app_bytes, avail, total - avail, total, oss_of, np.ones(len(avail), dtype=bool))
    out = {
        "policy": args.policy,
        "osts": args.osts,
        "oss": args.oss,
        "requests": args.requests,
        "stripe_count": args.stripe_count,
        "seconds": round(seconds, 4),
        "ost_cost": round(metrics.ost_cost, 4),
        "makespan_s": round(io_time(cluster, dict(zip((o.index for o in cluster.osts), app_bytes.tolist()))), 3),
        "oss_cost": round(metrics.oss_cost, 4),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    if args.json:
        print(json.dumps(out))
    else:
        print("  ".join(f"{k}={v}" for k, v in out.items()))
    return 0
