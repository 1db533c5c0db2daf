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

The run with the least CPU over --rounds is reported, its user and system seconds apart, with the
extra CPU per file over plain. Run it on a tmpfs outside the prefixes libiez never places in
(so not /dev/shm: e.g. `mount -t tmpfs tmpfs /mnt/t` then --dir /mnt/t): on a disk file system (ext4 under a VM
here) the kernel's create cost alone moved from 3.4 s to 9 s of system time for the same 10,000
plain creates, which buries what the library adds; on tmpfs the base is the library's own work.
Needs placement_lib built (make -C placement_lib).
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


def run_tar(archive: Path, dest: Path, env: dict) -> tuple[float, float, float]:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir()
    start = time.monotonic()
    proc = subprocess.Popen(["tar", "-xf", str(archive), "-C", str(dest)], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"tar failed ({status}) with {env.get('LD_PRELOAD')}")
    return usage.ru_utime, usage.ru_stime, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--map-entries", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dir", default=None, help="where to work (default: a new tmp directory)")
    parser.add_argument("--against-lib", default=None, metavar="LIBIEZ",
                        help="another build of libiez.so (e.g. an older commit's) measured in the same rounds, "
                             "each mode with it named 'MODE@against'")
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
        if args.against_lib:
            other = str(Path(args.against_lib).resolve())
            for name in [n for n in modes if n != "plain"]:
                modes[f"{name}@against"] = {**modes[name], "LD_PRELOAD": other}
        best: dict[str, tuple[float, float, float]] = {}
        placed: dict[str, str] = {}
        for _ in range(args.rounds):
            for name, env in modes.items():
                user, system, wall = run_tar(archive, dest, env)
                if name not in best or user + system < sum(best[name][:2]):
                    best[name] = (user, system, wall)
                if name.startswith("full-map"):
                    files = list((dest / "d00").iterdir())
                    placed[name] = f"{sum(1 for f in files if _has_layout(f))} of {len(files)}"
        print(f"tar -xf of {args.files} files; full map {args.map_entries} entries "
              f"({full_map.stat().st_size / 1e6:.0f} MB, built in {map_s:.1f} s); rounds {args.rounds}")
        plain_user, plain_sys, _ = best["plain"]
        print(f"work directory {work} ({_fs_type(work)})")
        print(f"{'mode':<22}{'user s':>8}{'sys s':>8}{'cpu s':>8}{'wall s':>8}{'cpu ratio':>11}"
              f"{'extra cpu/file':>16}")
        for name, (user, system, wall) in best.items():
            cpu = user + system
            extra_us = (cpu - plain_user - plain_sys) / args.files * 1e6
            print(f"{name:<22}{user:>8.2f}{system:>8.2f}{cpu:>8.2f}{wall:>8.2f}"
                  f"{cpu / (plain_user + plain_sys):>10.2f}x{extra_us:>13.1f} us")
        for name, count in placed.items():
            print(f"{name} run: {count} files of d00 placed")
        if any(count.startswith("0 ") for count in placed.values()):
            print(f"NOTE: nothing was placed: {work} is under a prefix libiez never places in "
                  "(/dev, /run, /proc, ...: placement_lib/src/config.c); use a tmpfs mounted elsewhere")
            return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _fs_type(path: Path) -> str:
    """The file system under `path` (from /proc/self/mounts), since its create cost sets the base."""
    best, kind = "", "unknown"
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and str(path).startswith(fields[1]) and len(fields[1]) > len(best):
                best, kind = fields[1], fields[2]
    except OSError:
        pass
    return kind


def _has_layout(path: Path) -> bool:
    try:
        os.getxattr(path, "user.iez.layout")
        return True
    except OSError:
        return False


if __name__ == "__main__":
    raise SystemExit(main())
