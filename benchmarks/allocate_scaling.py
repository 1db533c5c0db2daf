"""How allocation time, peak memory and OSTCost grow with the problem: paper (networkx), iez and qos side by side.

Each point runs ``iez bench allocate`` in its own process (so peak memory is
that run's own) with a time-out; once a policy times out at some size, larger
sizes of that policy and stripe count are skipped.

    python benchmarks/allocate_scaling.py [--quick] [--timeout 60] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

POOLS = [(15, 3), (100, 20), (1000, 250), (10000, 1250)]  # (OSTs, OSS): 4-8 OSTs per OSS beyond the testbed
REQUESTS = [64, 1000, 10000, 100000, 200000]
STRIPE_COUNTS = [1, 4, 8, -1]
POLICIES = ["paper", "iez", "qos"]
MAX_WIDE_STRIPES = 20_000_000  # stripe count -1: cap requests x OSTs


def measure(osts: int, oss: int, requests: int, count: int, policy: str, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "iez.cli", "bench", "allocate", "--osts", str(osts), "--oss", str(oss),
           "--requests", str(requests), "--stripe-count", str(count), "--policy", policy, "--json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"policy": policy, "osts": osts, "requests": requests, "stripe_count": count, "timeout": timeout}
    if proc.returncode != 0:
        error = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        return {"policy": policy, "osts": osts, "requests": requests, "stripe_count": count, "error": error}
    return json.loads(proc.stdout)


def grid(quick: bool):
    pools = POOLS[:2] if quick else POOLS
    requests = [r for r in REQUESTS if r <= 1000] if quick else REQUESTS
    for count in STRIPE_COUNTS:
        for osts, oss in pools:
            if count > osts:
                continue
            for n in requests:
                if count == -1 and n * osts > MAX_WIDE_STRIPES:
                    continue
                yield osts, oss, n, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (under a minute)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per run (default 60)")
    parser.add_argument("--json", metavar="FILE", help="also write every row as JSON")
    args = parser.parse_args()

    rows: list[dict] = []
    given_up: set[tuple[str, int]] = set()
    print(f"{'stripes':>7} {'OSTs':>6} {'requests':>8} {'policy':>6} {'seconds':>9} {'peak MiB':>9} {'OSTCost':>8}")
    for osts, oss, n, count in grid(args.quick):
        for policy in POLICIES:
            if (policy, count) in given_up:
                continue
            row = measure(osts, oss, n, count, policy, args.timeout)
            rows.append(row)
            if "timeout" in row or "error" in row:
                given_up.add((policy, count))  # larger sizes only take longer
                note = f"timeout >{args.timeout:g}s" if "timeout" in row else f"refused: {row['error'][:70]}"
                print(f"{count:>7} {osts:>6} {n:>8} {policy:>6} {note}")
            else:
                print(f"{count:>7} {osts:>6} {n:>8} {policy:>6} {row['seconds']:>9.3f} {row['peak_rss_mib']:>9.0f} "
                      f"{row['ost_cost']:>8.4f}", flush=True)

    finished = [r for r in rows if r["policy"] == "paper" and "seconds" in r]
    if finished:
        largest = max(finished, key=lambda r: (r["requests"] * r["osts"], r["seconds"]))
        twin = next((r for r in rows if r["policy"] == "iez" and "seconds" in r and all(
            r[k] == largest[k] for k in ("osts", "requests", "stripe_count"))), None)
        print(f"\nlargest paper (networkx) run within {args.timeout:g}s: {largest['osts']} OSTs x "
              f"{largest['requests']} requests, stripe count {largest['stripe_count']}: {largest['seconds']:.2f}s")
        if twin:
            print(f"iez on the same instance: {twin['seconds']:.4f}s, {largest['seconds'] / twin['seconds']:.0f}x faster")
    target = next((r for r in rows if r["policy"] == "iez" and r["osts"] == 1000 and r["requests"] == 100000
                   and r["stripe_count"] == 4 and "seconds" in r), None)
    if target:
        print(f"target (1,000 OSTs x 100,000 requests, stripe count 4, iez): {target['seconds']:.2f}s, "
              f"OSTCost {target['ost_cost']:.4f}, peak {target['peak_rss_mib']:.0f} MiB")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
