"""The file inventory against its targets (issue 24, item 4): changelog ingest, a 10 M-file plan, inventory vs walk.

    python benchmarks/inventory_bench.py [--quick] [--mysql mysql://root@127.0.0.1:3306/iez_bench_inv] [--json]

1. **Ingest** (target >= 50,000 records/s, SQLite and MariaDB): a real tree of ``--ingest`` files (each with an
   emulated layout), 10 % then renamed and 10 % unlinked; their changelog (CREAT, SATTR, CLOSE per file, RENME,
   UNLNK) in Lustre's text format is applied by the consumer (:mod:`iez.inventory.consumer`, batches of 100,000
   records, each file looked at once per batch: ``lstat`` and its layout; the lines parsed ahead by a child
   process) into each database. To compare with older code in the same conditions (a shared, noisy machine):
   ``--against /tmp/base`` (a ``git worktree add /tmp/base COMMIT`` checkout) runs ``--rounds`` pairs, each
   ingest in a process of its own, this checkout and that one in turn (which goes first alternates), on one
   tree, and prints records/s, the ratio, the load average and the CPU seconds of the ingesting process, its
   parsing child and mysqld (where ``/proc`` shows it).
2. **10 M-file plan** (target <= 60 s, <= 4 GiB): ``--synthetic`` files (80 % one stripe, 20 % 2-4, 64 KiB-64
   MiB, about 4 MiB on average) over 100 OSTs filled 20-90 %, generated straight into a SQLite inventory; a
   separate process then plans from it (per-OST totals in SQL, candidates only, :mod:`iez.inventory.source`)
   and reports its wall time and peak RSS (``getrusage``), with the plan's bytes moved against the lower bound.
3. **Inventory vs walk**: an emulated cluster holding ``--tree`` files (sparse: only logical sizes count),
   planned from a walk and from the seeded inventory (greedy only, ``improve_s=0``, so both are deterministic):
   the same bytes moved; the seconds of each, and of the seeding scan.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import text  # noqa: E402

from iez.config import Settings, database_url  # noqa: E402
from iez.db import open_db  # noqa: E402
from iez.db.engine import make_engine  # noqa: E402
from iez.db.schema import ensure_database, upgrade  # noqa: E402
from iez.inventory.changelog import LAST_LINK, ZERO_FID, Record, fid_of_inode  # noqa: E402
from iez.layout import emulated  # noqa: E402
from iez.layout.model import Layout  # noqa: E402
from iez.model import raid0_bytes  # noqa: E402

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
STAMP = "12:00:00.000000000 2026.11.26"


def fresh(db: str) -> str:
    """An empty database at the current schema (a MariaDB one dropped and made anew)."""
    url = database_url(db)
    if url.get_backend_name() != "sqlite":
        from sqlalchemy import create_engine, text

        server = create_engine(url.set(database=""))
        with server.begin() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{url.database}`"))
        server.dispose()
    ensure_database(url)
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    return db


# -- 1. ingest -------------------------------------------------------------------------------------------------------


def ingest_tree(top: Path, files: int, seed: int = 0) -> tuple[Path, list[str]]:
    """A tree of ``files`` files with layouts, 10 % renamed and 10 % unlinked after; its changelog lines."""
    rng = random.Random(seed)
    data = top / "data"
    data.mkdir(parents=True)
    root_fid = fid_of_inode(os.stat(data).st_ino)
    lines, n = [], 0
    dirs = []
    for d in range(max(1, files // 1000)):
        path = data / f"d{d}"
        path.mkdir()
        fid = fid_of_inode(os.stat(path).st_ino)
        dirs.append((path, fid))
        n += 1
        lines.append(Record(n, "MKDIR", 0, fid, STAMP, root_fid, f"d{d}").to_line())
    made = []
    name = emulated.xattr_name()
    for k in range(files):
        path, dfid = dirs[k % len(dirs)]
        f = path / f"f{k}"
        with open(f, "wb") as handle:
            os.setxattr(handle.fileno(), name, emulated.format_attr(Layout(MiB, (k % 16,))).encode())
            handle.truncate(rng.randint(0, 8 * MiB))
        fid = fid_of_inode(os.stat(f).st_ino)
        made.append((f, fid, dfid))
        for kind in ("CREAT", "SATTR", "CLOSE"):
            n += 1
            lines.append(Record(n, kind, 0, fid, STAMP, *((dfid, f.name) if kind == "CREAT" else (None, None)))
                         .to_line())
    for f, fid, dfid in rng.sample(made, len(made) // 5)[: len(made) // 10]:
        new = f.with_name(f.name + ".r")
        os.rename(f, new)
        n += 1
        lines.append(Record(n, "RENME", 0, ZERO_FID, STAMP, dfid, new.name, fid, dfid, f.name).to_line())
    for f, fid, dfid in made[::10]:
        if f.exists():
            os.unlink(f)
            n += 1
            lines.append(Record(n, "UNLNK", LAST_LINK, fid, STAMP, dfid, f.name).to_line())
    return data, lines


HELD_ROOT = "/lustre/held"


def hold(engine, files: int, seed: int = 1) -> float:
    """``files`` files of another root (``/lustre/held``: 1,000 files a directory, 1-4 stripe objects each)
    written into the inventory before an ingest, as a site's inventory holds the rest of its file system; the
    seconds it took (not part of the ingest's)."""
    from sqlalchemy import insert

    from iez.inventory.store import ensure_root, transaction
    from iez.inventory.tables import InvDir, InvFile, InvObject

    rng = random.Random(seed)
    started = time.monotonic()
    with transaction(engine) as conn:
        root_id, _ = ensure_root(conn, HELD_ROOT, "0x200000009:0x1:0x0")
        ndirs = max(1, files // 1000)
        dirs = [{"fid": "0x200000009:0x1:0x0", "parent": None, "name": HELD_ROOT, "root_id": root_id, "gen": 1}]
        dirs += [{"fid": f"0x20000000a:{d:#x}:0x0", "parent": "0x200000009:0x1:0x0", "name": f"d{d}",
                  "root_id": root_id, "gen": 1} for d in range(ndirs)]
        conn.execute(insert(InvDir), dirs)
    step = 20_000
    for first in range(0, files, step):
        rows, objects = [], []
        for n in range(first, min(files, first + step)):
            count = 1 if rng.random() < 0.8 else rng.randint(2, 4)
            size = rng.randint(0, 64 * MiB)
            osts = rng.sample(range(OSTS), count)
            fid = f"0x20000000b:{rng.getrandbits(32):#x}:{n:#x}"  # keys in no order: a file system's history
            rows.append({"fid": fid, "parent": f"0x20000000a:{n % ndirs:#x}:0x0", "name": f"f{n}",
                         "root_id": root_id, "size": size,
                         "layout": f"version=1 stripe_size={MiB} stripe_count={count} osts={','.join(map(str, osts))}",
                         "uid": 1000, "gid": 1000, "mode": 0o100644, "nlink": 1, "ino": n + 1, "mtime_ns": 0,
                         "ctime_ns": 0, "atime_ns": 0, "stale": 0, "gen": 1})
            objects += [{"fid": fid, "seq": seq, "ost": j, "bytes": b}
                        for seq, (j, b) in enumerate(zip(osts, raid0_bytes(size, MiB, count)))]
        with transaction(engine) as conn:
            conn.execute(insert(InvFile), rows)
            conn.execute(insert(InvObject), objects)
    return time.monotonic() - started


def ingest(db: str, data: Path, lines: list[str], top: Path, held: int = 0) -> dict:
    from iez.inventory.consumer import Consumer
    from iez.inventory.readers import EmulatedChangelog
    from iez.inventory.store import put_dirs, transaction

    engine = open_db(Settings.from_env(db=db, env={}))
    held_s = hold(engine, held) if held else 0.0
    log = top / f"changelog.{os.getpid()}.{random.random()}"
    log.write_text("\n".join(lines) + "\n")
    # the root alone is known before (an empty tree seeded), as after `iez inventory scan` of an empty directory
    from iez.inventory.store import ensure_root, finish_root

    with transaction(engine) as conn:
        root_id, gen = ensure_root(conn, str(data), fid_of_inode(os.stat(data).st_ino))
        put_dirs(conn, [{"fid": fid_of_inode(os.stat(data).st_ino), "parent": None, "name": str(data),
                         "root_id": root_id, "gen": gen}])
        finish_root(conn, root_id, gen, 0.0)
    consumer = Consumer(engine, EmulatedChangelog(log, "cl1"), "bench-MDT0000", "cl1", [str(data)])
    report = consumer.run_once()
    # a rate counts only if the inventory then holds the tree: every file, under its name, at its size
    # (and the files held before, untouched)
    with engine.connect() as conn:
        stored = {(name, size) for name, size in conn.execute(
            text("SELECT name, size FROM inv_files WHERE root_id = :r"), {"r": root_id})}
        kept = conn.execute(text("SELECT count(*) FROM inv_files WHERE root_id <> :r"), {"r": root_id}).scalar()
    engine.dispose()
    log.unlink()
    on_disk = {(p.name, p.stat().st_size) for p in data.rglob("*") if p.is_file()}
    if stored != on_disk:
        raise SystemExit(f"inventory_bench: after the ingest into {db} the inventory does not hold the tree "
                         f"{data}: {len(on_disk - stored)} files missing or at another size, "
                         f"{len(stored - on_disk)} rows not on disk")
    if kept != held:
        raise SystemExit(f"inventory_bench: the ingest into {db} left {kept} of the {held} files held before")
    return {"records": report.records, "seconds": round(report.seconds, 2),
            "records_per_s": round(report.records / report.seconds), "files_written": report.files_written,
            "files_checked": len(on_disk), "held": held, "held_s": round(held_s, 1)}


PAIR_CHILD = r"""
import importlib.util, json, os, resource, sys
from pathlib import Path
src, db, top = sys.argv[1], sys.argv[2], Path(sys.argv[3])
spec = importlib.util.spec_from_file_location("bench", f"{src}/benchmarks/inventory_bench.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
lines = (top / "lines.txt").read_text().splitlines()
bench.fresh(db)
def server():
    try:
        pid = Path("/run/mysqld/mysqld.pid").read_text().split()[0]
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None
def cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime
m0, s0, c0 = server(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
out = bench.ingest(db, top / "data", lines, top)
m1 = server()
out.update(cpu_s=round(cpu(resource.RUSAGE_SELF) - s0, 2), child_cpu_s=round(cpu(resource.RUSAGE_CHILDREN) - c0, 2),
           mysqld_cpu_s=None if m0 is None or m1 is None or db.endswith(".db") else round(m1 - m0, 2))
print(json.dumps(out))
"""


def pairs(top: Path, files: int, against: str, rounds: int, mysql: str) -> list[dict]:
    """``rounds`` pairs of ingests (this checkout and ``against``, in turn) of one tree, into SQLite and MariaDB."""
    data, lines = ingest_tree(top, files)
    (top / "lines.txt").write_text("\n".join(lines))
    here = str(Path(__file__).resolve().parents[1])
    out = []
    for n in range(rounds):
        order = [("this", here), ("before", against)]
        order = order if n % 2 == 0 else order[::-1]
        for backend, db in [("sqlite", str(top / "pair.db"))] + ([] if mysql == "none" else [("mariadb", mysql)]):
            row: dict = {"round": n + 1, "backend": backend, "first": order[0][0]}
            for name, src in order:
                for old in top.glob("pair.db*"):  # fresh() makes a MariaDB database anew, not a SQLite file
                    old.unlink()
                load = os.getloadavg()[0]
                done = subprocess.run([sys.executable, "-c", PAIR_CHILD, src, db, str(top)], capture_output=True,
                                      text=True, check=True)
                row[name] = {**json.loads(done.stdout.splitlines()[-1]), "load": round(load, 1)}
            row["ratio"] = round(row["this"]["records_per_s"] / row["before"]["records_per_s"], 3)
            print(f"pair {n + 1} {backend}: {row['this']['records_per_s']} vs {row['before']['records_per_s']} "
                  f"records/s ({row['ratio']}x), load {row['this']['load']}/{row['before']['load']}; CPU s "
                  f"(self/child/mysqld) {row['this']['cpu_s']}/{row['this']['child_cpu_s']}/"
                  f"{row['this']['mysqld_cpu_s']} vs {row['before']['cpu_s']}/{row['before']['child_cpu_s']}/"
                  f"{row['before']['mysqld_cpu_s']}", flush=True)
            out.append(row)
    per100k(out)
    return out


def per100k(rows: list[dict]) -> None:
    """The pairs' medians: records/s and CPU seconds per 100,000 records of each process (the ingesting one, its
    parsing child, mysqld), this checkout against the other (process CPU is steadier than wall time on a shared
    machine)."""
    from statistics import median

    for backend in sorted({r["backend"] for r in rows}):
        mine = [r for r in rows if r["backend"] == backend]
        line = []
        for name in ("this", "before"):
            def cpu(key: str) -> str:
                got = [r[name][key] / r[name]["records"] * 1e5 for r in mine if r[name].get(key) is not None]
                return f"{median(got):.2f}" if got else "-"

            line.append(f"{median(r[name]['records_per_s'] for r in mine):,.0f} records/s, CPU s per 100k records "
                        f"{cpu('cpu_s')}/{cpu('child_cpu_s')}/{cpu('mysqld_cpu_s')}")
        print(f"median of {len(mine)} {backend} pairs (self/child/mysqld): {line[0]} vs {line[1]}", flush=True)


# -- 2. the 10 M-file inventory --------------------------------------------------------------------------------------

OSTS = 100


def synthesize(db: str, files: int, seed: int = 0) -> dict:
    """``files`` files straight into a SQLite inventory (bulk: indexes built after); the cluster it fills."""
    rng = random.Random(seed)
    started = time.monotonic()
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("PRAGMA cache_size=-1048576")  # 1 GiB of pages while loading
    for index in ("ix_inv_objects_ost_bytes", "ix_inv_files_parent", "ix_inv_files_root", "ix_inv_files_stale"):
        con.execute(f"DROP INDEX IF EXISTS {index}")
    root = "/lustre/bench"
    con.execute("INSERT INTO inv_roots (id, path_hash, path, fid, generation, scanned, scan_s) VALUES "
                "(1, 'x', ?, '0x200000007:0x1:0x0', 1, '2026-11-26 12:00:00', 0)", (root,))
    ndirs = max(1, files // 10000)
    con.execute("PRAGMA cache_size=-1048576")
    con.executemany("INSERT INTO inv_dirs VALUES (?, ?, ?, 1, 1)",
                    [("0x200000007:0x1:0x0", None, root, )] + [(f"0x200000008:{d:#x}:0x0", "0x200000007:0x1:0x0",
                                                                  f"d{d}") for d in range(ndirs)])
    weights = [rng.uniform(0.2, 0.9) for _ in range(OSTS)]
    cum, total = [], 0.0
    for w in weights:
        total += w
        cum.append(total)
    per_ost = [0] * OSTS
    batch_f, batch_o = [], []
    layouts: dict[tuple, str] = {}
    for n in range(files):
        count = 1 if rng.random() < 0.8 else rng.randint(2, 4)
        size = int(min(64 * MiB, max(64 * KiB, rng.expovariate(1 / (4 * MiB)))))
        first = rng.choices(range(OSTS), cum_weights=cum)[0]
        osts = (first,) + tuple(j for j in rng.sample(range(OSTS), count + 1) if j != first)[: count - 1]
        text = layouts.get(osts)
        if text is None:
            text = layouts[osts] = f"version=1 stripe_size={MiB} stripe_count={count} osts={','.join(map(str, osts))}"
        fid = f"0x200000400:0x{n:08x}:0x0"  # zero-padded: rows arrive in key order (a bulk load, not a changelog)
        batch_f.append((fid, f"0x200000008:{n % ndirs:#x}:0x0", f"f{n}", 1, size, text, 0, 0, 0o100644, 1, n + 100,
                        0, 0, 0, 0, 1))
        for seq, (j, b) in enumerate(zip(osts, raid0_bytes(size, MiB, count))):
            batch_o.append((fid, seq, j, b))
            per_ost[j] += b
        if len(batch_f) >= 200_000:
            con.executemany("INSERT INTO inv_files VALUES (" + ",".join("?" * 16) + ")", batch_f)
            con.executemany("INSERT INTO inv_objects VALUES (?, ?, ?, ?)", batch_o)
            con.commit()
            batch_f, batch_o = [], []
    con.executemany("INSERT INTO inv_files VALUES (" + ",".join("?" * 16) + ")", batch_f)
    con.executemany("INSERT INTO inv_objects VALUES (?, ?, ?, ?)", batch_o)
    con.commit()
    loaded = time.monotonic() - started
    con.execute("CREATE INDEX ix_inv_objects_ost_bytes ON inv_objects (ost, bytes)")
    con.execute("CREATE INDEX ix_inv_files_parent ON inv_files (parent)")
    con.execute("CREATE INDEX ix_inv_files_root ON inv_files (root_id)")
    con.execute("CREATE INDEX ix_inv_files_stale ON inv_files (stale)")
    con.commit()
    con.execute("ANALYZE")
    con.close()
    # capacities: each OST filled to its weight (20-90 %), 5 % of it held by what is not in the inventory
    cap = [max(1, int(per_ost[j] / (weights[j] * 0.95))) for j in range(OSTS)]
    return {"files": files, "generated_s": round(loaded, 1), "indexed_s": round(time.monotonic() - started - loaded, 1),
            "capacity": cap, "base": [int(0.05 * weights[j] * cap[j]) for j in range(OSTS)], "root": root}


PLAN_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
spec = json.loads(sys.argv[2])
t0 = time.monotonic()
from iez.config import Settings
from iez.inventory import source
from iez.inventory.source import files_from_store
if spec.get("max_candidates"):
    source.MAX_CANDIDATES = spec["max_candidates"]
from iez.rebalance.inventory import Inventory
from iez.rebalance.plan import Ost
from iez.rebalance.pools import build
cap, base = spec["capacity"], spec["base"]
capacity = {j: c for j, c in enumerate(cap)}
files, per_ost, fixed, problems = files_from_store(
    Settings.from_env(db=spec["db"], env={}), set(capacity), [spec["root"]], capacity=capacity,
    used=lambda per: {j: base[j] + per.get(j, 0) for j in capacity}, pools={}, usable=set(capacity))
loaded = time.monotonic() - t0
osts = [Ost(j, cap[j], base[j] + per_ost.get(j, 0)) for j in capacity]
plan = build(Inventory(osts, files, {}, 0.95, fixed, problems, {}), 0.10, improve_s=spec["improve_s"])
done = time.monotonic() - t0
d = plan.domains[0]
print(json.dumps({"seconds": round(done, 1), "load_s": round(loaded, 1), "candidates": len(files),
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                  "bytes_moved": sum(m.bytes for m in plan.moves), "files_moved": len(plan.moves),
                  "lower_bound": d.lower_bound, "spread_before": round(d.spread_before, 4),
                  "spread_after": round(d.spread_after, 4), "reached": plan.reached}))
"""


def respec(db: str, seed: int = 0) -> dict:
    """The spec :func:`synthesize` returned, again, from its database (the same seed draws the same fills)."""
    rng = random.Random(seed)
    weights = [rng.uniform(0.2, 0.9) for _ in range(OSTS)]
    con = sqlite3.connect(db)
    per_ost = dict(con.execute("SELECT ost, SUM(bytes) FROM inv_objects GROUP BY ost").fetchall())
    files = con.execute("SELECT count(*) FROM inv_files").fetchone()[0]
    con.close()
    cap = [max(1, int(per_ost.get(j, 0) / (weights[j] * 0.95))) for j in range(OSTS)]
    return {"files": files, "capacity": cap, "base": [int(0.05 * weights[j] * cap[j]) for j in range(OSTS)],
            "root": "/lustre/bench"}


def plan_10m(db: str, spec: dict, improve_s: float, max_candidates: int | None = None) -> dict:
    arg = json.dumps({**{k: spec[k] for k in ("capacity", "base", "root")}, "db": db, "improve_s": improve_s,
                      "max_candidates": max_candidates})
    done = subprocess.run([sys.executable, "-c", PLAN_CHILD, str(Path(__file__).resolve().parents[1]), arg],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the planning process failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


# -- 3. inventory vs walk --------------------------------------------------------------------------------------------


def tree_cluster(top: Path, files: int, seed: int = 0) -> Path:
    """An emulated cluster of 16 OSTs filled 15-85 % by ``files`` sparse files with emulated layouts."""
    from iez.emulate.cluster import create, layout_from_description

    rng = random.Random(seed)
    top.mkdir(parents=True, exist_ok=True)
    sizes = [rng.randint(64 * KiB, 2 * MiB) for _ in range(files)]
    want = [0.15 + 0.7 * j / 15 for j in range(16)]
    per = [0] * 16
    plan = []
    for k, size in enumerate(sizes):
        j = rng.choices(range(16), weights=want)[0]
        osts = (j,) if rng.random() < 0.8 else (j, rng.choice([i for i in range(16) if i != j]))
        plan.append((k, size, osts))
        for o, b in zip(osts, raid0_bytes(size, 64 * KiB, len(osts))):
            per[o] += b
    kb = [max(per[j] // 1024 + 1, int(per[j] / want[j] / 1024)) for j in range(16)]
    desc = {"fill_cap": 0.95, "oss": [{"id": f"oss{k}", "bandwidth_mib_s": 400, "osts": [
        {"index": j, "kbytes_total": kb[j], "kbytes_avail": kb[j], "bandwidth_mib_s": 200}
        for j in range(4 * k, 4 * k + 4)]} for k in range(4)]}
    (top / "desc.json").write_text(json.dumps(desc))
    root = top / "root"
    create(layout_from_description(root, [str(root / "data")], top / "desc.json"))
    name = emulated.xattr_name()
    data = root / "data"
    for k, size, osts in plan:
        d = data / f"d{k % 300}"
        if k < 300:
            d.mkdir()
        with open(d / f"f{k}", "wb") as handle:
            os.setxattr(handle.fileno(), name, emulated.format_attr(Layout(64 * KiB, osts)).encode())
            handle.truncate(size)
    return root


def inventory_vs_walk(top: Path, files: int, db: str) -> dict:
    from iez.inventory.scan import scan
    from iez.rebalance.inventory import from_cluster
    from iez.rebalance.pools import build

    t = time.monotonic()
    root = tree_cluster(top, files)
    made = time.monotonic() - t
    os.environ["IEZ_DB"] = db
    os.environ["IEZ_INVENTORY"] = "off"
    t = time.monotonic()
    walked = from_cluster(str(root))
    walk_plan = build(walked, 0.10, improve_s=0)
    walk_s = time.monotonic() - t
    del os.environ["IEZ_INVENTORY"]
    engine = open_db(Settings.from_env(db=db, env={}))
    t = time.monotonic()
    seeded = scan(engine, [str(root / "data")])
    scan_s = time.monotonic() - t
    t = time.monotonic()
    stored = from_cluster(str(root))
    store_plan = build(stored, 0.10, improve_s=0)
    store_s = time.monotonic() - t
    from iez.inventory import source

    keep = source.FULL_LOAD_FILES
    source.FULL_LOAD_FILES = 0
    t = time.monotonic()
    partial = from_cluster(str(root))
    partial_plan = build(partial, 0.10, improve_s=0)
    partial_s = time.monotonic() - t
    source.FULL_LOAD_FILES = keep
    engine.dispose()
    assert stored.source["inventory"] == "store" and walked.source["inventory"] == "walk"
    return {"files": files, "tree_made_s": round(made, 1), "scan_s": round(scan_s, 1), "scanned": seeded.files,
            "walk": {"seconds": round(walk_s, 1), "bytes_moved": sum(m.bytes for m in walk_plan.moves),
                     "files_moved": len(walk_plan.moves), "reached": walk_plan.reached},
            "inventory": {"seconds": round(store_s, 1), "bytes_moved": sum(m.bytes for m in store_plan.moves),
                          "files_moved": len(store_plan.moves), "reached": store_plan.reached},
            "inventory_candidates_only": {"seconds": round(partial_s, 1), "candidates": len(partial.files),
                                          "bytes_moved": sum(m.bytes for m in partial_plan.moves),
                                          "reached": partial_plan.reached},
            "same_plan": [(m.file.path, m.to) for m in walk_plan.moves] == [(m.file.path, m.to)
                                                                            for m in store_plan.moves]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: seconds, not minutes")
    parser.add_argument("--ingest", type=int, help="files of the ingest tree (default 100,000; quick 5,000)")
    parser.add_argument("--synthetic", type=int, help="files of the synthetic inventory (default 10,000,000)")
    parser.add_argument("--tree", type=int, help="files of the inventory-vs-walk tree (default 300,000)")
    parser.add_argument("--improve-s", type=float, default=2.0, help="the 10 M plan's improvement budget per pool")
    parser.add_argument("--mysql", default=os.environ.get("IEZ_BENCH_MYSQL", "mysql://root@127.0.0.1:3306/iez_bench_inv"),
                        help="the MariaDB database to ingest into (dropped and made anew); 'none' to skip")
    parser.add_argument("--skip", action="append", default=[], choices=("ingest", "synthetic", "tree"))
    parser.add_argument("--held", type=int, default=0,
                        help="files (of another root) the inventory holds before each ingest (default 0)")
    parser.add_argument("--dir", help="scratch directory (default: a new one under /tmp); kept afterwards")
    parser.add_argument("--replan", action="store_true",
                        help="plan again from the synthetic inventory a run with --dir left there (no generation)")
    parser.add_argument("--max-candidates", type=int, help="files a large inventory's plan loads at most")
    parser.add_argument("--against", metavar="CHECKOUT",
                        help="ingest pairs only: this checkout and CHECKOUT's (a git worktree of older code) in turn")
    parser.add_argument("--rounds", type=int, default=4, help="pairs for --against (default 4)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object at the end")
    args = parser.parse_args()
    n_ingest = args.ingest or (5_000 if args.quick else 100_000)
    n_synth = args.synthetic or (200_000 if args.quick else 10_000_000)
    n_tree = args.tree or (10_000 if args.quick else 300_000)
    if args.held < 0 or (args.held and args.against):
        print(f"inventory_bench: --held {args.held}: "
              f"{'not taken with --against' if args.held > 0 else 'a count of files, 0 or more'}", file=sys.stderr)
        return 2
    if args.dir:
        # the trees a run makes under --dir (the synthetic database is made anew, or reread with --replan)
        made = ["pairs"] if args.against else [part for part in ("ingest", "tree") if part not in args.skip]
        left = [part for part in made if (Path(args.dir) / part).exists()]
        if left:
            print(f"inventory_bench: --dir {args.dir} holds {', '.join(left)} from an earlier run; "
                  f"give an empty directory or remove {Path(args.dir) / left[0]}", file=sys.stderr)
            return 2
    top = Path(args.dir or tempfile.mkdtemp(prefix="iez-inventory-bench-"))
    top.mkdir(parents=True, exist_ok=True)
    out: dict = {}
    try:
        if args.against:
            out["pairs"] = pairs(top / "pairs", n_ingest, args.against, args.rounds, args.mysql)
            args.skip += ["ingest", "synthetic", "tree"]
        if "ingest" not in args.skip:
            data, lines = ingest_tree(top / "ingest", n_ingest)
            out["ingest"] = {}
            backends = [("sqlite", str(top / "ingest.db"))] + ([] if args.mysql == "none" else [("mariadb", args.mysql)])
            for name, db in backends:
                out["ingest"][name] = ingest(fresh(db), data, lines, top, args.held)
                r = out["ingest"][name]
                held = f" (the inventory holding {args.held:,} files before, {r['held_s']} s to write)" if args.held else ""
                print(f"ingest into {name}: {r['records']} records in {r['seconds']} s = {r['records_per_s']} "
                      f"records/s (target 50,000){held}", flush=True)
        if "synthetic" not in args.skip:
            if args.replan:
                db = str(top / "synthetic.db")
                if not Path(db).is_file():
                    print(f"inventory_bench: --replan needs {db}, which a run with --dir {top} leaves; "
                          f"it is not there", file=sys.stderr)
                    return 2
                spec = respec(db)
                n_synth = spec["files"]
            else:
                db = fresh(str(top / "synthetic.db"))
                spec = synthesize(db, n_synth)
                print(f"synthetic inventory: {n_synth} files generated in {spec['generated_s']} s, indexed in "
                      f"{spec['indexed_s']} s", flush=True)
            r = out["synthetic_plan"] = {"files": n_synth, **plan_10m(db, spec, args.improve_s, args.max_candidates)}
            print(f"plan from the {n_synth}-file inventory: {r['seconds']} s (loading {r['load_s']} s, "
                  f"{r['candidates']} candidates), peak RSS {r['peak_rss_mib']} MiB (targets 60 s, 4096 MiB); "
                  f"spread {r['spread_before']} -> {r['spread_after']}, {r['bytes_moved']} bytes moved "
                  f"({r['bytes_moved'] / max(1, r['lower_bound']):.4f} x the lower bound)", flush=True)
        if "tree" not in args.skip:
            r = out["inventory_vs_walk"] = inventory_vs_walk(top / "tree", n_tree, fresh(str(top / "tree.db")))
            print(f"{n_tree}-file tree (made in {r['tree_made_s']} s): plan from a walk {r['walk']['seconds']} s, "
                  f"{r['walk']['bytes_moved']} bytes; seeding scan {r['scan_s']} s; plan from the inventory "
                  f"{r['inventory']['seconds']} s, {r['inventory']['bytes_moved']} bytes; same plan: {r['same_plan']}; "
                  f"candidates only: {r['inventory_candidates_only']['candidates']} files, "
                  f"{r['inventory_candidates_only']['bytes_moved']} bytes in {r['inventory_candidates_only']['seconds']} s",
                  flush=True)
    finally:
        if not args.dir:
            shutil.rmtree(top, ignore_errors=True)
    out["bench_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
