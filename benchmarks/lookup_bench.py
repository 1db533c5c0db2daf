"""Lookup throughput of the REST API with 100,000 allocations stored, on SQLite and MariaDB.

    python benchmarks/lookup_bench.py [--backends sqlite,mariadb] [--allocations 100000] [--json]

For each backend it fills a fresh interaction DB, starts ``iez api`` on a free
loopback port and measures, for ``--seconds`` each:

- single lookups/s: ``GET /v1/allocations?path=...`` over ``--connections``
  keep-alive HTTP/1.1 connections (what many placement-library clients do);
- paths/s in batch: ``POST /v1/allocations/lookup`` with ``--batch`` paths a call.

The client is a minimal asyncio HTTP/1.1 client so that, on a small machine, the
measurement spends its CPU in the server rather than in the client library.
MariaDB comes from ``IEZ_BENCH_MYSQL_URL`` (default ``mysql://root@127.0.0.1:3306/iez_bench``);
that database is emptied.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Sequence

from sqlalchemy import create_engine, insert, inspect, text

from iez.config import ConfigError, database_url
from iez.db.engine import make_engine
from iez.db.models import AllocationRow, utcnow
from iez.db.schema import ensure_database, upgrade


def path_of(i: int) -> str:
    return f"/lustre/scratch/job{i // 1000:03d}/rank{i % 1000:04d}/out.h5"


def fill(db: str, count: int, pinned: Sequence[str] = ()) -> None:
    """An emptied DB at the current schema holding ``pinned`` paths and ``count`` others (also used by
    preload_latency.py)."""
    url = database_url(db)
    if url.get_backend_name() == "sqlite":
        Path(url.database).unlink(missing_ok=True)
    else:
        ensure_database(url)
        raw = create_engine(url)
        with raw.begin() as conn:
            conn.execute(text("SET FOREIGN_KEY_CHECKS=0"))
            for view in inspect(conn).get_view_names():
                conn.execute(text(f"DROP VIEW `{view}`"))
            for table in inspect(conn).get_table_names():
                conn.execute(text(f"DROP TABLE `{table}`"))
        raw.dispose()
    engine = make_engine(url)
    upgrade(engine)
    now = utcnow()
    paths = [*pinned, *(path_of(i) for i in range(count))]
    rows = [
        {"path": path, "stripe_size": 1048576, "stripe_count": 4,
         "osts": " ".join(str((i + k * 4) % 15) for k in range(4)), "policy": "iez", "state": "planned",
         "created": now}
        for i, path in enumerate(paths)
    ]
    with engine.begin() as conn:
        for start in range(0, len(rows), 10000):
            conn.execute(insert(AllocationRow), rows[start : start + 10000])
    engine.dispose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(db: str, workers: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "iez.cli", "api", "--db", db, "--port", str(port), "--workers", str(workers),
         "--log-level", "warning"],
        env={**os.environ, "IEZ_API_TOKEN": "bench"},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return proc, port
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"iez api exited with {proc.returncode}")
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit("iez api did not come up within 60 s")


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    return status, await reader.readexactly(length)


async def _client(port: int, make_request, seconds: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    deadline = time.perf_counter() + seconds
    try:
        while time.perf_counter() < deadline:
            request, expected_items = make_request()
            writer.write(request)
            status, body = await _read_response(reader)
            if status != 200:
                raise SystemExit(f"lookup answered {status}: {body[:200]!r}")
            counts.append(expected_items)
    finally:
        writer.close()


def run_load(port: int, make_request, seconds: float, connections: int) -> float:
    counts: list[int] = []

    async def main() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(_client(port, make_request, seconds, counts) for _ in range(connections)))
        return time.perf_counter() - start

    elapsed = asyncio.run(main())
    return sum(counts) / elapsed


def single_request(count: int):
    def make() -> tuple[bytes, int]:
        path = urllib.parse.quote(path_of(random.randrange(count)), safe="/")
        return (f"GET /v1/allocations?path={path} HTTP/1.1\r\nHost: bench\r\n\r\n").encode(), 1

    return make


def batch_request(count: int, batch: int):
    def make() -> tuple[bytes, int]:
        body = json.dumps({"paths": [path_of(random.randrange(count)) for _ in range(batch)]}).encode()
        head = (f"POST /v1/allocations/lookup HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        return head + body, batch

    return make


def mariadb_db() -> str:
    return os.environ.get("IEZ_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/iez_bench")


def bench(backend: str, args: argparse.Namespace, workdir: Path) -> dict:
    db = str(workdir / "bench.db") if backend == "sqlite" else mariadb_db()
    t0 = time.perf_counter()
    fill(db, args.allocations)
    fill_s = time.perf_counter() - t0
    proc, port = start_server(db, args.workers)
    try:
        run_load(port, single_request(args.allocations), 1.0, args.connections)  # warm-up
        single = run_load(port, single_request(args.allocations), args.seconds, args.connections)
        batch = run_load(port, batch_request(args.allocations, args.batch), args.seconds, max(2, args.connections // 4))
    finally:
        proc.terminate()
        proc.wait(10)
    return {"backend": backend, "allocations": args.allocations, "fill_s": round(fill_s, 1),
            "single_lookups_per_s": round(single), "batch_paths_per_s": round(batch),
            "connections": args.connections, "batch": args.batch, "workers": args.workers}


def main() -> int:
    from iez.progress import note  # a line per step on stderr

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,mariadb")
    parser.add_argument("--allocations", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if "mariadb" in args.backends.split(","):
        try:
            database_url(mariadb_db())  # one line naming the driver to install, not a traceback midway
        except ConfigError as err:
            parser.exit(2, f"{parser.prog}: error: {err}\n")
    results = []
    with tempfile.TemporaryDirectory(prefix="iez-bench-") as tmp:
        for backend in args.backends.split(","):
            note(f"lookups: {backend.strip()}", always=True)
            results.append(bench(backend.strip(), args, Path(tmp)))
            if not args.json:
                r = results[-1]
                print(f"{r['backend']:8s} {r['allocations']} allocations (filled in {r['fill_s']} s): "
                      f"{r['single_lookups_per_s']:>7} single lookups/s ({r['connections']} connections), "
                      f"{r['batch_paths_per_s']:>8} paths/s in batches of {r['batch']}", flush=True)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
