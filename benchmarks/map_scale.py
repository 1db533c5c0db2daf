"""1,024 ranks creating one file each: layouts from a map (IEZ_MAP) against direct MariaDB lookups.

    python benchmarks/map_scale.py [--ranks 1024] [--others 100000] [--rounds 3] [--json]

A fork-based launcher (``placement_lib/tests/apps/rank_launch.c``) starts every rank at once, as mpirun
does; each rank is a fresh exec (it loads libiez and maps the layouts by itself) and creates one file with
a stored layout, among ``--others`` other allocations. Three runs of the same launch, each round:

- ``plain``: without the library;
- ``lib-off``: the library loaded with ``IEZ_MODE=off`` (what loading it costs each process: its own and its
  DB clients' shared objects), for scale;
- ``map``: ``IEZ_MAP`` (exported from the DB, ``iez.maps``) with ``IEZ_DB`` naming the real MariaDB;
- ``mariadb``: ``IEZ_DB`` alone, every rank looking its layout up on the server.

For each: wall time (first fork to last exit; median over rounds), files placed (their emulated layout
attribute is the stored one), and MariaDB's ``Threads_connected`` before and at most during the run and
its ``Connections`` counter's growth (connection attempts; other clients of the server count too).
MariaDB comes from ``IEZ_BENCH_MYSQL_URL`` (default ``mysql://root@127.0.0.1:3306/iez_bench_maps``),
emptied and filled.
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lookup_bench import fill  # noqa: E402

from iez.config import database_url  # noqa: E402
from iez.db.engine import make_engine  # noqa: E402
from iez.maps import export_map  # noqa: E402

LIB = ROOT / "placement_lib" / "build" / "libiez.so"


def server_status(url) -> dict[str, int]:
    from sqlalchemy import create_engine, text

    engine = create_engine(url.set(database=""), connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SHOW GLOBAL STATUS WHERE Variable_name IN "
                                     "('Threads_connected', 'Connections', 'Max_used_connections')"))
            return {name: int(value) for name, value in rows}
    finally:
        engine.dispose()


class Watcher:
    """Samples Threads_connected every 20 ms while a run goes on (the highest value seen)."""

    def __init__(self, url):
        from sqlalchemy import create_engine, text

        self.engine = create_engine(url.set(database=""))
        self.conn = self.engine.connect()
        self.query = text("SHOW GLOBAL STATUS LIKE 'Threads_connected'")
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, int(self.conn.execute(self.query).first()[1]))
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.conn.close()
        self.engine.dispose()


def launch(exe: Path, ranks: int, out: Path, env: dict) -> tuple[float, int, str]:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    proc = subprocess.run([str(exe), str(ranks), str(out)], env=env, capture_output=True, text=True, timeout=600)
    fields = proc.stdout.split()
    if len(fields) < 6 or fields[0] != "ranks":
        raise SystemExit(f"rank_launch failed: {proc.stdout} {proc.stderr[:500]}")
    return float(fields[5]), int(fields[3]), proc.stderr


def placed(out: Path, ranks: int) -> int:
    n = 0
    for i in range(ranks):
        try:
            n += os.getxattr(out / f"rank.{i}", "user.iez.layout").startswith(b"version=1 stripe_size=1048576")
        except OSError:
            pass
    return n


def main() -> int:
    from iez.progress import note  # a line per step on stderr

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--others", type=int, default=100_000, help="other allocations in the DB and the map")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    mariadb = os.environ.get("IEZ_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/iez_bench_maps")
    url = database_url(mariadb)

    subprocess.run(["make", "-s", "-C", str(ROOT / "placement_lib")], check=True, stdout=subprocess.DEVNULL)
    tmp = Path(tempfile.mkdtemp(prefix="iez-mapscale-", dir="/dev/shm"))
    try:
        exe = tmp / "rank_launch"
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(ROOT / "placement_lib" / "tests" / "apps" / "rank_launch.c")],
                       check=True)
        out = tmp / "out"
        fill(mariadb, args.others, [str(out / f"rank.{i}") for i in range(args.ranks)])
        engine = make_engine(url)
        info = export_map(engine, "ranks", tmp / "job.cdb", pinned=True)  # the pinned rows: every layout
        engine.dispose()
        base = {k: v for k, v in os.environ.items() if not k.startswith("IEZ_") and k != "LD_PRELOAD"}
        lib = {**base, "LD_PRELOAD": str(LIB), "IEZ_INCLUDE": str(out), "IEZ_STATE_DIR": str(tmp / "state")}
        cases = {"plain": base, "lib-off": {**lib, "IEZ_MODE": "off"},
                 "map": {**lib, "IEZ_MAP": info["path"], "IEZ_DB": mariadb},
                 "mariadb": {**lib, "IEZ_DB": mariadb}}
        results = {name: {"case": name, "ranks": args.ranks, "seconds": [], "placed": [], "ok": [],
                          "threads_connected_before": [], "threads_connected_peak": [], "connections_opened": []}
                   for name in cases}
        for r in range(args.rounds):
            order = list(cases) if r % 2 == 0 else list(cases)[::-1]
            for name in order:
                note(f"map scale: round {r + 1}/{args.rounds}, {name}", always=True)
                before = server_status(url)
                with Watcher(url) as watcher:
                    seconds, ok, _ = launch(exe, args.ranks, out, cases[name])
                after = server_status(url)
                res = results[name]
                res["seconds"].append(seconds)
                res["ok"].append(ok)
                res["placed"].append(placed(out, args.ranks) if name in ("map", "mariadb") else 0)
                res["threads_connected_before"].append(before["Threads_connected"])
                res["threads_connected_peak"].append(watcher.peak)
                # the watcher's and the second status query's own connections are two of them
                res["connections_opened"].append(after["Connections"] - before["Connections"] - 2)
                time.sleep(1)  # let the server close what the ranks left
        for res in results.values():
            res["median_s"] = statistics.median(res["seconds"])
        results["map"]["map_entries"], results["map"]["map_bytes"] = info["entries"], info["bytes"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = list(results.values())
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{args.ranks} ranks (fork + exec), each creating one file with a stored layout among {args.others} "
          f"others; {args.rounds} rounds; MariaDB {url.render_as_string(hide_password=True)}")
    print(f"{'case':<8} {'median wall':>11} {'placed':>14} {'Threads_connected before/peak':>30} "
          f"{'connections opened':>19}")
    for r in rows:
        print(f"{r['case']:<8} {r['median_s']:>10.3f}s {'/'.join(map(str, r['placed'])):>14} "
              f"{'/'.join(map(str, r['threads_connected_before'])) + ' / ' + '/'.join(map(str, r['threads_connected_peak'])):>30} "
              f"{'/'.join(map(str, r['connections_opened'])):>19}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
