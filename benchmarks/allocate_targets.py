"""The allocator's speed targets (issue 12): iez on 100,000 requests x 1,000 OSTs and 1,000,000 x 10,000.

    python benchmarks/allocate_targets.py [--timeout 120] [--json FILE]

Each row is one ``iez bench allocate ... --json`` process (so ``peak_rss_mib`` is that run's own peak
memory); ``seconds`` is the ``allocate()`` call alone. Lustre's round-robin runs the same instances in
the same session as the baseline (QoS draws every stripe with a pass over all OSTs and is given the
smaller instance only). Targets: 0.5 s and 5 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

INSTANCES = [  # (OSTs, OSS, requests, stripe count, target seconds)
    (1_000, 250, 100_000, 4, 0.5),
    (10_000, 2_500, 1_000_000, 4, 5.0),
]
POLICIES = {0: ("iez", "rr", "qos"), 1: ("iez", "rr")}


def measure(osts: int, oss: int, requests: int, stripe_count: int, policy: str, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "iez.cli", "bench", "allocate", "--osts", str(osts), "--oss", str(oss),
           "--requests", str(requests), "--stripe-count", str(stripe_count), "--policy", policy, "--json"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"policy": policy, "osts": osts, "requests": requests, "status": "timeout"}
    if done.returncode != 0:
        return {"policy": policy, "osts": osts, "requests": requests, "status": "error",
                "error": done.stderr.strip()[-300:]}
    return {**json.loads(done.stdout), "status": "ok"}


def main() -> int:
    from iez.progress import note  # a line per step on stderr

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    rows = []
    print(f"{'OSTs':>7} {'requests':>10} {'policy':<6} {'seconds':>8} {'target':>7} {'peak MiB':>9} {'I/O time':>9}")
    for k, (osts, oss, requests, count, target) in enumerate(INSTANCES):
        for policy in POLICIES[k]:
            note(f"allocate: {osts:,} OSTs, {requests:,} requests, {policy}", always=True)
            row = measure(osts, oss, requests, count, policy, args.timeout)
            row["target_s"] = target if policy == "iez" else None
            rows.append(row)
            if row["status"] != "ok":
                print(f"{osts:>7,} {requests:>10,} {policy:<6} {row['status']:>8}")
                continue
            mark = f"{target:>6}s" if policy == "iez" else f"{'':>7}"
            print(f"{osts:>7,} {requests:>10,} {policy:<6} {row['seconds']:>8.3f} {mark} {row['peak_rss_mib']:>9.1f} "
                  f"{row['makespan_s']:>8.1f}s")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    met = all(r["status"] == "ok" and r["seconds"] <= r["target_s"] for r in rows if r["policy"] == "iez")
    print("targets met" if met else "a target was missed")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
