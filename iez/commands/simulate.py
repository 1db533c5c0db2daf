"""``iez simulate``: compare allocation policies on modelled clusters (named scenarios, described clusters, replays)."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from iez.allocate import POLICY_NAMES
from iez.model import DEFAULT_FILL_CAP, DEFAULT_OSS_BANDWIDTH, DEFAULT_OST_BANDWIDTH, MiB
from iez.sim.cluster import ClusterSpec, DescribedCluster, FillProfile, Overrides
from iez.sim.description import Defaults, load_cluster, to_json
from iez.sim.engine import Result, Settings, error_row, prepare, run
from iez.sim.scenarios import SCENARIOS, Scenario, resolve
from iez.sim.workloads import load_requests
from iez.units import parse_size


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="run scenarios on the cluster simulator and compare policies",
        description="Allocate each scenario's jobs with each policy on a modelled cluster and print the modelled "
        "I/O time beside the bound no placement can beat, OSTCost (max/mean OST utilisation; 1.0 is perfect), "
        "max fill, files that hit ENOSPC and files refused.",
    )
    p.add_argument("--list", action="store_true", help="print scenario names, one per line")
    p.add_argument("--scenario",
                   help="comma list of scenario names, a family (paper, skewed, hetfill, hetbw, few-files, bigstripe, "
                   "sequence, large) or all (default: paper)")
    p.add_argument("--policy", default="rr,qos,paper,iez", help=f"comma list of {', '.join(POLICY_NAMES)}")
    p.add_argument("--seed", type=int, default=0, help="seed for the randomised policies (qos, rr's reseed, random)")
    p.add_argument("--fill-seed", type=int,
                   help="seed for generated fill: --fill ranges, and overrides a named scenario's own fill seed")
    p.add_argument("--json", action="store_true", help="print a JSON list of results")
    p.add_argument("--plot", metavar="FILE.png", help="write per-OST bytes and fill before/after, per policy")
    p.add_argument("--cluster", metavar="FILE",
                   help="cluster description (JSON, or `lfs df` output optionally followed by `lfs pool_list` "
                   "output); runs --replay requests or the --scenario jobs on it")
    p.add_argument("--replay", metavar="FILE", help="replay requests from CSV or JSON instead of named scenarios")
    p.add_argument("--save-cluster", metavar="FILE.json",
                   help="write the (one) scenario's starting cluster as a JSON description (for --cluster)")
    p.add_argument("--save-requests", metavar="FILE.json",
                   help="write the (one) scenario's requests as JSON (for --replay; one app per job)")
    p.add_argument("--oss", type=int, default=3, help="OSS count for --replay without --cluster (default 3)")
    p.add_argument("--osts-per-oss", type=int,
                   help="OSTs per OSS for --replay without --cluster (default 5), and how `lfs df` OSTs are grouped "
                   "into servers (consecutive indices, default 5)")
    p.add_argument("--ost-size", default="10G", help="OST capacity for --replay without --cluster (default 10G)")
    p.add_argument("--fill", default="empty",
                   help="initial fill for --replay without --cluster: empty, 0.3 (every OST 30%% full) or 0.2-0.8 "
                   "(random, --fill-seed)")
    p.add_argument("--fill-cap", type=float,
                   help=f"no OST past this fill (default: the cluster's, else {DEFAULT_FILL_CAP})")
    p.add_argument("--fill-weight", type=float, default=0.0,
                   help="iez: how much slower than the fastest placement a job may be to even out fill "
                   "(fraction; default 0)")
    p.add_argument("--oss-load-weight", type=float, default=0.5,
                   help="share of an OSS's bandwidth its CPU load takes at 100%% (iez and the I/O-time model; "
                   "default 0.5; no effect where OSSs report no CPU load)")
    p.add_argument("--ost-bandwidth", type=float,
                   help=f"MiB/s per OST where the cluster does not say (default {DEFAULT_OST_BANDWIDTH // MiB}); "
                   "replaces a named scenario's base OST bandwidth")
    p.add_argument("--oss-bandwidth", type=float,
                   help=f"MiB/s per OSS where the cluster does not say (default {DEFAULT_OSS_BANDWIDTH // MiB}); "
                   "replaces a named scenario's base OSS bandwidth")
    p.add_argument("--threshold-rr", type=float, default=0.17,
                   help="qos: free-space difference above which Lustre weights by free space (default 0.17)")
    p.add_argument("--prio-free", type=float, default=0.90,
                   help="qos: weight of free space against spreading (default 0.90)")
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


def settings_from(args) -> Settings:
    if args.fill_cap is not None and not 0 < args.fill_cap <= 1:
        raise ValueError(f"--fill-cap {args.fill_cap} is outside (0, 1]")
    for label, value in (("--threshold-rr", args.threshold_rr), ("--prio-free", args.prio_free),
                         ("--oss-load-weight", args.oss_load_weight)):
        if not 0 <= value <= 1:
            raise ValueError(f"{label} {value} is outside [0, 1]")
    for label, value in (("--ost-bandwidth", args.ost_bandwidth), ("--oss-bandwidth", args.oss_bandwidth)):
        if value is not None and not value > 0:
            raise ValueError(f"{label} {value} must be a positive number of MiB/s")
    if args.fill_weight < 0:
        raise ValueError(f"--fill-weight {args.fill_weight} must not be negative")
    overrides = Overrides(
        fill_cap=args.fill_cap,
        ost_bandwidth=args.ost_bandwidth * MiB if args.ost_bandwidth else None,
        oss_bandwidth=args.oss_bandwidth * MiB if args.oss_bandwidth else None,
        fill_seed=args.fill_seed,
    )
    return Settings(overrides, args.fill_weight, args.oss_load_weight, args.threshold_rr, args.prio_free)


def described_cluster(args) -> DescribedCluster:
    defaults = Defaults(
        ost_bandwidth=args.ost_bandwidth * MiB if args.ost_bandwidth else DEFAULT_OST_BANDWIDTH,
        oss_bandwidth=args.oss_bandwidth * MiB if args.oss_bandwidth else DEFAULT_OSS_BANDWIDTH,
        osts_per_oss=args.osts_per_oss or Defaults.osts_per_oss,
    )
    return DescribedCluster(load_cluster(args.cluster, defaults), Path(args.cluster).name)


def chosen_scenarios(args) -> list[Scenario]:
    if args.cluster and not args.replay and not args.scenario:
        raise ValueError("--cluster needs --replay REQUESTS or --scenario NAMES (whose jobs then run on it)")
    cluster = described_cluster(args) if args.cluster else None
    if args.replay:
        jobs = load_requests(args.replay)
        replayed_on = cluster if cluster is not None else ClusterSpec(
            args.oss, args.osts_per_oss or 5, parse_size(args.ost_size), parse_fill(args.fill, args.fill_seed or 0))
        return [Scenario(f"replay:{args.replay}", f"requests replayed from {args.replay}", replayed_on, lambda: jobs)]
    scenarios = resolve(args.scenario or "paper")
    if cluster is not None:  # the named scenarios' jobs on the described cluster
        scenarios = [replace(s, name=f"{s.name}@{cluster.label}", cluster=cluster) for s in scenarios]
    return scenarios


def save_scenario(scenarios: list[Scenario], settings: Settings, cluster_path: str | None,
                  requests_path: str | None) -> None:
    """Write one scenario as files ``--cluster`` and ``--replay`` read back (a reproducer)."""
    if len(scenarios) != 1:
        raise ValueError(f"--save-cluster / --save-requests need exactly one scenario, not {len(scenarios)}")
    scenario = scenarios[0]
    if cluster_path:
        cluster, _ = scenario.cluster.build(settings.cluster)
        Path(cluster_path).write_text(json.dumps(to_json(cluster), indent=1) + "\n")
    if requests_path:
        rows = [{"app": job.app, "file": r.file, "write_bytes": r.write_bytes, "stripe_count": r.stripe_count,
                 "rank": r.rank, **({"pool": r.pool} if r.pool else {})}
                for job in scenario.jobs() for r in job.requests]
        Path(requests_path).write_text(json.dumps(rows, indent=0) + "\n")


def main(args) -> int:
    if args.list:
        print("\n".join(SCENARIOS))
        return 0
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICY_NAMES]
    if unknown or not policies:
        raise ValueError(f"unknown policy {', '.join(unknown) or '(none)'}; choose from {', '.join(POLICY_NAMES)}")
    settings = settings_from(args)
    scenarios = chosen_scenarios(args)
    if args.save_cluster or args.save_requests:
        save_scenario(scenarios, settings, args.save_cluster, args.save_requests)
    results: list[Result] = []
    failures: list[dict] = []
    from iez.progress import Progress

    with Progress("simulating", total=len(scenarios) * len(policies)) as progress:  # stderr, on a terminal only
        for scenario in scenarios:
            progress.step(f"{scenario.name}: preparing")
            prepared = prepare(scenario, settings)
            for policy in policies:
                progress.step(f"{scenario.name} / {policy}")
                try:
                    result = run(scenario, policy, seed=args.seed, prepared=prepared)
                    if any(r.mirror_count > 1 for job in prepared.jobs for r in job.requests):
                        from dataclasses import replace as _with
                        from iez.sim.failures import mirror_report

                        result = _with(result, mirror_report=mirror_report(
                            prepared.cluster, [job.requests for job in prepared.jobs], policy, args.seed,
                            settings.policy_options(policy)))
                    results.append(result)
                except ValueError as err:  # a policy failing outright: report it, keep going
                    failures.append(error_row(scenario.name, policy, str(err)))
                progress.advance()
    if args.json:
        json.dump([r.as_json() for r in results] + failures, sys.stdout, indent=1, allow_nan=False)
        print()
    else:
        print_table(results, {s.name: s for s in scenarios})
        for failure in failures:
            print(f"failed: {failure['scenario']} / {failure['policy']}: {failure['error']}")
    if args.plot:
        from iez.sim.plot import plot_placement

        plot_placement(results, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0 if results else 1


def _seconds(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.2f}s" if value < 100 else f"{value:.1f}s"


def print_table(results: list[Result], scenarios: dict[str, Scenario]) -> None:
    width = max([26] + [len(r.scenario) for r in results])
    header = (f"{'scenario':<{width}} {'policy':<7} {'I/O time*':>10} {'bound':>9} {'ratio':>6} {'OSTCost':>8} "
              f"{'bound':>6} {'max fill':>8} {'ENOSPC':>6} {'refused':>7}")
    print(header)
    print("-" * len(header))
    last = None
    for r in results:
        if r.scenario != last and last is not None:
            print()
        last = r.scenario
        ratio = f"{r.makespan_s / r.makespan_bound_s:.3f}" if r.makespan_bound_s else "-"
        print(f"{r.scenario:<{width}} {r.policy:<7} {_seconds(r.makespan_s):>10} {_seconds(r.makespan_bound_s):>9} "
              f"{ratio:>6} {r.ost_cost:>8.3f} {r.ost_cost_bound:>6.3f} {r.max_fill:>8.1%} {r.enospc_files:>6} "
              f"{len(r.refused):>7}")
    print("\n* I/O time is modelled from per-OST and per-OSS bandwidth (less live congestion), not measured; jobs of "
          "a scenario run one after another.")
    print("bound = the least I/O time any placement within the fill cap can reach (fluid, whole stripe objects); "
          "ratio = I/O time / bound.")
    print("OSTCost = max/mean OST utilisation (bytes written / space available at the start), beside its bound; "
          "1.0 is perfect.")
    print("ENOSPC = files with a stripe object its OST had no space for; refused = files the policy did not place.")
    for name in dict.fromkeys(r.scenario for r in results):
        scenario = scenarios.get(name)
        if scenario:
            print(f"  {name}: {scenario.description}; {scenario.cluster.describe()}")
    for r in results:
        for refusal in r.refused[:3]:
            print(f"  refused by {r.policy} in {r.scenario}: {refusal['file']}: {refusal['reason']}")
        if len(r.refused) > 3:
            print(f"  ... and {len(r.refused) - 3} more refused by {r.policy} in {r.scenario}")
