"""The SPANK plugin (issue 26, items 1 and 5) under a real one-node Slurm: slurmctld and slurmd (Debian's
slurm-wlm) with their own munged, config and state on loopback ports, started and stopped here by pid.

`srun --iez` of an application twice: the first run is traced (iez has no layouts for it), its requests are then
stored (what the end-of-job learning does) and the second run is placed from the map the plugin fetched with the
user's credential, with no change to the job; with the API down, the job's output and exit code are those of a
run without the plugin, and the plugin says why in one line."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "maps"))
from conftest import Munged, Server, fresh_db  # noqa: E402
from iez.maps import LayoutMap  # noqa: E402
from map_helpers import build_lib  # noqa: E402

PLUGIN = REPO / "placement_lib" / "build" / "spank_iez.so"
TOKEN = "slurm-user-" + "t" * 24
pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(not (shutil.which("slurmctld") and shutil.which("slurmd") and shutil.which("srun")),
                                 reason="Slurm (slurmctld, slurmd, slurm-client) is not installed")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Slurm:
    def __init__(self, plugstack: str):
        self.dir = Path(tempfile.mkdtemp(prefix="iez-slurm-"))
        os.chmod(self.dir, 0o755)
        self.munged = Munged()
        for sub in ("state", "spool", "log"):
            (self.dir / sub).mkdir()
        (self.dir / "plugstack.conf").write_text(plugstack + "\n")
        host = socket.gethostname()
        self.conf = self.dir / "slurm.conf"
        self.conf.write_text("\n".join([
            "ClusterName=ieztest", f"SlurmctldHost={host}({'127.0.0.1'})", f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}", "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge",
            f"AuthInfo=socket={self.munged.socket}", "CredType=cred/munge", f"StateSaveLocation={self.dir}/state",
            f"SlurmdSpoolDir={self.dir}/spool", f"SlurmctldPidFile={self.dir}/slurmctld.pid",
            f"SlurmdPidFile={self.dir}/slurmd.pid", f"SlurmctldLogFile={self.dir}/log/slurmctld.log",
            f"SlurmdLogFile={self.dir}/log/slurmd.log", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SwitchType=switch/none", "MpiDefault=none", "ReturnToService=2", "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres", "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
            f"PlugStackConfig={self.dir}/plugstack.conf",
            f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN",
            f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""]))
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs = [subprocess.Popen([daemon, "-D", "-f", str(self.conf)], env=env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL) for daemon in ("slurmctld", "slurmd")]
        deadline = time.monotonic() + 120  # a loaded machine: generous
        while time.monotonic() < deadline:
            assert all(p.poll() is None for p in self.procs), self.logs()
            done = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, timeout=60)
            if done.returncode == 0 and done.stdout.strip() in ("idle", "idle*"[:4]):
                return
            time.sleep(0.5)
        raise AssertionError("Slurm did not come up: " + self.logs())

    def logs(self) -> str:
        return "".join((p.read_text()[-2000:] if p.exists() else "") for p in (self.dir / "log").iterdir())

    def srun(self, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
        environ = {**os.environ, "SLURM_CONF": str(self.conf), **(env or {})}
        return subprocess.run(["srun", "-N1", "-n1", *argv], env=environ, capture_output=True, text=True, timeout=300)

    def stop(self) -> None:
        # the jobs' slurmstepd finish their steps with slurmd: wait for the queue to empty before stopping it
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and all(p.poll() is None for p in self.procs):
            done = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True, timeout=60)
            if done.returncode == 0 and not done.stdout.strip():
                break
            time.sleep(0.5)
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(30)
        self.munged.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spank")
    tokens = tmp / "tokens"
    tokens.write_text(f"root {TOKEN}\n")
    tokens.chmod(0o600)
    srv = Server(fresh_db("sqlite", tmp, "spank"), env={"IEZ_API_USER_TOKENS": str(tokens)})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def iez_wrapper(tmp_path_factory) -> Path:
    """The ``iez`` the plugin runs (the job's environment: this checkout, whatever the installed one is)."""
    path = tmp_path_factory.mktemp("bin") / "iez"
    path.write_text(f"#!/bin/sh\nexec {sys.executable} -m iez.cli \"$@\"\n")
    path.chmod(0o755)
    return path


def plugstack(wrapper: Path, lib: Path, api_url: str) -> str:
    return f"optional {PLUGIN} default=off iez={wrapper} lib={lib} api={api_url} timeout=30 mapdir=/tmp"


JOB = ("import os, sys\n"
       "print(os.environ.get('IEZ_MODE', '-'), os.environ.get('IEZ_APP', '-'), bool(os.environ.get('IEZ_MAP')))\n"
       "for f in sys.argv[1:]:\n"
       "    open(f, 'w').write('x')\n")


def test_srun_iez_traces_then_places_and_api_down_changes_nothing(api, iez_wrapper, tmp_path):
    lib = build_lib()
    assert PLUGIN.is_file(), "make -C placement_lib did not build the SPANK plugin (libslurm-dev missing?)"
    job = tmp_path / "writer"
    job.write_text(f"#!{sys.executable}\n" + JOB)
    job.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    files = [str(work / f"out.{i}") for i in range(3)]
    user_env = {"IEZ_API_USER_TOKEN": TOKEN, "IEZ_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO),
                "IEZ_DB": str(tmp_path / "none.db")}
    slurm = Slurm(plugstack(iez_wrapper, lib, api.url))
    try:
        first = slurm.srun("--iez", str(job), *files, env=user_env)
        assert first.returncode == 0, first.stderr + slurm.logs()
        assert first.stdout.split() == ["trace", "writer.root", "False"], first.stderr  # iez knows nothing: traced
        # the run is learnt (its requests stored under the plugin's name for it, <exe>.<user>) ...
        headers = {"Authorization": f"Bearer {TOKEN}"}
        body = {"app": "writer.root", "requests": [{"file": f, "write_bytes": 1 << 20, "stripe_count": 2, "rank": i}
                                                    for i, f in enumerate(files)]}
        assert httpx.post(api.url + "/v1/stats", timeout=30, headers={"Authorization": f"Bearer {api_token()}"},
                          json={"oss_id": "oss-spank", "seq": 1, "time": time.time(), "cpu_pct": 1.0, "mem_pct": 1.0,
                                "osts": [{"name": f"fs-OST{i:04x}", "index": i, "kbytes_total": 10 << 20,
                                          "kbytes_avail": 8 << 20} for i in range(4)]}).status_code < 300
        assert httpx.post(api.url + "/v1/requests", json=body, headers=headers, timeout=30).status_code == 201
        assert httpx.post(api.url + "/v1/allocate", json={"app": "writer.root"}, headers=headers,
                          timeout=30).status_code == 200
        for f in files:
            os.unlink(f)
        # ... and the second run, the same job script, is placed: every file gets its layout from the map
        second = slurm.srun("--iez", str(job), *files, env=user_env)
        assert second.returncode == 0, second.stderr + slurm.logs()
        assert second.stdout.split() == ["place", "writer.root", "True"]
        for f in files:
            assert "osts=" in os.getxattr(f, "user.iez.layout").decode()
    finally:
        slurm.stop()

    # the API down: the same output and exit code as without the plugin, and one line saying why
    down = Slurm(plugstack(iez_wrapper, lib, f"http://127.0.0.1:{free_port()}"))
    try:
        script = "echo out; echo err >&2; exit 3"
        plain = down.srun("--iez=off", "sh", "-c", script, env=user_env)
        placed = down.srun("--iez", "sh", "-c", script, env=user_env)
        assert plain.returncode == placed.returncode and plain.stdout == placed.stdout == "out\n"
        extra = [line for line in placed.stderr.splitlines() if "iez:" in line]
        assert len(extra) == 1 and "unplaced" in extra[0], placed.stderr
        # the rest of stderr is the same lines (srun's and the job's interleave in either order)
        assert sorted(line for line in placed.stderr.splitlines() if "iez:" not in line) == \
            sorted(plain.stderr.splitlines())
    finally:
        down.stop()


def api_token() -> str:
    from conftest import API_TOKEN

    return API_TOKEN
