"""``iez learn --darshan-dir`` on a Darshan log tree: time per log, and a second pass that imports nothing.

Builds ``--logs N`` logs (copies of the real logs in /work/shared/data/darshan, the empty one left out,
under a dated tree ``YYYY/M/D/`` with Darshan's names ``<user>_<exe>_id<jobid>_<m>-<d>-<secs>-<hash>.darshan``,
distinct users, job ids and times), then runs ``iez learn --darshan-dir`` as a real process in
``--batches`` rounds, adding a share of the logs before each (incremental), then once more with nothing
new, and once after a restart of the command with nothing new. Prints one JSON object.

    PYTHONPATH=/work/main python benchmarks/darshan_dir_bench.py --logs 56 --batches 4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = Path(os.environ.get("IEZ_DARSHAN_LOGS", "/work/shared/data/darshan"))
EXES = {"ior-posix-16ranks": "ior", "mpi-io-test-3.5.0": "mpi-io-test", "theta-imbalanced-io": "imbalanced",
        "e3sm-io-512ranks": "e3sm_io", "hdf5-file-opens": "h5opens", "dlio-python-a": "python",
        "dlio-python-b": "python"}


def make_logs(root: Path, count: int, users: int = 3) -> list[Path]:
    """``count`` copies of the real logs (round robin), each in its day's directory with its own name."""
    sources = sorted(p for p in SOURCE.glob("*.darshan") if p.stem in EXES)
    made = []
    for k in range(count):
        src = sources[k % len(sources)]
        day = 1 + k % 28
        secs = 3600 + 60 * k
        name = f"user{k % users}_{EXES[src.stem]}_id{10_000 + k}_11-{day}-{secs}-{k:08x}.darshan"
        target = root / "2026" / "11" / str(day) / name
        made.append(target)
    return [(src_for, dst) for src_for, dst in zip((sources[k % len(sources)] for k in range(count)), made)]


def run_learn(db: str, state: Path, logs: Path, extra=()) -> tuple[dict, float, str]:
    env = {**os.environ, "IEZ_STATE_DIR": str(state)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "iez.cli", "learn", "--darshan-dir", str(logs), "--db", db,
                           "--json", *extra], capture_output=True, text=True, env=env, cwd=REPO, timeout=3600)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"iez learn failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), wall, done.stderr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--logs", type=int, default=56)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--keep", metavar="DIR", help="work here (kept) instead of a temporary directory")
    args = ap.parse_args(argv)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="iez-darshan-bench-"))
    try:
        logs, state, db = work / "logs", work / "state", str(work / "iez.db")
        subprocess.run([sys.executable, "-m", "iez.cli", "db", "upgrade", "--db", db], check=True, cwd=REPO,
                       capture_output=True)
        plan = make_logs(logs, args.logs)
        per_batch = -(-len(plan) // args.batches)
        passes = []
        for b in range(args.batches):
            for src, dst in plan[b * per_batch:(b + 1) * per_batch]:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
            result, wall, _ = run_learn(db, state, logs)
            passes.append({**result, "wall_s": round(wall, 3)})
        again, wall_again, _ = run_learn(db, state, logs)
        imported = sum(p["imported"] for p in passes)
        read_s = sum(p["read_seconds"] for p in passes)
        total_s = sum(p["seconds"] for p in passes)
        out = {"logs": len(plan), "batches": args.batches, "imported": imported,
               "read_s_per_log": round(read_s / imported, 4) if imported else None,
               "pass_s_per_log": round(total_s / imported, 4) if imported else None,
               "passes": passes,
               "second_pass": {**again, "wall_s": round(wall_again, 3)}}
        print(json.dumps(out, indent=1))
        return 0 if again["imported"] == 0 and imported == len(plan) else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
