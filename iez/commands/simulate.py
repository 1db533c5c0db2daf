"""``iez simulate``: compare allocation policies on modelled clusters (paper scenarios and more)."""

from __future__ import annotations

import json
import sys

from iez.allocate import POLICY_NAMES
from iez.sim.cluster import ClusterSpec, FillProfile
from iez.sim.engine import Result, run
from iez.sim.scenarios import SCENARIOS, Scenario, resolve
from iez.sim.workloads import load_requests
from iez.units import parse_size


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="run scenarios on the cluster simulator and compare policies",
        description="Allocate each scenario's jobs with each policy on a modelled cluster and print OSTCost "
        "(max/mean OST utilisation; 1.0 is perfect) beside the best any placement can reach.",
    )
    p.add_argument("--list", action="store_true", help="print scenario names, one per line")
    p.add_argument("--scenario", default="paper",
                   help="comma list of scenario names, a family (paper, skewed, sequence, large) or all")
    p.add_argument("--policy", default="rr,qos,paper,iez", help=f"comma list of {', '.join(POLICY_NAMES)}")
    p.add_argument("--seed", type=int, default=0, help="seed for the randomised policies")
    p.add_argument("--json", action="store_true", help="print a JSON list of results")
    p.add_argument("--plot", metavar="FILE.png", help="write OST utilisation per policy (like the paper's Fig. 7)")
    p.add_argument("--replay", metavar="FILE", help="replay requests from CSV or JSON instead of named scenarios")
    p.add_argument("--oss", type=int, default=3, help="OSS count for --replay (default 3)")
    p.add_argument("--osts-per-oss", type=int, default=5, help="OSTs per OSS for --replay (default 5)")
    p.add_argument("--ost-size", default="10G", help="OST capacity for --replay (default 10G)")
    p.add_argument("--fill", default="empty",
                   help="initial fill for --replay: empty, 0.3 (every OST 30%% full) or 0.2-0.8 (random, seeded)")
    p.set_defaults(handler=main)


def parse_fill(text: str, seed: int) -> FillProfile:
    """``empty``, ``0.3`` or ``0.2-0.8`` into a fill profile."""
    try:
        if text == "empty":
            return FillProfile()
        if "-" in text:
            low, high = (float(x) for x in text.split("-", 1))
            profile = FillProfile("random", low, high, seed)
        else:
            profile = FillProfile("uniform", float(text), float(text))
    except ValueError:
        raise ValueError(f"--fill {text!r}: use empty, a fraction like 0.3, or a range like 0.2-0.8") from None
    if not 0 <= profile.low <= profile.high < 1:
        raise ValueError(f"--fill {text!r}: fractions must satisfy 0 <= low <= high < 1")
    return profile


def replay_scenario(args) -> Scenario:
    jobs = load_requests(args.replay)
    cluster = ClusterSpec(args.oss, args.osts_per_oss, parse_size(args.ost_size), parse_fill(args.fill, args.seed))
    return Scenario(f"replay:{args.replay}", f"requests replayed from {args.replay}", cluster, lambda: jobs)


def main(args) -> int:
    if args.list:
        print("\n".join(SCENARIOS))
        return 0
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown or not policies:
        raise ValueError(f"unknown policy {', '.join(unknown) or '(none)'}; choose from {', '.join(POLICY_NAMES)}")
    scenarios = [replay_scenario(args)] if args.replay else resolve(args.scenario)
    results: list[Result] = []
    failures: list[str] = []
    for scenario in scenarios:
        for policy in policies:
            try:
                results.append(run(scenario, policy, seed=args.seed))
            except ValueError as err:  # an allocator refusing: report it, keep going
                failures.append(f"{scenario.name} / {policy}: {err}")
    if args.json:
        json.dump([r.as_json() for r in results] + [{"error": f} for f in failures], sys.stdout, indent=1)
        print()
    else:
        print_table(results, {s.name: s for s in scenarios})
        for failure in failures:
            print(f"refused: {failure}")
    if args.plot:
        from iez.sim.plot import plot_utilisation

        plot_utilisation(results, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0 if results else 1


def print_table(results: list[Result], scenarios: dict[str, Scenario]) -> None:
    header = f"{'scenario':<24} {'policy':<7} {'OSTCost':>8} {'bound':>7} {'OSSCost':>8} {'max util':>9} " \
             f"{'mean util':>9} {'max fill':>9} {'I/O time*':>10}"
    print(header)
    print("-" * len(header))
    last = None
    for r in results:
        if r.scenario != last and last is not None:
            print()
        last = r.scenario
        print(f"{r.scenario:<24} {r.policy:<7} {r.ost_cost:>8.3f} {r.ost_cost_bound:>7.3f} {r.oss_cost:>8.3f} "
              f"{r.max_ost_util:>8.1%} {r.mean_ost_util:>9.1%} {r.max_fill:>8.1%} {r.makespan_s:>9.1f}s")
    print("\nOSTCost = max/mean OST utilisation (bytes written / space available at the start); 1.0 is perfect.")
    print("bound = the lowest OSTCost any placement can reach here (whole stripes, stated fill).")
    print("* I/O time is modelled from per-OST and per-OSS bandwidth, not measured.")
    for name in dict.fromkeys(r.scenario for r in results):
        scenario = scenarios.get(name)
        if scenario:
            print(f"  {name}: {scenario.description}; {scenario.cluster.describe()}")
