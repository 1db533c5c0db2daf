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
- ``create-map``: the same creates with the layouts in a layout map (``IEZ_MAP``) of ``--map-entries``
  (1,000,000) entries: probe in mapped memory, layout attribute, close, the application's open (the
  target, <= 1 us, is the issue's for the lookup; the placement's own system calls, the same for every
  source of layouts, come on top); ``probe-map``: the lookup alone from C on that map
  (``placement_lib/bench/map_probe.c``, random paths of the map, per lookup);
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


def map_others(count: int) -> list:
    from iez.maps import MapEntry

    return [MapEntry(f"/lustre/others/job/dir{i // 1000:04d}/file.{i:07d}", 1048576, 4,
                     " ".join(str((i + k * 4) % 15) for k in range(4))) for i in range(count)]


def map_case(exe, base_env, dirs, tmp: Path, calls, rounds, others: list) -> list[dict]:
    """create-map: as create_case, the layouts from a map of len(others) + the created files' entries."""
    from iez.layout.emulated import format_attr
    from iez.layout.model import Layout
    from iez.maps import MapEntry, write_map

    results = []
    for where, root in dirs.items():
        plain, pre, by_hand = [], [], []
        for r in range(rounds):
            work = Path(tempfile.mkdtemp(prefix="iez-bench-map-", dir=root))
            try:
                prefix = f"f{r}"
                pinned = [str(work / "placed" / f"{prefix}.{i}") for i in range(calls)]
                (work / "plain").mkdir()
                (work / "placed").mkdir()
                (work / "by-hand").mkdir()
                layouts = write_map(tmp / "bench.cdb", "bench",
                                    [*(MapEntry(p, 1048576, 4, f"{i % 15} {(i + 4) % 15} {(i + 8) % 15} {(i + 12) % 15}")
                                       for i, p in enumerate(pinned)), *others])["path"]
                env = {**base_env, "IEZ_MAP": layouts, "IEZ_DB": str(work / "none.db"),
                       "IEZ_STATE_DIR": str(work / "state"), "IEZ_INCLUDE": str(work), "LD_PRELOAD": str(LIB)}
                # the third side records the same layout text by hand: one open and one fsetxattr, the
                # least any placement costs (on Lustre the LL_IOC_LOV_SETSTRIPE ioctl takes its place)
                text = format_attr(Layout(1048576, (0, 4, 8, 12)))
                sides = [("plain", base_env, plain, ["create"]), ("placed", env, pre, ["create"]),
                         ("by-hand", base_env, by_hand, ["create-layout"])]
                for name_, env_, out_, mode in (sides if r % 2 == 0 else sides[::-1]):
                    out_ += run(exe, [*mode, str(work / name_), prefix, str(calls),
                                      *([text] if mode == ["create-layout"] else [])], env_)
                probe = pinned[calls // 2]
                if not os.getxattr(probe, "user.iez.layout"):
                    raise SystemExit(f"{probe} was not placed: the benchmark would measure misses")
            finally:
                shutil.rmtree(work, ignore_errors=True)
        row = summarise("create-map", where, plain, pre, 1)
        # libiez's own share: the placed create against a plain create that sets the layout by hand
        row["by_hand_median_us"] = statistics.median(by_hand) / 1000
        row["added_over_by_hand_median_us"] = (statistics.median(pre) - statistics.median(by_hand)) / 1000
        row["added_over_by_hand_p99_us"] = (p99(pre) - p99(by_hand)) / 1000
        results.append(row)
    return results


def probe_map(tmp: Path, others: list, lookups: int) -> dict:
    """probe-map: the lookup alone, from C, in a map of len(others) entries."""
    from iez.maps import write_map

    src = ROOT / "placement_lib" / "src"
    exe = tmp / "map_probe"
    subprocess.run(["gcc", "-O2", "-D_GNU_SOURCE", "-DIEZ_HAVE_SQLITE", f"-I{src}", "-o", str(exe),
                    str(ROOT / "placement_lib" / "bench" / "map_probe.c"),
                    *(str(p) for p in sorted(src.glob("*.c")) if p.name not in ("intercept.c", "mpi.c")),
                    "-lsqlite3", "-ldl", "-lpthread"], check=True)
    layouts = write_map(tmp / "probe.cdb", "bench", others)["path"]
    (tmp / "paths").write_text("\n".join(e.path for e in others[::max(1, len(others) // 100_000)]) + "\n")
    out = json.loads(subprocess.run([str(exe), "cdb", layouts, str(tmp / "paths"), str(lookups)], check=True,
                                    capture_output=True, text=True).stdout)
    return {"case": "probe-map", "fs": "-", "entries": len(others), **out, "target_us": 1}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per round and case")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--others", type=int, default=100_000, help="unrelated allocations in the DB")
    parser.add_argument("--backends", default="sqlite,mariadb")
    parser.add_argument("--write-mib", type=int, default=1024)
    parser.add_argument("--map-entries", type=int, default=1_000_000, help="entries of the layout map (map case)")
    parser.add_argument("--cases", default="open,excluded,map,db,trace",
                        help="which cases to run: open, excluded, map, db, trace (comma separated)")
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
        if "map" in cases:
            others = map_others(args.map_entries - args.calls)
            results += map_case(exe, base_env, dirs, tmp, args.calls, args.rounds, others)
            results.append(probe_map(tmp, others, 1_000_000))
            del others
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
        if r["case"] == "probe-map":
            print(f"{r['case']:<17} {'-':<6} {'':>10} {r['p50_ns'] / 1000:>8.3f}us {r['p99_ns'] / 1000:>8.3f}us "
                  f"{r['target_us']:>6.0f}us  (lookup alone, from C, {r['entries']} entries; mean "
                  f"{r['ns_per_lookup'] / 1000:.3f}us)")
        elif r["case"] == "trace-write":
            print(f"{r['case']:<17} {r['fs']:<6} {r['plain_s']:>9.3f}s {r['overhead_pct']:>9.2f}% "
                  f"{'':>10} {r['target_pct']:>7.1f}%")
        else:
            print(f"{r['case']:<17} {r['fs']:<6} {r['plain_median_us']:>8.1f}us {r['added_median_us']:>8.1f}us "
                  f"{r['added_p99_us']:>8.1f}us {r['target_us']:>6.0f}us")
            if "by_hand_median_us" in r:
                print(f"{'  over by-hand':<17} {r['fs']:<6} {r['by_hand_median_us']:>8.1f}us "
                      f"{r['added_over_by_hand_median_us']:>8.1f}us {r['added_over_by_hand_p99_us']:>8.1f}us "
                      f"{r['target_us']:>6.0f}us  (libiez's own share: against open + fsetxattr of the same "
                      f"layout by hand)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
