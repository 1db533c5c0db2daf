"""How `iez rebalance plan` grows with the file system, and how far its heuristic is from the optimum.

    python benchmarks/rebalance_plan.py [--quick] [--json]

Scaling: synthetic pools (no files on disk: the planner's own input) of N OSTs (at least 1 TiB) filled 20-90 %
by files of 1 MiB-64 GiB (about 1 GiB on average), 80 % single-stripe and 20 % over 2-8 OSTs, plus 5 % of each OST that cannot
move; for each size the plan's wall time with the greedy alone (``--improve-s 0``) and with the
default 2 s of improvement, its bytes moved over the continuous lower bound (no plan moves fewer),
and whether the spread reached the 0.10 target.

Optimality: random small pools (6 OSTs of 64 MiB, 60 files of 64 KiB-1.5 MiB; and 5 OSTs, 24 files
of which a third have 2 stripes) planned by the heuristic alone and solved exactly by the MILP
(scipy's HiGHS, 60 s limit): the heuristic's bytes over the optimum (or the solver's bound when it
stopped at its limit).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from iez.model import raid0_bytes  # noqa: E402
from iez.progress import note  # noqa: E402
from iez.rebalance.milp import solve  # noqa: E402
from iez.rebalance.plan import File, Ost, plan_domain  # noqa: E402

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40


def synthetic(osts: int, files: int, seed: int = 0) -> tuple[list[Ost], list[File]]:
    rng = random.Random(seed)
    cap = max(TiB, files // osts * 2 * GiB)  # files of about 1 GiB fill the OSTs 20-90 %
    base = int(0.05 * cap)  # what cannot move
    want = [rng.uniform(0.2, 0.9) * cap - base for _ in range(osts)]
    cum, total = [], 0.0
    for w in want:
        total += w
        cum.append(total)
    mean = total / files
    load = [base] * osts
    out = []
    for n in range(files):
        count = 1 if rng.random() < 0.8 else rng.randint(2, min(8, osts))
        size = int(min(64 * GiB, max(MiB, rng.expovariate(1 / (mean / 1.5)))))
        first = rng.choices(range(osts), cum_weights=cum)[0]
        chosen = [first] + [j for j in rng.sample(range(osts), count + 1) if j != first][: count - 1]
        objects = raid0_bytes(size, MiB, count)
        out.append(File(f"/lustre/f{n}", size, MiB, tuple(chosen), tuple(objects)))
        for j, b in zip(chosen, objects):
            load[j] += b
    return [Ost(j, max(cap, load[j]), load[j]) for j in range(osts)], out


def small(seed: int, osts: int = 6, files: int = 60, multi: bool = False) -> tuple[list[Ost], list[File]]:
    rng = random.Random(seed)
    cap = 64 * MiB
    load = {j: int(cap * rng.uniform(0.0, 0.2)) for j in range(osts)}
    out = []
    weights = [(osts - j) ** 2 for j in range(osts)]
    for n in range(files):
        count = rng.choice([1, 1, 2]) if multi else 1
        chosen: list[int] = []
        while len(chosen) < count:
            j = rng.choices(range(osts), weights)[0]
            if j not in chosen:
                chosen.append(j)
        size = rng.randint(64 * KiB, 3 * MiB // 2)
        objects = raid0_bytes(size, 64 * KiB, count)
        out.append(File(f"/f{n}", size, 64 * KiB, tuple(chosen), tuple(objects)))
        for j, b in zip(chosen, objects):
            load[j] += b
    return [Ost(j, cap, load[j]) for j in range(osts)], out


def scaling(sizes) -> list[dict]:
    rows = []
    for osts, files in sizes:
        inst = synthetic(osts, files)
        for improve in (0.0, 2.0):
            note(f"plan {osts} OSTs, {files} files, improve {improve} s", always=True)
            started = time.monotonic()
            plan = plan_domain(*inst, target=0.10, improve_s=improve, exact=False)
            rows.append({"osts": osts, "files": files, "improve_s": improve,
                         "seconds": round(time.monotonic() - started, 3),
                         "spread_before": round(plan.spread_before, 3), "spread_after": round(plan.spread_after, 4),
                         "reached": plan.reached, "files_moved": len(plan.moves),
                         "bytes_over_bound": round(plan.bytes_moved / max(1, plan.lower_bound), 4)})
    return rows


def optimality(seeds: int) -> list[dict]:
    rows = []
    for multi, osts, files in ((False, 6, 60), (True, 5, 24)):
        for seed in range(seeds):
            note(f"small instance {seed} ({'multi' if multi else 'single'}-stripe): heuristic and MILP", always=True)
            inst = small(seed, osts, files, multi)
            greedy = plan_domain(*inst, target=0.10, improve_s=1.0, exact=False)
            started = time.monotonic()
            exact = solve(*inst, target=0.10, time_limit=60)
            rows.append({"stripes": "1-2" if multi else "1", "seed": seed, "greedy_bytes": greedy.bytes_moved,
                         "milp_bytes": exact.bytes_moved, "milp_optimal": exact.optimal,
                         "milp_seconds": round(time.monotonic() - started, 2),
                         "greedy_over_optimum": round(greedy.bytes_moved / max(1, exact.bound), 4)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (a smoke run)")
    parser.add_argument("--seeds", type=int, default=5, help="small instances per kind (default 5)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [(16, 1000), (64, 10_000)] if args.quick else [(16, 1000), (64, 10_000), (256, 50_000),
                                                           (1000, 100_000), (2000, 300_000)]
    result = {"scaling": scaling(sizes), "optimality": optimality(1 if args.quick else args.seeds)}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for r in result["scaling"]:
            print(f"{r['osts']:5d} OSTs {r['files']:7d} files improve {r['improve_s']:3.1f} s: "
                  f"{r['seconds']:8.2f} s, spread {r['spread_before']} -> {r['spread_after']}, "
                  f"{r['files_moved']} files, bytes {r['bytes_over_bound']:.3f} x bound")
        for r in result["optimality"]:
            print(f"small {r['stripes']}-stripe seed {r['seed']}: heuristic {r['greedy_over_optimum']:.3f} x optimum "
                  f"(MILP {'optimal' if r['milp_optimal'] else 'bound'} in {r['milp_seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
