"""An emulated 2 OSS x 4 OST cluster for the mover's tests, and `iez copy` run as a real process."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
XATTR = "user.iez.layout"


def emulated_cluster(tmp: Path, ost_mib_s: float = 40.0, oss_mib_s: float = 1000.0, loads=None) -> tuple[Path, Path]:
    """OSTs 0-3 on oss0 and 4-7 on oss1; returns (root, data directory)."""
    loads = loads or {}
    desc = {"oss": [{"id": f"oss{k}", "bandwidth_mib_s": oss_mib_s, "osts": [
        {"index": i, "kbytes_total": 1 << 26, "kbytes_avail": 1 << 26, "bandwidth_mib_s": ost_mib_s,
         "load_mib_s": loads.get(i, 0)} for i in range(4 * k, 4 * k + 4)]} for k in range(2)]}
    (tmp / "cluster.json").write_text(json.dumps(desc))
    root, data = tmp / "root", tmp / "data"
    done = subprocess.run([sys.executable, "-m", "iez.cli", "cluster", "emulate", "--cluster", str(tmp / "cluster.json"),
                           "--root", str(root), "--data", str(data), "--no-agents"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return root, data


def with_layout(path: Path, osts: list[int], size: int, stripe: int = MiB, random: bool = True) -> Path:
    """A source file of ``size`` bytes (random, or a sparse hole) striped over ``osts``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        if random:
            out.write(os.urandom(size))
        else:
            out.truncate(size)
    os.setxattr(path, XATTR, f"version=1 stripe_size={stripe} stripe_count={len(osts)} "
                             f"osts={','.join(map(str, osts))}".encode())
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def iez_copy(args: list[str], root: Path | None, timeout: float = 180, env: dict | None = None,
             **popen) -> subprocess.CompletedProcess:
    env = {**os.environ, "IEZ_STATE_DIR": str(root or "/tmp") + "-state", **(env or {})}
    env.pop("LD_PRELOAD", None)
    if root is not None:
        env["IEZ_EMULATE"] = str(root)
    return subprocess.run([sys.executable, "-m", "iez.cli", "copy", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


class LiveCluster:
    """The emulated cluster of :func:`emulated_cluster` with its agents reporting to a real ``iez mds`` (SQLite):
    the live view the mover reads is the MDS's, learnt from the emulated servers' counters."""

    def __init__(self, tmp: Path, ost_mib_s: float = 40.0, oss_mib_s: float = 1000.0):
        import socket

        from iez.config import database_url
        from iez.db.engine import make_engine
        from iez.db.schema import upgrade

        self.tmp, self.db, self.status_file = tmp, str(tmp / "live.db"), tmp / "mds-status.json"
        engine = make_engine(database_url(self.db))
        upgrade(engine)
        engine.dispose()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            endpoint = f"tcp://127.0.0.1:{s.getsockname()[1]}"
        desc = {"oss": [{"id": f"oss{k}", "bandwidth_mib_s": oss_mib_s, "osts": [
            {"index": i, "kbytes_total": 1 << 26, "kbytes_avail": 1 << 26, "bandwidth_mib_s": ost_mib_s}
            for i in range(4 * k, 4 * k + 4)]} for k in range(2)]}
        (tmp / "cluster.json").write_text(json.dumps(desc))
        self.root, self.data = tmp / "root", tmp / "data"
        env = {**os.environ, "IEZ_STATE_DIR": str(tmp / "mds-state")}
        env.pop("LD_PRELOAD", None)
        self.procs = [subprocess.Popen([sys.executable, "-m", "iez.cli", "mds", "--db", self.db, "--bind", endpoint,
                                        "--interval", "1", "--insecure", "--status-file", str(self.status_file),
                                        "--cpu-max", "100", "--mem-max", "100"], env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)]
        self.procs.append(subprocess.Popen([sys.executable, "-m", "iez.cli", "cluster", "emulate", "--cluster",
                                            str(tmp / "cluster.json"), "--root", str(self.root), "--data",
                                            str(self.data), "--mds", endpoint, "--interval", "1", "--insecure"],
                                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO))
        self.wait(lambda s: s.get("osts") == 8, "two agents reporting 8 OSTs")

    def status(self) -> dict:
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return {}

    def wait(self, predicate, what: str, timeout: float = 60) -> dict:
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if predicate(status):
                return status
            assert all(p.poll() is None for p in self.procs), f"the MDS or the emulation exited waiting for {what}"
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}: {self.status()}")

    def stored_load_mib_s(self, index: int) -> float:
        """OST ``index``'s live load as the MDS stored it for its readers (the mover among them)."""
        import sqlite3

        with sqlite3.connect(self.db) as conn:
            row = conn.execute("SELECT load_bytes_s FROM osts WHERE ost_index = ?", (index,)).fetchone()
        return (row[0] or 0.0) / MiB if row else 0.0

    def wait_for_load(self, index: int, mib_s: float, timeout: float = 60) -> None:
        """Until the MDS has stored at least ``mib_s`` for OST ``index`` (it stores reports in batches)."""
        import time

        deadline = time.monotonic() + timeout
        while self.stored_load_mib_s(index) < mib_s:
            assert time.monotonic() < deadline, f"the MDS never stored {mib_s} MiB/s for OST {index}"
            assert all(p.poll() is None for p in self.procs), "the MDS or the emulation exited"
            time.sleep(0.2)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
