"""Tracing a process that writes very many files: the memory and the time of its loop.

    python benchmarks/trace_scale.py [--files 1000000] [--max-files N] [--rounds 1] [--dir /dev/shm]
                                     [--also NAME=PATH/libiez.so ...] [--json]

Runs ``placement_lib/tests/apps/trace_many.c`` (open, write one byte, close; 1,000 files per
directory so the file system's cost per file stays the same) without the library and with
``IEZ_MODE=trace`` (and with every ``--also`` build, e.g. an older library, for a before/after
figure), each in a fresh directory on tmpfs by default. Reports per side the loop's wall time
(the trace's early rows included; its last rows are written after the loop, at exit), the
process's peak RSS, and the traced side against the plain one. Checks that the trace holds
one row per file with the byte written. Rounds alternate which side goes first and the
fastest loop of each side counts.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "placement_lib" / "build" / "libiez.so"
APP_SRC = ROOT / "placement_lib" / "tests" / "apps" / "trace_many.c"


def build(tmp: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT / "placement_lib")], check=True, stdout=subprocess.DEVNULL)
    exe = tmp / "trace_many"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(APP_SRC)], check=True)
    return exe


def clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("IEZ_") and k != "LD_PRELOAD"}


def one_run(exe: Path, work: Path, traces: Path, files: int, lib: Path | None, max_files: int | None) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(traces, ignore_errors=True)
    work.mkdir()
    env = clean_env()
    if lib is not None:
        env.update({"LD_PRELOAD": str(lib), "IEZ_MODE": "trace", "IEZ_TRACE_DIR": str(traces),
                    "IEZ_INCLUDE": str(work)})
        if max_files is not None:
            env["IEZ_TRACE_MAX_FILES"] = str(max_files)
    out = subprocess.run([str(exe), str(work), str(files)], env=env, capture_output=True, text=True, check=True)
    fields = out.stdout.split()
    result = {"seconds": float(fields[3]), "peak_rss_mib": int(fields[5]) / 1024}
    if lib is not None:
        rows = 0
        for f in traces.glob("iez-trace.*.csv"):
            with f.open(newline="") as handle:
                for row in csv.DictReader(handle):
                    if row["bytes_written"] != "1":
                        raise SystemExit(f"{row['path']}: {row['bytes_written']} bytes in the trace, 1 written")
                    rows += 1
        if rows != files:
            raise SystemExit(f"the trace holds {rows} rows for {files} files")
    return result


def main(argv: list[str] | None = None) -> int:
    from iez.progress import note  # a line per step on stderr

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--max-files", type=int, default=None, help="IEZ_TRACE_MAX_FILES (default: the library's)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--dir", default="/dev/shm", help="where the files go (default: tmpfs)")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=PATH",
                    help="another libiez.so to trace with, e.g. before=/tmp/old/libiez.so")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    libs = {"traced": LIB}
    for spec in args.also:
        name, _, path = spec.partition("=")
        if not name or not Path(path).is_file():
            ap.error(f"--also {spec!r}: expected NAME=PATH to an existing libiez.so")
        libs[name] = Path(path)
    with tempfile.TemporaryDirectory(prefix="iez-trace-scale-") as tmp_name:
        tmp = Path(tmp_name)
        exe = build(tmp)
        scratch = Path(tempfile.mkdtemp(prefix="iez-trace-scale-", dir=args.dir))
        try:
            best: dict[str, dict] = {}
            sides = [("plain", None), *libs.items()]
            for r in range(args.rounds):
                for name, lib in (sides if r % 2 == 0 else sides[::-1]):
                    note(f"trace scale: round {r + 1}/{args.rounds}, {name}", always=True)
                    got = one_run(exe, scratch / "work", tmp / "traces", args.files, lib, args.max_files)
                    if name not in best or got["seconds"] < best[name]["seconds"]:
                        best[name] = got
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    plain = best["plain"]
    for name, got in best.items():
        got["time_ratio"] = round(got["seconds"] / plain["seconds"], 2)
        got["extra_rss_mib"] = round(got["peak_rss_mib"] - plain["peak_rss_mib"], 1)
    if args.json:
        print(json.dumps({"files": args.files, "max_files": args.max_files, "results": best}, indent=2))
    else:
        print(f"{args.files:,} files, IEZ_TRACE_MAX_FILES {args.max_files or 'default'}, best of {args.rounds}")
        print(f"{'side':<10} {'loop s':>8} {'x plain':>8} {'peak RSS MiB':>13} {'+ MiB':>7}")
        for name, got in best.items():
            print(f"{name:<10} {got['seconds']:>8.2f} {got['time_ratio']:>8.2f} {got['peak_rss_mib']:>13.1f} "
                  f"{got['extra_rss_mib']:>7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
