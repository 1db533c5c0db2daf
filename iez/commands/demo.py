"""``iez demo``: the whole pipeline on embedded defaults (SQLite, an emulated cluster of 4 OSS with
another job busy on one of them, real agents, MDS and API, a real application under the preload library,
run placed by iez, rr and qos and timed).

It prints one line per step and a table, writes a Fig. 7-style PNG, and with
``--json`` prints ``{"ost_cost": {...}, "steps": [...], ...}``. It stops every
process it started, also on Ctrl-C or failure, and exits 1 when a step failed
(130 when interrupted).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="run the whole control plane on an emulated cluster and time a job "
                              "placed by iez, Lustre's round-robin and its QoS allocator")
    p.add_argument("--ranks", type=int, help="processes (files) of the application (default 16; the same total "
                   "bytes whatever the count)")
    p.add_argument("--python-writer", action="store_true", help="use the Python writer even when MPI is installed")
    p.add_argument("--work", type=Path, help="working directory (default: a new temporary one, removed afterwards)")
    p.add_argument("--keep", action="store_true", help="keep the working directory (logs, DB, traces)")
    p.add_argument("--plot", type=Path, default=Path("iez-demo.png"), help="PNG to write (default iez-demo.png)")
    p.add_argument("--json", action="store_true", help="print the result as JSON (the steps go to stderr)")
    p.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from iez.demo.pipeline import Demo, plot

    if args.ranks is not None and not 2 <= args.ranks <= 256:
        raise ValueError(f"--ranks {args.ranks} is outside 2..256")
    work = args.work or Path(tempfile.mkdtemp(prefix="iez-demo-"))
    out = sys.stderr if args.json else sys.stdout
    say = lambda text: print(text, file=out, flush=True)  # noqa: E731
    say(f"iez demo in {work}")
    demo = Demo(work, ranks=args.ranks, prefer_mpi=not args.python_writer, log=say)
    interrupted = False
    try:
        report = demo.run()
    except KeyboardInterrupt:
        interrupted = True
        report = demo.report()
    if report["runs"]:
        try:
            plot(report, args.plot)
            report["plot"] = str(args.plot)
        except Exception as err:  # a plot problem must not hide the result
            say(f"  (no plot: {err})")
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        say("")
        say(f"{'policy':<8} {'measured':>9} {'modelled*':>10} {'vs rr':>6} {'OSTCost':>8}")
        rr = report["runs"].get("rr", {}).get("measured_s")
        for policy, run in report["runs"].items():
            measured = run.get("measured_s")
            ratio = f"{measured / rr:.2f}x" if measured and rr else "-"
            say(f"{policy:<8} " + (f"{measured:>8.2f}s" if measured is not None else f"{'-':>9}") +
                f" {run['makespan_s']:>9.2f}s {ratio:>6} {run['ost_cost']:>8.3f}")
        say("measured: the job's wall-clock I/O time through the emulated servers' bandwidth, beside the other job")
        say("* modelled: the slowest OST or OSS at the bandwidth the job can get there (the servers' bandwidth "
            "less the load the MDS learnt from their counters)")
        if "plot" in report:
            say(f"plot: {report['plot']}")
    if not (args.keep or args.work):
        shutil.rmtree(work, ignore_errors=True)
    elif args.keep:
        say(f"kept {work}")
    if interrupted:
        return 130
    return 0 if report["ok"] else 1
