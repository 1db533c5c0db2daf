"""CPU cost of libiez for `tar -xf` of many small files (issue 31 item 8).

    python benchmarks/preload_tar.py [--files 100000] [--map-entries 1000000] [--rounds 1]

Makes a tar of --files one-byte files in 100 directories, then extracts it in a fresh directory
(on the benchmark's tmp directory, tmpfs or disk) plainly and under libiez in each mode, and prints
the CPU time (user + system of the tar process, from wait4) and its ratio to the plain run:

- ``off``: the library loaded, IEZ_MODE=off;
- ``empty-map``: IEZ_MAP naming a map with no entries (every create a miss);
- ``empty-sqlite``: IEZ_DB naming a migrated, empty SQLite DB (every create a miss);
- ``full-map``: IEZ_MAP naming a map of --map-entries entries that holds every extracted file
  (every create placed: an open plus an fsetxattr).

The minimum over --rounds is reported. Needs placement_lib built (make -C placement_lib).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from iez.maps import MapEntry, write_map  # noqa: E402

LIB = REPO / "placement_lib" / "build" / "libiez.so"


def run_tar(archive: Path, dest: Path, env: dict) -> tuple[float, float]:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir()
    start = time.monotonic()
    proc = subprocess.Popen(["tar", "-xf", str(archive), "-C", str(dest)], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"tar failed ({status}) with {env.get('LD_PRELOAD')}")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--map-entries", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dir", default=None, help="where to work (default: a new tmp directory)")
    args = parser.parse_args()
    if not LIB.is_file():
        raise SystemExit(f"{LIB} missing: make -C placement_lib")
    work = Path(tempfile.mkdtemp(prefix="iez-tar-", dir=args.dir))
    try:
        src = work / "src"
        for i in range(args.files):
            d = src / f"d{i % 100:02d}"
            if i < 100:
                d.mkdir(parents=True)
            (d / f"f{i:07d}").write_bytes(b"x")
        archive = work / "files.tar"
        subprocess.run(["tar", "-cf", str(archive), "-C", str(src), "."], check=True)
        shutil.rmtree(src)
        dest = work / "out"
        state = work / "state"
        state.mkdir()
        empty_map = work / "empty.map"
        write_map(empty_map, "bench", [])
        t0 = time.monotonic()
        entries = [MapEntry(str(dest / f"d{i % 100:02d}" / f"f{i:07d}"), 1 << 20, 1, str(i % 8))
                   for i in range(args.files)]
        entries += [MapEntry(f"/elsewhere/{k:08d}", 1 << 20, 1, str(k % 8))
                    for k in range(max(0, args.map_entries - args.files))]
        full_map = work / "full.map"
        write_map(full_map, "bench", entries)
        map_s = time.monotonic() - t0
        del entries
        sqlite_db = work / "empty.db"
        from iez.config import database_url
        from iez.db.engine import make_engine
        from iez.db.schema import upgrade
        engine = make_engine(database_url(str(sqlite_db)))
        upgrade(engine)
        engine.dispose()
        base = {k: v for k, v in os.environ.items() if not k.startswith("IEZ_") and k != "LD_PRELOAD"}
        lib = {"LD_PRELOAD": str(LIB), "IEZ_STATE_DIR": str(state)}
        modes = {
            "plain": base,
            "off": {**base, **lib, "IEZ_MODE": "off"},
            "empty-map": {**base, **lib, "IEZ_MAP": str(empty_map), "IEZ_DB": str(work / "none.db")},
            "empty-sqlite": {**base, **lib, "IEZ_DB": str(sqlite_db)},
            "full-map": {**base, **lib, "IEZ_MAP": str(full_map)},
        }
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.rounds):
            for name, env in modes.items():
                cpu, wall = run_tar(archive, dest, env)
                if name not in best or cpu < best[name][0]:
                    best[name] = (cpu, wall)
        placed = sum(1 for p in (dest / "d00").iterdir() if _has_layout(p))
        print(f"tar -xf of {args.files} files; full map {args.map_entries} entries "
              f"({full_map.stat().st_size / 1e6:.0f} MB, built in {map_s:.1f} s); rounds {args.rounds}")
        plain = best["plain"][0]
        print(f"{'mode':<14}{'cpu s':>8}{'wall s':>8}{'cpu ratio':>11}")
        for name, (cpu, wall) in best.items():
            print(f"{name:<14}{cpu:>8.2f}{wall:>8.2f}{cpu / plain:>10.2f}x")
        print(f"full-map run: {placed} of {len(list((dest / 'd00').iterdir()))} files of d00 placed")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _has_layout(path: Path) -> bool:
    try:
        os.getxattr(path, "user.iez.layout")
        return True
    except OSError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
