"""Issue 29: iez allocation cost when every file has its own size (grouping into classes cannot help).

100,000 files with 100,000 distinct sizes (1 MiB - 64 GiB, log-uniform, stripe counts 1/4/8) on 1,000 OSTs,
against the grouped case (the same count of files in 8 sizes). iez rounds object sizes up to 1/64 of their power
of two above MAX_CLASSES distinct sizes (at most 1.6 % more bytes assumed per object). Prints CPU seconds, peak
RSS (each case in its own process), the modelled I/O time (exact bytes) over ``makespan_bound`` and the varied
case's CPU and RSS as ratios to the grouped case's in the same run (the machine is shared: compare ratios).

    python benchmarks/varied_sizes.py [--files 100000] [--osts 1000]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MiB, GiB = 1 << 20, 1 << 30


def case(kind: str, files: int, osts: int) -> dict:
    from iez.allocate import make_policy
    from iez.model import OSS, OST, ClusterState, WriteRequest

    rng = random.Random(1)
    per = 10
    cluster = ClusterState.build(
        [OST(i, f"oss{i // per}", 64 << 30, int((64 << 30) * rng.uniform(0.3, 0.9)), rng.choice((400, 800)) * MiB,
             rng.choice((0.0, 0.0, 100.0)) * MiB) for i in range(osts)],
        [OSS(f"oss{k}", bandwidth=6000 * MiB) for k in range(osts // per)], 0.95)
    if kind == "varied":
        sizes = sorted({int(MiB * 2 ** rng.uniform(0, 16)) for _ in range(files * 2)})[:files]
        rng.shuffle(sizes)
    else:
        sizes = [rng.choice([MiB << k for k in range(0, 16, 2)]) for _ in range(files)]
    requests = [WriteRequest("bench", f"/b/{i}", s, rng.choice((1, 4, 8)), i) for i, s in enumerate(sizes)]
    policy = make_policy("iez")
    cpu = time.process_time()
    placement = policy.place(cluster, requests)
    cpu = time.process_time() - cpu
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the bound's own arrays
    return {"case": kind, "files": files, "distinct_sizes": len(set(sizes)), "osts": osts, "cpu_s": round(cpu, 3),
            "refused": len(placement.refused), "peak_rss_mib": round(rss, 1),
            "time_over_bound": round(time_over_bound(cluster, placement), 4)}


def time_over_bound(cluster, placement) -> float:
    """The placement's modelled I/O time (exact RAID-0 bytes of every object) over ``makespan_bound`` of the
    same objects (OST and OSS usable bandwidths, the fill cap): the quality the rounding of sizes costs."""
    import numpy as np

    from iez.allocate.base import Refused
    from iez.model import raid0_bytes
    from iez.sim.metrics import Bandwidths, makespan, makespan_bound

    pos = {o.index: k for k, o in enumerate(cluster.osts)}
    bytes_on = np.zeros(len(cluster.osts))
    objects = []
    for a, r in zip(placement.outcomes, placement.requests):
        if isinstance(a, Refused):
            continue
        for ost, b in zip(a.osts, raid0_bytes(r.write_bytes, a.stripe_size, len(a.osts))):
            bytes_on[pos[ost]] += b
            objects.append(b)
    bandwidths = Bandwidths.of(cluster, 0.5)
    room = np.array([o.room_bytes(cluster.fill_cap) for o in cluster.osts], dtype=float)
    bound = makespan_bound(np.array(objects), np.ones(len(room), dtype=bool), room, bandwidths)
    return makespan(bytes_on, bandwidths) / bound


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--files", type=int, default=100_000)
    a.add_argument("--osts", type=int, default=1000)
    a.add_argument("--case", choices=("varied", "grouped"))
    args = a.parse_args()
    if args.case:
        print(json.dumps(case(args.case, args.files, args.osts)))
        return 0
    got = {}
    for kind in ("grouped", "varied"):
        out = subprocess.run([sys.executable, __file__, "--case", kind, "--files", str(args.files), "--osts",
                              str(args.osts)], capture_output=True, text=True, check=True).stdout
        r = got[kind] = json.loads(out)
        print(f"{r['case']:<8} {r['files']} files, {r['distinct_sizes']} sizes, {r['osts']} OSTs: cpu {r['cpu_s']} s, "
              f"peak RSS {r['peak_rss_mib']} MiB, refused {r['refused']}, I/O time / bound {r['time_over_bound']}")
    g, v = got["grouped"], got["varied"]
    print(f"varied / grouped: cpu {v['cpu_s'] / max(g['cpu_s'], 1e-3):.1f}x, "
          f"peak RSS {v['peak_rss_mib'] / g['peak_rss_mib']:.2f}x (same run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
