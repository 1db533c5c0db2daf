"""The demo's services as real processes: every one it starts, it stops (also on Ctrl-C or failure)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Services:
    """MDS + emulated cluster (from a description, one agent per OSS) + REST API on loopback."""

    def __init__(self, work: Path, db: str, description: dict):
        self.work, self.db = work, db
        self.description = work / "cluster-description.json"
        self.description.write_text(json.dumps(description, indent=1))
        self.oss_ids = [oss["id"] for oss in description["oss"]]
        self.n_osts = sum(len(oss["osts"]) for oss in description["oss"])
        self.mds_endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.api_port = free_port()
        self.status_file = work / "mds-status.json"
        self.cluster_root = work / "cluster"
        self.data = self.cluster_root / "data"
        self.procs: dict[str, subprocess.Popen] = {}
        self.token = "demo-" + os.urandom(8).hex()

    def _start(self, name: str, argv: list[str], env: dict | None = None) -> None:
        log = (self.work / f"{name}.log").open("ab")
        # own process group: Ctrl-C reaches the demo, which stops them in order
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            env={**os.environ, "IEZ_STATE_DIR": str(self.work / "state"),
                                                 **(env or {})})

    def start(self, timeout: float = 60) -> dict:
        from iez.emulate.cluster import ensure_keys

        iez = [sys.executable, "-m", "iez.cli"]
        # authenticated as on a real cluster: the MDS's key pair and one per OSS under the cluster root, made
        # before the MDS starts; `iez cluster emulate` finds them there and gives each agent its own
        keys = ensure_keys(self.cluster_root, self.oss_ids)
        # agents report every 2 s: three missed reports (6 s) on a machine this busy would be a false alarm at 1 s
        self._start("mds", iez + ["mds", "--db", self.db, "--bind", self.mds_endpoint, "--interval", "2",
                                  *keys.mds_options(),
                                  # the site's hardware (each server's bandwidth); loads it measures
                                  "--bandwidths", str(self.description),
                                  "--status-file", str(self.status_file),
                                  # the demo itself keeps this small machine busy: no resource gate here; and
                                  # the emulated OSSs all share this host, so their cpu readings are noise
                                  "--cpu-max", "100", "--mem-max", "100", "--oss-load-weight", "0"])
        self._wait(lambda: self.status_file.exists(), timeout, "the MDS to start")
        self._start("cluster", iez + ["cluster", "emulate", "--root", str(self.cluster_root), "--cluster",
                                      str(self.description), "--mds", self.mds_endpoint, "--interval", "2"])
        self._start("api", iez + ["api", "--db", self.db, "--port", str(self.api_port), "--log-level", "warning"],
                    env={"IEZ_API_TOKEN": self.token})
        osts, n_oss = self.n_osts, len(self.oss_ids)
        self._wait(lambda: len(self.status()["osses"]["fresh"]) == n_oss and self.status()["osts"] == osts,
                   timeout, f"{n_oss} agents to report {osts} OSTs")
        self._wait(self.api_ok, timeout, "the API")
        return self.status()

    def status(self) -> dict:
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return {"osses": {"fresh": [], "stale": []}, "osts": 0, "messages": {}, "allocation": {}}

    def api(self, path: str) -> dict | list:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}{path}", timeout=5) as r:
            return json.loads(r.read())

    def api_ok(self) -> bool:
        try:
            return self.api("/healthz") is not None
        except OSError:
            return False

    def _wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}; "
                                       f"see {self.work / (name + '.log')}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.1)

    def wait(self, predicate, timeout: float, what: str) -> None:
        self._wait(predicate, timeout, what)

    def stop(self) -> list[str]:
        """SIGTERM everything (the MDS finishes its step), then SIGKILL what lingers; returns problems."""
        problems = []
        for name in ("api", "cluster", "mds"):
            proc = self.procs.get(name)
            if proc and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                problems.append(f"{name} did not stop on SIGTERM: killed")
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        return problems
