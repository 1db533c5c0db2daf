"""Latency libiez adds to the calls it intercepts, and the cost of tracing.

    python benchmarks/preload_latency.py [--calls 2000] [--rounds 3] [--backends sqlite,mariadb] [--json]

Every case runs the same C program (``placement_lib/bench/open_bench.c``)
without and with ``LD_PRELOAD=libiez.so`` in the same run, on tmpfs
(``/dev/shm``) and on the work disk, and reports the added latency per call
(median and p99 of with minus the same statistic without):

- ``open-existing``: ``open(O_RDONLY)`` of an existing file: nothing to place (target <= 5 us);
- ``create-excluded``: creating new files below an ``IEZ_EXCLUDE`` prefix (target <= 5 us);
- ``create-sqlite`` / ``create-mariadb``: creating new files whose layouts are in the
  DB among 100,000 other allocations: lookup, layout attribute, close, the
  application's open (targets <= 200 us and <= 1 ms);
- ``trace-write``: writing ``--write-mib`` MiB in 4 KiB writes with ``IEZ_MODE=trace``
  against the plain run, as a share of wall time, fastest round of each side
  (target <= 1 %).

Each round runs both sides, alternating which goes first, so drift on a
shared machine hits both alike. MariaDB comes from ``IEZ_BENCH_MYSQL_URL``
(default ``mysql://root@127.0.0.1:3306/iez_bench_preload``), which is emptied.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from lookup_bench import fill  # same directory: the DB filler both benchmarks use

from iez.config import ConfigError, database_url

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "placement_lib" / "build" / "libiez.so"
BENCH_SRC = ROOT / "placement_lib" / "bench" / "open_bench.c"


def build(tmp: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT / "placement_lib")], check=True, stdout=subprocess.DEVNULL)
    exe = tmp / "open_bench"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(BENCH_SRC)], check=True)
    return exe


def run(exe: Path, args: list[str], env: dict) -> list[int]:
    out = subprocess.run([str(exe), *args], env=env, check=True, capture_output=True, text=True)
    if "iez[" in out.stderr:
        raise SystemExit(f"libiez complained during the benchmark: {out.stderr[:500]}")
    return [int(line) for line in out.stdout.split()]


def p99(samples: list[int]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def summarise(name: str, where: str, plain: list[int], preloaded: list[int], target_us: float) -> dict:
    med_plain, med_pre = statistics.median(plain), statistics.median(preloaded)
    return {
        "case": name, "fs": where, "calls": len(preloaded),
        "plain_median_us": med_plain / 1000, "preload_median_us": med_pre / 1000,
        "added_median_us": (med_pre - med_plain) / 1000,
        "plain_p99_us": p99(plain) / 1000, "preload_p99_us": p99(preloaded) / 1000,
        "added_p99_us": (p99(preloaded) - p99(plain)) / 1000,
        "target_us": target_us,
    }


def create_case(exe, base_env, dirs, db, name, target_us, calls, rounds, others, extra_env=None) -> list[dict]:
    results = []
    for where, root in dirs.items():
        plain, pre = [], []
        for r in range(rounds):
            work = Path(tempfile.mkdtemp(prefix=f"iez-bench-{name}-", dir=root))
            try:
                prefix = f"f{r}"
                pinned = [str(work / "placed" / f"{prefix}.{i}") for i in range(calls)]
                (work / "plain").mkdir()
                (work / "placed").mkdir()
                if db is not None:
                    fill(db, others, pinned)
                env = {**base_env, "IEZ_DB": db or str(work / "none.db"), "IEZ_STATE_DIR": str(work / "state"),
                       "IEZ_INCLUDE": str(work), **(extra_env(work) if extra_env else {})}
                # alternate which side runs first, so drift and warm caches favour neither
                sides = [("plain", base_env, plain), ("placed", {**env, "LD_PRELOAD": str(LIB)}, pre)]
                for name_, env_, out_ in (sides if r % 2 == 0 else sides[::-1]):
                    out_ += run(exe, ["create", str(work / name_), prefix, str(calls)], env_)
                if db is not None:
                    probe = pinned[calls // 2]
                    if not os.getxattr(probe, "user.iez.layout"):
                        raise SystemExit(f"{probe} was not placed: the benchmark would measure misses")
            finally:
                shutil.rmtree(work, ignore_errors=True)
        results.append(summarise(name, where, plain, pre, target_us))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per round and case")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--others", type=int, default=100_000, help="unrelated allocations in the DB")
    parser.add_argument("--backends", default="sqlite,mariadb")
    parser.add_argument("--write-mib", type=int, default=1024)
    parser.add_argument("--cases", default="open,excluded,db,trace",
                        help="which cases to run: open, excluded, db, trace (comma separated)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    mariadb = os.environ.get("IEZ_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/iez_bench_preload")
    if "db" in cases and "mariadb" in args.backends.split(","):
        try:
            database_url(mariadb)  # one line naming the driver to install, not a traceback midway
        except ConfigError as err:
            parser.exit(2, f"{parser.prog}: error: {err}\n")

    tmp = Path(tempfile.mkdtemp(prefix="iez-bench-"))
    dirs = {"tmpfs": Path("/dev/shm"), "disk": tmp}
    exe = build(tmp)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("IEZ_") and k != "LD_PRELOAD"}
    results: list[dict] = []
    try:
        # open of an existing file: nothing to create, nothing to look up
        for where, root in (dirs.items() if "open" in cases else ()):
            target = Path(tempfile.mkstemp(dir=root)[1])
            plain, pre = [], []
            env = {**base_env, "LD_PRELOAD": str(LIB), "IEZ_DB": str(tmp / "none.db"), "IEZ_STATE_DIR": str(tmp / "s"),
                   "IEZ_INCLUDE": str(root)}
            for r in range(args.rounds):
                sides = [(base_env, plain), (env, pre)]
                for env_, out_ in (sides if r % 2 == 0 else sides[::-1]):
                    out_ += run(exe, ["open-existing", str(target), str(args.calls)], env_)
            target.unlink()
            results.append(summarise("open-existing", where, plain, pre, 5))
        # creates below an excluded prefix
        if "excluded" in cases:
            results += create_case(exe, base_env, dirs, None, "create-excluded", 5, args.calls, args.rounds, 0,
                                   extra_env=lambda work: {"IEZ_EXCLUDE": str(work / "placed")})
        backends = [b for b in args.backends.split(",") if b] if "db" in cases else []
        if "sqlite" in backends:
            results += create_case(exe, base_env, dirs, str(tmp / "bench.db"), "create-sqlite", 200, args.calls,
                                   args.rounds, args.others)
        if "mariadb" in backends:
            results += create_case(exe, base_env, dirs, mariadb, "create-mariadb", 1000, args.calls, args.rounds,
                                   args.others)
        # tracing: a write-heavy run
        for where, root in (dirs.items() if "trace" in cases else ()):
            plain, pre = [], []
            trace_dir = tmp / f"traces-{where}"
            for r in range(args.rounds):
                out = Path(root) / f"iez-bench-write-{os.getpid()}-{r}"
                traced = {**base_env, "LD_PRELOAD": str(LIB), "IEZ_MODE": "trace", "IEZ_INCLUDE": str(root),
                          "IEZ_TRACE_DIR": str(trace_dir), "IEZ_STATE_DIR": str(tmp / "s")}
                sides = [(base_env, plain), (traced, pre)]
                try:
                    for env_, out_ in (sides if r % 2 == 0 else sides[::-1]):
                        out_ += run(exe, ["write", str(out), str(args.write_mib), "4096"], env_)
                        out.unlink()
                finally:
                    out.unlink(missing_ok=True)
            traces = list(trace_dir.glob("iez-trace.*.csv"))
            if len(traces) != args.rounds:
                raise SystemExit(f"tracing wrote {len(traces)} traces for {args.rounds} runs")
            # the fastest round of each side is the one least disturbed by the rest of the machine
            best_plain, best_pre = min(plain), min(pre)
            results.append({"case": "trace-write", "fs": where, "mib": args.write_mib, "block": 4096,
                            "rounds": args.rounds, "plain_s": best_plain / 1e9, "trace_s": best_pre / 1e9,
                            "overhead_pct": 100 * (best_pre - best_plain) / best_plain, "target_pct": 1.0})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'case':<17} {'fs':<6} {'plain med':>10} {'added med':>10} {'added p99':>10} {'target':>8}")
    for r in results:
        if r["case"] == "trace-write":
            print(f"{r['case']:<17} {r['fs']:<6} {r['plain_s']:>9.3f}s {r['overhead_pct']:>9.2f}% "
                  f"{'':>10} {r['target_pct']:>7.1f}%")
        else:
            print(f"{r['case']:<17} {r['fs']:<6} {r['plain_median_us']:>8.1f}us {r['added_median_us']:>8.1f}us "
                  f"{r['added_p99_us']:>8.1f}us {r['target_us']:>6.0f}us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
