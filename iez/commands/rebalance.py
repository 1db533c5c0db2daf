"""``iez rebalance plan`` and ``iez rebalance apply``: bring each pool's fill spread under a target by moving
the fewest bytes, then move them, resumably.

    iez rebalance plan (--cluster ROOT | --db DB --root DIR) [--target 0.10] [--pool P] [--json]
    iez rebalance apply PLAN.json [--journal FILE] [--share F] [--json]

``plan`` reads sizes, fills, states and pools (the emulated cluster or the
DB's live view) and the files' layouts, and prints the moves (:mod:`iez.rebalance`).
It exits 1 when some pool's spread cannot reach the target (the plan then
comes as close as it can). ``apply`` runs a plan's moves once each through a
journal (:mod:`iez.rebalance.apply`); under ``IEZ_EMULATE=ROOT`` it runs
itself again with the placement library preloaded, so its I/O takes the time
the emulated OSTs give it, at its share (``IEZ_IO_SHARE``, ``IEZ_IO_CLASS=rebalance``).
"""

from __future__ import annotations

import argparse
import json
import sys

from iez.commands.preloaded import rerun_preloaded
from iez.rebalance.plan import DEFAULT_TARGET

#: Of each OST's bandwidth, what a rebalance takes when --share is not given (as background staging).
DEFAULT_SHARE = 0.3


def register(subparsers) -> None:
    parser = subparsers.add_parser("rebalance", help="plan and apply the fewest bytes moved to even OST fill")
    actions = parser.add_subparsers(dest="rebalance_action", metavar="ACTION", required=True)
    plan = actions.add_parser(
        "plan", help="print the moves that bring each pool's fill spread under the target",
        description="Plan the fewest bytes moved so that each pool's fill spread (largest less smallest fill "
        "over its OSTs that take new stripes) falls under --target. Files move whole, within their pool, with "
        "the same stripe count and size, never onto degraded, readonly, nocreate or inactive OSTs. Exits 1 "
        "when a pool cannot reach the target.")
    source = plan.add_mutually_exclusive_group(required=True)
    source.add_argument("--cluster", metavar="ROOT_OR_FILE",
                        help="an emulated cluster: its root (or ROOT/cluster.json); files from its data directories")
    source.add_argument("--db", metavar="DB", help="the interaction DB whose live view gives the OSTs (with --root)")
    plan.add_argument("--root", action="append", metavar="DIR",
                      help="the files to consider (repeatable; with --cluster default its data directories)")
    plan.add_argument("--target", type=float, default=DEFAULT_TARGET, metavar="SPREAD",
                      help=f"the largest fill spread allowed in a pool, 0..1 (default {DEFAULT_TARGET})")
    plan.add_argument("--pool", metavar="P", help="balance this pool only (default: every pool)")
    plan.add_argument("--improve-s", type=float, default=2.0, metavar="S",
                      help="seconds per pool the heuristic spends improving its plan (default 2)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON (what apply reads)")
    plan.set_defaults(handler=_plan)
    run = actions.add_parser(
        "apply", help="execute a plan's moves once each, resumable from its journal",
        description="Rewrite each planned file with its new layout (a copy beside it, then an atomic rename that "
        "checks the file did not change); files open for writing or changed are skipped and reported. A killed "
        "run resumes from the journal: run the same command again.")
    run.add_argument("plan", metavar="PLAN.json", help="the output of iez rebalance plan --json")
    run.add_argument("--journal", metavar="FILE", help="the journal (default PLAN.json.journal)")
    run.add_argument("--share", type=float, default=DEFAULT_SHARE, metavar="F",
                     help=f"the share of each OST's bandwidth the moves may take, 0..1 (default {DEFAULT_SHARE})")
    run.add_argument("--json", action="store_true", help="print the outcome as JSON")
    run.set_defaults(handler=_apply)


def _plan(args: argparse.Namespace) -> int:
    from iez.rebalance import inventory
    from iez.rebalance.pools import build

    if args.improve_s < 0:
        raise ValueError(f"--improve-s {args.improve_s} must not be negative")
    if args.cluster:
        inv = inventory.from_cluster(args.cluster, args.root)
    else:
        if not args.root:
            raise ValueError("--db needs --root DIR: the files to move (the DB knows OSTs, not files)")
        from iez.commands.db import settings_from

        inv = inventory.from_db(settings_from(args), args.root)
    for problem in inv.problems:
        print(f"iez rebalance: warning: {problem}", file=sys.stderr)
    plan = build(inv, args.target, args.pool, improve_s=args.improve_s)
    doc = plan.to_json()
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        for m in doc["moves"]:
            print(f"{m['file']}: OSTs {','.join(map(str, m['from']))} -> {','.join(map(str, m['to']))} "
                  f"({m['bytes']} bytes)")
        for d in doc["pools"]:
            name = d["pool"] or ("(no pool)" if inv.pools else "(all)")
            print(f"pool {name}: spread {d['spread_before']:.3f} -> {d['spread_after']:.3f} "
                  f"(target {args.target}), {d['files_moved']} files, {d['bytes_moved']} bytes "
                  f"({d['algorithm']}){'' if d['reached'] else ', TARGET NOT REACHED'}")
    return 0 if plan.reached else 1


def _apply(args: argparse.Namespace) -> int:
    from iez.rebalance.apply import apply

    if not 0.0 < args.share <= 1.0:
        raise ValueError(f"--share {args.share}: a fraction of each OST's bandwidth, above 0 and at most 1")
    argv = ["rebalance", "apply", args.plan, "--share", str(args.share)]
    argv += (["--journal", args.journal] if args.journal else []) + (["--json"] if args.json else [])
    rerun_preloaded(argv, args.share)
    report = apply(args.plan, args.journal, None if args.json else print)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(f"{report.moved} files moved ({report.bytes_moved} bytes), {len(report.skipped)} skipped, "
              f"{report.already} done by an earlier run; journal {report.journal}")
    return 0
