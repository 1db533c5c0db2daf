"""The MDS under load: ingest rate, CPU at a realistic reporting rate, and allocation latency.

    python benchmarks/mds_bench.py [--messages 50000] [--cpu-window 120] [--requests 10000] [--json]

Each part runs a real ``iez mds`` process on a fresh SQLite DB and talks to
it over ZeroMQ on loopback, as agents do:

1. ingest: ``--messages`` agent messages (8 OSTs each, 1,000 OSS ids) sent as
   fast as one PUB socket can; messages/s accepted *and stored* by the MDS
   (target >= 10,000/s: 1,000 OSS at a 1 s interval with headroom), once with
   the default time-series interval (60 s: live rows from every message, one
   series row per OSS a minute) and once storing every message in the series;
2. cpu: 1,000 OSS reporting every 60 s, spread evenly, for ``--cpu-window``
   seconds; the MDS process's CPU time over wall time (target < 1 %);
3. allocation: 1,000 OSTs known (125 OSS x 8), then a batch of ``--requests``
   write requests committed at once; seconds until all their allocations are
   stored (the MDS looks for new requests every second).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import zmq
from sqlalchemy import func, select

from iez.config import database_url
from iez.db.engine import make_engine, read, write_session
from iez.db.models import AllocationRow
from iez.db.requests import RequestIn, upsert_requests

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def message(oss: int, seq: int, osts_per_oss: int = 8, avail_kb: int = 8 << 30 >> 10) -> bytes:
    return json.dumps({
        "schema": "iez.oss-stats", "version": 1, "oss_id": f"oss{oss:04d}", "seq": seq, "time": time.time(),
        "cpu_pct": 12.5, "mem_pct": 40.0, "interval_s": 60.0,
        "osts": [{"name": f"fs-OST{oss * osts_per_oss + k:04x}", "index": oss * osts_per_oss + k,
                  "kbytes_total": 16 << 30 >> 10, "kbytes_avail": avail_kb, "read_bytes": seq * 4096,
                  "write_bytes": seq * 8192} for k in range(osts_per_oss)],
    }).encode()


class Mds:
    def __init__(self, tmp: Path, *extra: str):
        self.db = str(tmp / "bench.db")
        subprocess.run([sys.executable, "-m", "iez.cli", "db", "upgrade", "--db", self.db], check=True,
                       stdout=subprocess.DEVNULL)  # iez mds serves an existing DB only
        self.status_file = tmp / "status.json"
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "iez.cli", "mds", "--db", self.db, "--bind", self.endpoint, "--status-file",
             str(self.status_file), "--cpu-max", "100", "--mem-max", "100", "--log-level", "warning",
             "--insecure", *extra],  # measures decoding and storing, not CURVE
            env={**os.environ, "IEZ_STATE_DIR": str(tmp)})
        deadline = time.monotonic() + 60
        while not self.status_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("iez mds did not start")
            time.sleep(0.05)

    def status(self) -> dict:
        return json.loads(self.status_file.read_text())

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def publisher(endpoint: str) -> tuple[zmq.Context, zmq.Socket]:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.LINGER, 5000)
    sock.connect(endpoint)
    return ctx, sock


def warm_up(mds: Mds, sock: zmq.Socket, oss: int = 0) -> int:
    seq = 0
    while mds.status()["messages"]["accepted"] == 0:
        seq += 1
        sock.send(message(oss, seq))
        time.sleep(0.1)
    time.sleep(1.2)
    return seq


def ingest(tmp: Path, count: int, series_interval: float = 60.0) -> dict:
    mds = Mds(tmp, "--series-interval", str(series_interval))
    ctx, sock = publisher(mds.endpoint)
    try:
        base_seq = warm_up(mds, sock) + 1
        base = mds.status()["messages"]["stored"]
        frames = [message(i % 1000, base_seq + i // 1000) for i in range(count)]
        start = time.perf_counter()
        for frame in frames:
            sock.send(frame)
        sent = time.perf_counter() - start
        while mds.status()["messages"]["stored"] < base + count:
            if time.perf_counter() - start > 600:
                raise SystemExit(f"only {mds.status()['messages']['stored'] - base} of {count} stored")
            time.sleep(0.02)
        elapsed = time.perf_counter() - start
        dropped = sum(mds.status()["messages"]["dropped"].values())
    finally:
        sock.close()
        ctx.term()
        mds.stop()
    return {"part": "ingest", "series_interval_s": series_interval, "messages": count, "osts_per_message": 8,
            "send_s": round(sent, 3),
            "seconds": round(elapsed, 3), "messages_per_s": round(count / elapsed), "dropped": dropped,
            "target_per_s": 10_000}


def cpu(tmp: Path, window: float, osses: int = 1000, interval: float = 60.0) -> dict:
    mds = Mds(tmp)
    ctx, sock = publisher(mds.endpoint)
    try:
        warm_up(mds, sock, oss=osses + 1)
        cpu0, t0 = mds.cpu_seconds(), time.monotonic()
        gap = interval / osses
        n = 0
        while time.monotonic() - t0 < window:
            sock.send(message(n % osses, 1 + n // osses))
            n += 1
            time.sleep(max(0.0, t0 + n * gap - time.monotonic()))
        used, wall = mds.cpu_seconds() - cpu0, time.monotonic() - t0
        stored = mds.status()["messages"]["stored"]
    finally:
        sock.close()
        ctx.term()
        mds.stop()
    return {"part": "cpu", "osses": osses, "interval_s": interval, "window_s": round(wall, 1), "messages": n,
            "stored": stored, "cpu_s": round(used, 3), "cpu_pct": round(100 * used / wall, 3), "target_pct": 1.0}


def allocation(tmp: Path, requests: int, osses: int = 125, per_oss: int = 8) -> dict:
    mds = Mds(tmp, "--interval", "60")
    ctx, sock = publisher(mds.endpoint)
    try:
        seq = warm_up(mds, sock) + 1
        for k in range(osses):
            sock.send(message(k, seq, per_oss, avail_kb=12 << 30 >> 10))
        while mds.status()["osts"] < osses * per_oss or mds.status()["messages"]["stored"] < osses:
            time.sleep(0.05)
        engine = make_engine(database_url(mds.db))
        batch = [RequestIn(f"/lustre/job/rank{i:06d}.dat", 64 << 20, 4, rank=i) for i in range(requests)]
        with write_session(engine) as s:
            upsert_requests(s, "bench", batch)
        start = time.perf_counter()
        while True:
            done = read(engine, lambda c: c.scalar(select(func.count()).select_from(AllocationRow)))
            if done >= requests:
                break
            if time.perf_counter() - start > 600:
                raise SystemExit(f"only {done} of {requests} allocated")
            time.sleep(0.05)
        elapsed = time.perf_counter() - start
        engine.dispose()
    finally:
        sock.close()
        ctx.term()
        mds.stop()
    return {"part": "allocation", "osts": osses * per_oss, "requests": requests, "seconds": round(elapsed, 3),
            "note": "includes up to 1 s until the MDS's next look for new requests"}


def main() -> int:
    from iez.progress import note  # a line per step on stderr

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--cpu-window", type=float, default=120.0)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--parts", default="ingest,cpu,allocation")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    for part in args.parts.split(","):
        note(f"mds: {part}", always=True)
        with tempfile.TemporaryDirectory(prefix=f"iez-mds-{part}-") as tmp:
            if part == "ingest":
                results.append(ingest(Path(tmp), args.messages))
                if not args.json:
                    print(json.dumps(results[-1]), flush=True)
                with tempfile.TemporaryDirectory(prefix="iez-mds-ingest-all-") as every:
                    results.append(ingest(Path(every), args.messages, series_interval=0.0))
            elif part == "cpu":
                results.append(cpu(Path(tmp), args.cpu_window))
            elif part == "allocation":
                results.append(allocation(Path(tmp), args.requests))
            else:
                raise SystemExit(f"unknown part {part!r}")
        if not args.json:
            print(json.dumps(results[-1]), flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
