"""How the OST allocators' cost grows with problem size: paper, iez and qos side by side.

    python benchmarks/allocate_scaling.py [--quick] [--timeout 60] [--jobs 2] [--json FILE]

Every measurement is one ``iez bench allocate --osts N --oss M --requests R
--stripe-count C --policy P --json`` process, so each row's peak memory
(``peak_rss_mib``) belongs to that run alone. ``seconds`` is the time of the
``allocate()`` call inside the process; the timeout is on the wall clock of the
whole process (interpreter start-up of about 1.5 s, the allocation, and the
OSTCost bookkeeping after it). A run past the timeout is killed.

Grid: OSTs 15, 100, 1000, 10000 (15/3, 100/20, 1000/250, 10000/1250 OSTs/OSS),
requests 64, 1,000, 10,000, 100,000, 200,000, stripe counts 1, 4, 8 and -1 (all
OSTs). Skipped: a stripe count above the OST count, and for stripe count -1 an
instance with more than 20 million stripes (requests x OSTs). For each policy
and stripe count, once an instance times out, no instance at least as large in
both OSTs and requests is attempted.

``--quick`` is the smoke-test subset: 15 and 100 OSTs, 64 and 1,000 requests,
stripe count 4, timeout 8 s unless ``--timeout`` is given.

``--jobs`` (default 2) runs that many measurement processes at once. Each process
is single-threaded, so on a 2-core machine two at a time keep the whole grid
within about 20 minutes without measurably slowing one another; ``--jobs 1``
runs strictly one after another. One policy and stripe count always run in
order (smaller instances first), which the timeout rule needs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

POLICIES = ("paper", "iez", "qos")
#: (OSTs, OSS): 5 OSTs per OSS for 15 OSTs, 4-8 elsewhere.
CLUSTERS = ((15, 3), (100, 20), (1000, 250), (10000, 1250))
REQUESTS = (64, 1_000, 10_000, 100_000, 200_000)
STRIPE_COUNTS = (1, 4, 8, -1)
QUICK_CLUSTERS = ((15, 3), (100, 20))
QUICK_REQUESTS = (64, 1_000)
QUICK_STRIPE_COUNTS = (4,)
QUICK_TIMEOUT = 8.0
#: Stripe count -1 (every OST): instances above this many stripes are not attempted.
MAX_ALL_OST_STRIPES = 20_000_000
#: The issue's target instance.
TARGET = dict(osts=1000, oss=250, requests=100_000, stripe_count=4, policy="iez")
#: Longest-running chains first, so two workers finish together.
CHAIN_ORDER = [("qos", 8), ("qos", -1), ("qos", 4), ("paper", 8), ("paper", 4), ("paper", -1),
               ("paper", 1), ("qos", 1), ("iez", -1), ("iez", 8), ("iez", 4), ("iez", 1)]


@dataclass(frozen=True)
class Instance:
    osts: int
    oss: int
    requests: int
    stripe_count: int

    @property
    def stripes(self) -> int:
        return self.requests * (self.osts if self.stripe_count == -1 else self.stripe_count)

    def covers(self, other: "Instance") -> bool:
        """At least as large as ``other`` in both OSTs and requests."""
        return self.osts >= other.osts and self.requests >= other.requests


def iez_command() -> list[str]:
    """The ``iez`` of the interpreter running this script, else the one on PATH."""
    beside = Path(sys.executable).parent / "iez"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("iez")
    if found:
        return [found]
    return [sys.executable, "-m", "iez.cli"]


class Runner:
    """Runs measurement processes; kills every one still running on :meth:`stop`."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.command = iez_command()
        self.lock = threading.Lock()
        self.live: set[subprocess.Popen] = set()
        self.stopping = False
        self.done = 0

    def measure(self, policy: str, inst: Instance) -> dict:
        args = [*self.command, "bench", "allocate", "--osts", str(inst.osts), "--oss", str(inst.oss),
                "--requests", str(inst.requests), "--stripe-count", str(inst.stripe_count),
                "--policy", policy, "--json"]
        row = {"policy": policy, "osts": inst.osts, "oss": inst.oss, "requests": inst.requests,
               "stripe_count": inst.stripe_count}
        with self.lock:
            if self.stopping:
                raise KeyboardInterrupt
            proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
            self.live.add(proc)
        start = time.perf_counter()
        try:
            out, err = proc.communicate(timeout=self.timeout)
            wall = time.perf_counter() - start
        except subprocess.TimeoutExpired:
            wall = time.perf_counter() - start
            self._kill(proc)
            proc.communicate()
            row.update(status="timeout", seconds=None, wall_seconds=round(wall, 2), timeout_s=self.timeout)
        else:
            if proc.returncode == 0:
                try:
                    row.update(json.loads(out.strip().splitlines()[-1]))
                    row.update(status="ok", wall_seconds=round(wall, 2))
                except (ValueError, IndexError):
                    row.update(status="error", seconds=None, wall_seconds=round(wall, 2),
                               error=f"unparsable output: {out.strip()!r} {err.strip()!r}")
            else:
                text = err.strip() or out.strip() or "(no output)"
                row.update(status="error", seconds=None, wall_seconds=round(wall, 2),
                           error=f"exit {proc.returncode}: {text}")
        finally:
            with self.lock:
                self.live.discard(proc)
        with self.lock:
            self.done += 1
            print(f"[{self.done:3d}] {progress_line(row, self.timeout)}", file=sys.stderr, flush=True)
        return row

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the process group this runner created for it
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            for proc in list(self.live):
                self._kill(proc)


def progress_line(row: dict, timeout: float) -> str:
    what = (f"{row['policy']:<5} sc={row['stripe_count']:>2} osts={row['osts']:>5} "
            f"requests={row['requests']:>6}")
    if row["status"] == "ok":
        return (f"{what}  {row['seconds']:.4f} s  OSTCost {row['ost_cost']:.4f}  "
                f"{row['peak_rss_mib']:.1f} MiB  (wall {row['wall_seconds']:.1f} s)")
    if row["status"] == "timeout":
        return f"{what}  timeout >{timeout:g}s (killed)"
    return f"{what}  ERROR {row['error']}"


def plan(clusters, requests, stripe_counts) -> tuple[dict[int, list[Instance]], list[str]]:
    """Instances per stripe count, smallest OSTs then requests first, and notes on what was left out."""
    per_sc: dict[int, list[Instance]] = {}
    notes = []
    for sc in stripe_counts:
        chosen = []
        for osts, oss in clusters:
            if sc > osts:
                notes.append(f"stripe count {sc} skipped on {osts} OSTs (more stripes than OSTs)")
                continue
            capped = []
            for r in requests:
                inst = Instance(osts, oss, r, sc)
                if sc == -1 and inst.stripes > MAX_ALL_OST_STRIPES:
                    capped.append(r)
                    continue
                chosen.append(inst)
            if capped:
                notes.append(f"stripe count -1 on {osts:,} OSTs: {', '.join(f'{r:,}' for r in capped)} requests "
                             f"not run (requests x OSTs capped at {MAX_ALL_OST_STRIPES:,} stripes)")
        per_sc[sc] = chosen
    return per_sc, notes


def run_chain(runner: Runner, policy: str, instances: list[Instance]) -> dict[Instance, dict]:
    """One policy and stripe count, smallest first; nothing covering a timed-out instance is attempted."""
    results: dict[Instance, dict] = {}
    timed_out: list[Instance] = []
    for inst in instances:
        blocker = next((t for t in timed_out if inst.covers(t)), None)
        if blocker is not None:
            results[inst] = {"status": "skipped", "after": blocker}
            continue
        row = runner.measure(policy, inst)
        results[inst] = row
        if row["status"] == "timeout":
            timed_out.append(inst)
    return results


# ---------------------------------------------------------------- report

CELL = 27


def fmt_seconds(s: float) -> str:
    return f"{s:.4f}" if s < 10 else f"{s:.2f}"


def cell(result: dict | None, timeout: float, footnotes: dict[str, int]) -> str:
    if result is None:
        return "".ljust(CELL)
    status = result["status"]
    if status == "ok":
        return f"{fmt_seconds(result['seconds']):>9} {result['ost_cost']:>8.4f} {result['peak_rss_mib']:>7.1f}"
    if status == "timeout":
        return f"timeout >{timeout:g}s".ljust(CELL)
    if status == "skipped":
        return "not run (smaller timed out)".ljust(CELL)
    key = result["error"]
    n = footnotes.setdefault(key, len(footnotes) + 1)
    return f"error [{n}]".ljust(CELL)


def table(per_sc: dict[int, list[Instance]], results: dict[tuple[str, Instance], dict], timeout: float,
          footnotes: dict[str, int]) -> list[str]:
    lines = []
    head1 = f"{'OSTs':>6} {'OSS':>5} {'requests':>8} " + "".join(f"| {p:^{CELL}} " for p in POLICIES)
    head2 = f"{'':>6} {'':>5} {'':>8} " + "".join(
        f"| {'seconds':>9} {'OSTCost':>8} {'MiB':>7} " for _ in POLICIES)
    for sc, instances in per_sc.items():
        if not instances:
            continue
        title = "stripe count -1 (every OST)" if sc == -1 else f"stripe count {sc}"
        lines += ["", title, head1.rstrip(), head2.rstrip(), "-" * len(head2.rstrip())]
        for inst in instances:
            cells = [results.get((p, inst)) for p in POLICIES]
            if all(c is None or c["status"] == "skipped" for c in cells):
                continue
            lines.append((f"{inst.osts:>6} {inst.oss:>5} {inst.requests:>8} "
                          + "".join(f"| {cell(c, timeout, footnotes)} " for c in cells)).rstrip())
    return lines


def describe(inst: Instance) -> str:
    return f"{inst.osts:,} OSTs x {inst.requests:,} requests, stripe count {inst.stripe_count}"


def paper_summary(per_sc, results, timeout) -> list[str]:
    lines = [f"Largest paper instance finished within the {timeout:g} s timeout (size = requests x OSTs, "
             "the paper's request-OST edges), and iez on the same instance:"]
    best_overall = None
    for sc, instances in per_sc.items():
        done = [i for i in instances if results.get(("paper", i), {}).get("status") == "ok"]
        if not done:
            lines.append(f"  stripe count {sc:>2}: no paper run finished")
            continue
        best = max(done, key=lambda i: (i.requests * i.osts, i.stripes))
        lines.append("  " + paper_vs_iez(best, results, f"stripe count {sc:>2}: ", with_sc=False))
        if best_overall is None or (best.requests * best.osts, best.stripes) > (
                best_overall.requests * best_overall.osts, best_overall.stripes):
            best_overall = best
    if best_overall is not None:
        lines.append("  " + paper_vs_iez(best_overall, results, "largest overall: "))
    return lines


def paper_vs_iez(inst: Instance, results, prefix: str, with_sc: bool = True) -> str:
    paper = results[("paper", inst)]
    iez = results.get(("iez", inst))
    what = describe(inst) if with_sc else f"{inst.osts:,} OSTs x {inst.requests:,} requests"
    text = f"{prefix}{what}: paper {fmt_seconds(paper['seconds'])} s"
    if iez is None or iez["status"] != "ok":
        return text + f", iez {iez['status'] if iez else 'not run'}"
    ratio = paper["seconds"] / iez["seconds"] if iez["seconds"] > 0 else float("inf")
    return text + f", iez {fmt_seconds(iez['seconds'])} s -> paper/iez = {ratio:,.0f}x"


def headline(results, timeout) -> str:
    inst = Instance(TARGET["osts"], TARGET["oss"], TARGET["requests"], TARGET["stripe_count"])
    what = (f"Target: {inst.osts:,} OSTs x {inst.requests:,} requests of stripe count {inst.stripe_count} "
            f"under iez:")
    row = results.get((TARGET["policy"], inst))
    if row is None:
        return f"{what} not in this grid (run without --quick)"
    if row["status"] == "ok":
        return (f"{what} {row['seconds']:.4f} s, OSTCost {row['ost_cost']:.4f}, "
                f"peak memory {row['peak_rss_mib']:.1f} MiB")
    if row["status"] == "timeout":
        return f"{what} timeout >{timeout:g}s"
    if row["status"] == "skipped":
        return f"{what} not run (a smaller instance timed out)"
    return f"{what} ERROR {row['error']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small subset for a smoke test: 15 and 100 OSTs, up to 1,000 requests, stripe count 4")
    parser.add_argument("--timeout", type=float, default=None,
                        help=f"seconds of wall clock per run before it is killed (default 60; {QUICK_TIMEOUT:g} "
                        "with --quick)")
    parser.add_argument("--jobs", type=int, default=2, help="measurement processes at once (default 2)")
    parser.add_argument("--json", metavar="FILE", help="also write every attempted run as a JSON list of rows")
    args = parser.parse_args(argv)
    timeout = args.timeout if args.timeout is not None else (QUICK_TIMEOUT if args.quick else 60.0)
    if timeout <= 0 or args.jobs < 1:
        parser.error("--timeout must be positive and --jobs at least 1")

    if args.quick:
        per_sc, notes = plan(QUICK_CLUSTERS, QUICK_REQUESTS, QUICK_STRIPE_COUNTS)
    else:
        per_sc, notes = plan(CLUSTERS, REQUESTS, STRIPE_COUNTS)
    runner = Runner(timeout)
    chains = [(p, sc) for p, sc in CHAIN_ORDER if sc in per_sc and per_sc[sc]]
    print(f"running {sum(len(per_sc[sc]) for _, sc in chains)} policy x instance combinations at most, "
          f"{args.jobs} at a time, timeout {timeout:g} s each ({' '.join(runner.command)} bench allocate ...)",
          file=sys.stderr, flush=True)
    started = time.perf_counter()
    results: dict[tuple[str, Instance], dict] = {}
    pool = ThreadPoolExecutor(max_workers=args.jobs)
    try:
        futures = {pool.submit(run_chain, runner, p, per_sc[sc]): p for p, sc in chains}
        for future, policy in futures.items():
            for inst, row in future.result().items():
                results[(policy, inst)] = row
    except KeyboardInterrupt:
        runner.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        print("interrupted", file=sys.stderr)
        return 130
    pool.shutdown(wait=True)
    elapsed = time.perf_counter() - started

    footnotes: dict[str, int] = {}
    out = [f"OST allocator scaling: paper (networkx), iez, qos - {'quick subset' if args.quick else 'full grid'}",
           f"seconds = allocate() time; MiB = peak RSS of that run's own process; OSTCost = max/mean OST "
           f"utilisation (1.0 is perfect)",
           f"timeout = {timeout:g} s of wall clock per process (start-up, allocation, bookkeeping); a timed-out "
           "run is killed and nothing at least as large (OSTs and requests) is tried for that policy and "
           "stripe count"]
    out += table(per_sc, results, timeout, footnotes)
    out.append("")
    if footnotes:
        out.append("Errors (stderr of the run, verbatim):")
        for text, n in footnotes.items():
            where = [f"{p} sc={i.stripe_count} {i.osts}x{i.requests}" for (p, i), r in results.items()
                     if r.get("status") == "error" and r.get("error") == text]
            out.append(f"  [{n}] {text}")
            out.append(f"      in: {', '.join(where)}")
        out.append("")
    if notes:
        out.append("Not attempted:")
        out += [f"  {n}" for n in notes]
        out.append("")
    if any(sc == -1 for sc in per_sc):
        out.append("With stripe count -1 every file uses every OST, so the OST set is forced; OSTCost can differ "
                   "between policies only through\nwhich OSTs get each file's short or empty last stripes "
                   "(stripe size x OSTs exceeds the 4 GiB file).")
        out.append("")
    out.append("A batch with fewer stripes than OSTs leaves most OSTs empty, so its OSTCost is far above 1.0 "
               "under any policy.")
    out.append("")
    out += paper_summary(per_sc, results, timeout)
    out.append("")
    out.append(headline(results, timeout))
    out.append(f"Total wall time: {elapsed:.0f} s with {args.jobs} job(s)")
    print("\n".join(out))

    if args.json:
        rows = [r for (p, i), r in sorted(results.items(), key=lambda kv: (
            STRIPE_COUNTS.index(kv[0][1].stripe_count), kv[0][1].osts, kv[0][1].requests,
            POLICIES.index(kv[0][0]))) if r["status"] != "skipped"]
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
