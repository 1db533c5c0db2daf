"""Which format for layout maps: CDB or LMDB, measured on the same 1,000,000 layouts.

    python benchmarks/map_format.py [--entries 1000000] [--lookups 2000000] [--json]

For each format: the time to build the map from Python (iez.maps.write_map for CDB; the ``lmdb``
package, one write transaction with sorted appends, for LMDB), its size on disk, and the latency of a
lookup from C (``placement_lib/bench/map_probe.c``: random paths of the map, mean and median of
batches). The LMDB side needs ``liblmdb-dev`` and ``pip install lmdb``, which iez itself does not:
this is the measurement behind the choice (iez/maps.py), not a product dependency.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from iez.maps import MapEntry, encode_value, write_map  # noqa: E402

LIB = ROOT / "placement_lib"


def entries(n: int) -> list[MapEntry]:
    """Plain layouts of 4 stripes on 64 OSTs, like a large file-per-process job's."""
    rng = random.Random(1)
    return [MapEntry(f"/lustre/scratch/job-4711/out/rank{i // 64:05d}/part.{i:07d}", 4 << 20, 4,
                     " ".join(str(o) for o in rng.sample(range(64), 4)), None, "") for i in range(n)]


def probe_exe(tmp: Path) -> Path:
    exe = tmp / "map_probe"
    srcs = [str(p) for p in sorted((LIB / "src").glob("*.c")) if p.name not in ("intercept.c", "mpi.c")]
    subprocess.run(["gcc", "-O2", "-D_GNU_SOURCE", "-DIEZ_HAVE_SQLITE", "-DWITH_LMDB", f"-I{LIB / 'src'}", "-o",
                    str(exe), str(LIB / "bench" / "map_probe.c"), *srcs, "-lsqlite3", "-llmdb", "-ldl", "-lpthread"],
                   check=True)
    return exe


def main() -> int:
    from iez.progress import note  # a line per step on stderr

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=2_000_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import lmdb  # the measurement's own dependency

    tmp = Path(tempfile.mkdtemp(prefix="iez-mapfmt-"))
    try:
        note("map format: building the C probe", always=True)
        exe = probe_exe(tmp)
        note(f"map format: {args.entries:,} entries", always=True)
        rows = entries(args.entries)
        (tmp / "paths").write_text("\n".join(e.path for e in rows[::max(1, len(rows) // 100_000)]) + "\n")
        results = []

        note("map format: cdb build and lookups", always=True)
        t = time.perf_counter()
        info = write_map(tmp / "layouts.cdb", "bench", rows)
        cdb_build = time.perf_counter() - t
        probe = json.loads(subprocess.run([str(exe), "cdb", str(tmp / "layouts.cdb"), str(tmp / "paths"),
                                           str(args.lookups)], check=True, capture_output=True, text=True).stdout)
        results.append({"format": "cdb", "build_s": round(cdb_build, 2), "bytes": info["bytes"], **probe})

        note("map format: lmdb build and lookups", always=True)
        t = time.perf_counter()
        items = sorted((e.path.encode(), encode_value(e)) for e in rows)
        env = lmdb.open(str(tmp / "layouts.lmdb"), map_size=1 << 34, subdir=True, lock=False)
        with env.begin(write=True) as txn:
            cursor = txn.cursor()
            cursor.putmulti(items, append=True)
        env.sync(True)
        env.close()
        lmdb_build = time.perf_counter() - t
        size = sum(p.stat().st_size for p in (tmp / "layouts.lmdb").iterdir())
        probe = json.loads(subprocess.run([str(exe), "lmdb", str(tmp / "layouts.lmdb"), str(tmp / "paths"),
                                           str(args.lookups)], check=True, capture_output=True, text=True).stdout)
        results.append({"format": "lmdb", "build_s": round(lmdb_build, 2), "bytes": size, **probe})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{args.entries} entries, {args.lookups} lookups from C")
    print(f"{'format':<6} {'build':>8} {'size':>10} {'lookup mean':>12} {'p50':>7} {'p99':>7} {'load':>9}")
    for r in results:
        print(f"{r['format']:<6} {r['build_s']:>7.2f}s {r['bytes'] / 2**20:>8.1f}MB {r['ns_per_lookup']:>10.0f}ns "
              f"{r['p50_ns']:>5}ns {r['p99_ns']:>5}ns {r['load_us']:>7.0f}us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
