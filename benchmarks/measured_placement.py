"""Measured placement: the same predicted jobs placed by iez, rr and qos on emulated clusters, each run for
real and timed wall-clock through the emulated bandwidth, beside the model and the bound.

    python benchmarks/measured_placement.py [--scenario NAME[,NAME...]] [--ranks N] [--json FILE]

Each scenario (``iez.demo.scenarios.benchmark``) runs the whole ``iez demo`` pipeline on its own cluster:
real agents, MDS (SQLite) and API; competing jobs really running where the scenario has them (processes
re-reading their datasets through the emulated bandwidth, which the MDS learns of from the counters
only); the jobs traced, learnt (AIPA), allocated by the MDS from its live view, then run placed by iez,
and by Lustre's round-robin and QoS allocators (size- and load-blind, on the same view), every rank
rewriting its file through the emulated bandwidth. Printed per scenario and policy: the measured I/O
time, the modelled one (the slowest OST or OSS at the bandwidth the job can get there, on the MDS's
view), the model's error, the fullest OST after the run (the cap is 95 %), ``makespan_bound_s`` (no placement within the fill cap beats it: whole
stripe objects, the servers' bandwidth left for the job) and each policy against the bound and
against rr. About a minute a scenario on an idle 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from iez.demo.pipeline import POLICIES, Demo  # noqa: E402
from iez.demo.scenarios import benchmark  # noqa: E402


def main() -> int:
    scenarios = {s.name: s for s in benchmark()}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default=",".join(scenarios),
                        help=f"comma-separated names (default all: {', '.join(scenarios)})")
    parser.add_argument("--python-writer", action="store_true", help="the Python writer even where MPI is installed")
    parser.add_argument("--json", type=Path, help="write every row (and each run's report) to this file")
    args = parser.parse_args()
    chosen = [n.strip() for n in args.scenario.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in scenarios]
    if unknown:
        parser.error(f"--scenario: no scenario {', '.join(unknown)} (choose from {', '.join(scenarios)})")

    rows, reports, failed = [], {}, []
    for name in chosen:
        scenario = scenarios[name]
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"iez-bench-{name}-") as work:
            report = Demo(Path(work), prefer_mpi=not args.python_writer, scenario=scenario,
                          log=lambda text: print(text, file=sys.stderr, flush=True)).run()
        reports[name] = report
        if not report["ok"]:
            bad = [s for s in report["steps"] if not s["ok"]]
            failed.append(f"{name}: {bad[0]['name']}: {bad[0]['detail'][:300]}" if bad else name)
            continue
        bound = report["makespan_bound_s"]
        rr = report["io_time_s"]["rr"]["measured"]
        for policy in POLICIES:
            t = report["io_time_s"][policy]
            rows.append({"scenario": name, "policy": policy, "measured_s": t["measured"], "modelled_s": t["modelled"],
                         "model_error": round(t["measured"] / t["modelled"] - 1, 4),
                         "makespan_bound_s": bound, "measured_vs_bound": round(t["measured"] / bound, 3),
                         "modelled_vs_bound": round(t["modelled"] / bound, 3),
                         "measured_vs_rr": round(t["measured"] / rr, 3), "ost_cost": report["ost_cost"][policy],
                         "max_fill": report["runs"][policy]["max_fill"],
                         "live_load_mib_s": report.get("live_load_mib_s", {}),
                         "seconds": round(time.monotonic() - started, 1)})
        print(f"# {name}: {scenario.summary}", flush=True)
    print()
    print(f"{'scenario':<18} {'policy':<6} {'measured':>9} {'modelled':>9} {'error':>7} {'bound':>7} "
          f"{'meas/bound':>10} {'vs rr':>6} {'max fill':>8} {'OSTCost':>8}")
    for r in rows:
        print(f"{r['scenario']:<18} {r['policy']:<6} {r['measured_s']:>8.2f}s {r['modelled_s']:>8.2f}s "
              f"{100 * r['model_error']:>+6.1f}% {r['makespan_bound_s']:>6.2f}s {r['measured_vs_bound']:>9.2f}x "
              f"{r['measured_vs_rr']:>5.2f}x {100 * r['max_fill']:>7.1f}% {r['ost_cost']:>8.3f}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "reports": reports}, indent=1))
    for line in failed:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
