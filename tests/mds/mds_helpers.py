"""A real ``iez mds`` process on loopback, and a ZeroMQ PUB socket that talks to it like an agent."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq
from waiting import scaled  # noqa: E402

GiB_KB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stats(oss: str, seq: int, first_ost: int, count: int = 5, avail_kb: int = 8 * GiB_KB, interval: float = 1.0,
          written: int = 0) -> dict:
    return {"schema": "iez.oss-stats", "version": 1, "oss_id": oss, "seq": seq, "time": time.time(),
            "cpu_pct": 5.0, "mem_pct": 10.0, "interval_s": interval,
            "osts": [{"name": f"fs-OST{i:04x}", "index": i, "kbytes_total": 10 * GiB_KB, "kbytes_avail": avail_kb,
                      "read_bytes": 0, "write_bytes": written} for i in range(first_ost, first_ost + count)]}


class Mds:
    def __init__(self, db: str, tmp: Path, *extra: str, name: str = "mds"):
        self.db, self.tmp, self.extra = db, tmp, extra
        self.port = free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.status_file = tmp / f"{name}-status.json"
        self.log = tmp / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30) -> "Mds":
        self.status_file.unlink(missing_ok=True)
        env = {**os.environ, "IEZ_STATE_DIR": str(self.tmp / "state")}
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "iez.cli", "mds", "--db", self.db, "--bind", self.endpoint, "--interval", "1",
                 # the lease tests' arithmetic: heartbeat every second, stale after 3 (the default is interval/2)
                 *([] if "--lease-interval" in self.extra else ["--lease-interval", "1"]),
                 "--cpu-max", "100", "--mem-max", "100", "--status-file", str(self.status_file),
                 # without keys the MDS refuses to start: these tests that do not test ingest say so explicitly
                 *([] if "--curve-secret-key" in self.extra else ["--insecure"]), *self.extra],
                env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + scaled(timeout)
        while not self.status_file.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"iez mds exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError("iez mds did not come up")
            time.sleep(0.05)
        return self

    def status(self) -> dict:
        return json.loads(self.status_file.read_text())

    def wait(self, predicate, timeout: float = 15, what: str = "condition") -> dict:
        deadline = time.monotonic() + scaled(timeout)
        while True:
            try:
                status = self.status()
            except (OSError, ValueError):
                status = None
            if status is not None and predicate(status):
                return status
            assert self.proc.poll() is None, f"iez mds died: {self.log.read_text()[-2000:]}"
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; status {status}")
            time.sleep(0.1)

    def stop(self) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            return self.proc.wait(timeout=30)
        return self.proc.returncode if self.proc else 0


class Publisher:
    """What an agent does: a PUB socket that connects to the MDS."""

    def __init__(self, endpoint: str, curve: tuple[bytes, bytes, bytes] | None = None):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.SNDHWM, 0)  # never drop: the tests count exactly
        self.sock.setsockopt(zmq.LINGER, 2000)
        if curve:
            public, secret, server = curve
            self.sock.curve_publickey, self.sock.curve_secretkey, self.sock.curve_serverkey = public, secret, server
        self.sock.connect(endpoint)

    def send(self, message) -> None:
        self.sock.send(message if isinstance(message, bytes) else json.dumps(message).encode())

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


@pytest.fixture
def mds_factory(tmp_path):
    started: list[Mds] = []

    def make(db: str, *extra: str, name: str = "mds") -> Mds:
        mds = Mds(db, tmp_path, *extra, name=name)
        started.append(mds)
        return mds

    yield make
    for mds in started:
        mds.stop()


class ReportingAgent:
    """One OSS reporting through ``pub`` every ``every`` seconds, as its agent does, in a thread of its own
    from :meth:`start` until :meth:`stop` (safe to call whether or not it started)."""

    def __init__(self, pub: "Publisher", oss: str, count: int = 4, every: float = 0.3, first_seq: int = 1000):
        import threading

        self.pub, self.oss, self.count, self.every, self.seq = pub, oss, count, every, first_seq
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.seq += 1
            self.pub.send(stats(self.oss, self.seq, 0, count=self.count))
            self._stop.wait(self.every)

    def start(self) -> "ReportingAgent":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

