"""The SPANK plugin (issue 26, items 1 and 5) under a real one-node Slurm: slurmctld and slurmd (Debian's
slurm-wlm) with their own munged, config and state on loopback ports, started and stopped here by pid.

`srun --iez` of an application twice: the first run is traced (iez has no layouts for it) and learnt at the step's
end by the plugin's detached learner (through the API, as the user), and the second run is placed from the map
the plugin fetched with the user's credential, with no change to the job; with the API down, the job's output and exit code are those of a
run without the plugin, and the plugin says why in one line."""

from __future__ import annotations

import json
import os
import re
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
from waiting import wait_for  # noqa: E402

PLUGIN = REPO / "placement_lib" / "build" / "spank_iez.so"
TOKEN = "slurm-user-" + "t" * 24
OTHER_TOKEN = "slurm-other-" + "o" * 24  # another user, bob
pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(not (shutil.which("slurmctld") and shutil.which("slurmd") and shutil.which("srun")),
                                 reason="Slurm (slurmctld, slurmd, slurm-client) is not installed"), pytest.mark.slow]


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

    def srun(self, *argv: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
        environ = {**os.environ, "SLURM_CONF": str(self.conf), **(env or {})}
        if cwd is not None:
            environ["PWD"] = str(cwd)
        return subprocess.run(["srun", "-N1", "-n1", *argv], env=environ, capture_output=True, text=True, timeout=300,
                              cwd=cwd)

    def sbatch(self, script: Path, output: Path, env: dict | None = None) -> subprocess.CompletedProcess:
        """``sbatch --wait``: returns when the job has ended, with the job's exit code."""
        environ = {**os.environ, "SLURM_CONF": str(self.conf), **(env or {}), "PWD": str(script.parent)}
        return subprocess.run(["sbatch", "--wait", f"--output={output}", str(script)], env=environ,
                              capture_output=True, text=True, timeout=300, cwd=script.parent)

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
    tokens.write_text(f"root {TOKEN}\nbob {OTHER_TOKEN}\n")
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


def plugstack(wrapper: Path, lib: Path, api_url: str, mapdir: Path) -> str:
    mapdir.mkdir(mode=0o1777, exist_ok=True)
    return f"optional {PLUGIN} default=off iez={wrapper} lib={lib} api={api_url} timeout=30 mapdir={mapdir}"


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
    mapdir = tmp_path / "mapdir"
    slurm = Slurm(plugstack(iez_wrapper, lib, api.url, mapdir))
    try:
        report_osts(api)
        first = slurm.srun("--iez", str(job), *files, env=user_env, cwd=work)
        assert first.returncode == 0, first.stderr + slurm.logs()
        assert first.stdout.split() == ["trace", "writer.root", "False"], first.stderr  # iez knows nothing: traced
        # at the step's end the plugin's learner (detached, as the user, through the API) learns the traced run
        # under the plugin's name for it (<exe>.<user>) and has it allocated: nobody posts anything by hand
        headers = {"Authorization": f"Bearer {TOKEN}"}
        deadline, entries = time.monotonic() + 300, 0  # a fit and an allocation on a loaded machine: generous
        while time.monotonic() < deadline:
            got = httpx.get(api.url + "/v1/apps/writer.root/map", headers=headers, timeout=30)
            if got.status_code == 200:
                (tmp_path / "learnt.cdb").write_bytes(got.content)
                entries = LayoutMap(str(tmp_path / "learnt.cdb")).entries
                if entries == len(files):
                    break
            if not learner_running(mapdir) and list(mapdir.glob("iez-trace.*.log")) and time.monotonic() > deadline - 290:
                break  # the learner ended without storing them: its log says why
            time.sleep(1)
        logs = "".join(p.read_text() for p in mapdir.glob("iez-trace.*.log"))
        assert entries == len(files), f"the first run was not learnt: {logs}"
        # the map is served before the learner has removed its trace and written its last line: wait for its end
        wait_for(lambda: not learner_running(mapdir), 120, "the plugin's learner to end")
        logs = "".join(p.read_text() for p in mapdir.glob("iez-trace.*.log"))
        assert '"allocated": 3' in logs and not [d for d in mapdir.glob("iez-trace.*") if d.is_dir()], logs
        for f in files:
            os.unlink(f)
        # ... and the second run, the same job script, is placed: every file gets its layout from the map
        second = slurm.srun("--iez", str(job), *files, env=user_env, cwd=work)
        assert second.returncode == 0, second.stderr + slurm.logs()
        assert second.stdout.split() == ["place", "writer.root", "True"]
        for f in files:
            assert "osts=" in os.getxattr(f, "user.iez.layout").decode()
        # another user naming that application gets no map of it: the API answers as if it did not exist, so
        # the job is traced (as bob's own first run), never placed with root's layouts
        others = [str(work / f"bob.{i}") for i in range(3)]
        theirs = slurm.srun("--iez", str(job), *others,
                            env={**user_env, "IEZ_API_USER_TOKEN": OTHER_TOKEN, "IEZ_APP": "writer.root"}, cwd=work)
        assert theirs.returncode == 0, theirs.stderr + slurm.logs()
        assert theirs.stdout.split() == ["trace", "writer.root", "False"], theirs.stderr
    finally:
        slurm.stop()

    # the API down: the same output and exit code as without the plugin, and one line saying why
    down = Slurm(plugstack(iez_wrapper, lib, f"http://127.0.0.1:{free_port()}", mapdir))
    try:
        script = "echo out; echo err >&2; exit 3"
        plain = down.srun("--iez=off", "sh", "-c", script, env=user_env)
        placed = down.srun("--iez", "sh", "-c", script, env=user_env)
        assert plain.returncode == placed.returncode and plain.stdout == placed.stdout == "out\n"
        extra = [line for line in placed.stderr.splitlines() if "iez:" in line]
        assert len(extra) == 1 and "unplaced" in extra[0], placed.stderr
        # the rest of stderr is the same lines (srun's and the job's interleave in either order), but for srun's
        # own queueing notes, which depend on whether the node was still finishing the previous job
        def job_lines(text: str) -> list[str]:
            return sorted(line for line in text.splitlines() if "iez:" not in line
                          and not re.match(r"srun: job \d+ (queued and waiting for|has been allocated) resources", line))

        assert job_lines(placed.stderr) == job_lines(plain.stderr)
    finally:
        down.stop()


STATIC = r"""
#include <stdio.h>
int main(int argc, char **argv) { FILE *f = fopen(argv[1], "w"); if (!f) return 1; fputs("x", f); fclose(f);
                                  puts("static ran"); return 0; }
"""
SITE_RULE = {"components": [{"end": 64 << 20, "stripe_count": 1}, {"end": 4 << 30, "stripe_count": 4},
                            {"end": -1, "stripe_count": -1}]}


def default_of(directory: Path) -> list | None:
    """The directory's default layout's components as (end, stripe_count), None without one."""
    done = subprocess.run([sys.executable, "-m", "iez.cli", "layout", "show", str(directory), "--json"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return None
    return [(c["end"], c["stripe_count"]) for c in json.loads(done.stdout)["components"]]


def test_static_binaries_and_unlearnt_applications_get_the_sites_directory_default(api, iez_wrapper, tmp_path):
    """Item 4: a static executable (LD_PRELOAD cannot reach it) runs untouched and unpreloaded, its working
    directory given the site's default layout (dirdefault=, a size-based PFL rule; OSTs left to Lustre); an
    application iez has not learnt yet gets the same while it is traced; a directory with a default keeps it."""
    lib = build_lib()
    source = tmp_path / "static.c"
    source.write_text(STATIC)
    static = tmp_path / "static-writer"
    subprocess.run(["gcc", "-static", "-O1", "-o", str(static), str(source)], check=True, timeout=300)
    rule = tmp_path / "site-default.json"
    rule.write_text(json.dumps(SITE_RULE))
    want = [(64 << 20, 1), (4 << 30, 4), (-1, -1)]
    mapdir = tmp_path / "mapdir"
    slurm = Slurm(plugstack(iez_wrapper, lib, api.url, mapdir) + f" dirdefault={rule}")
    user_env = {"IEZ_API_USER_TOKEN": TOKEN, "IEZ_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO)}
    try:
        fresh, chosen, learning = (tmp_path / name for name in ("fresh", "chosen", "learning"))
        for d in (fresh, chosen, learning):
            d.mkdir()
        ran = slurm.srun("--iez", str(static), "out", env=user_env, cwd=fresh)
        assert ran.returncode == 0 and ran.stdout == "static ran\n", ran.stderr + slurm.logs()
        assert default_of(fresh) == want and (fresh / "out").read_text() == "x"
        assert not list(mapdir.glob("iez-trace.*")), "a static executable cannot be traced: nothing to learn"
        subprocess.run([sys.executable, "-m", "iez.cli", "layout", "set-default", str(chosen), "--stripe-count",
                        "2"], check=True, capture_output=True, timeout=120)
        ran = slurm.srun("--iez", str(static), "out", env=user_env, cwd=chosen)
        assert ran.returncode == 0 and default_of(chosen) == [(-1, 2)], ran.stderr  # the user's choice stays
        job = tmp_path / "fresh-app"
        job.write_text(f"#!{sys.executable}\n" + JOB)
        job.chmod(0o755)
        ran = slurm.srun("--iez", str(job), str(learning / "out"), env=user_env, cwd=learning)
        assert ran.returncode == 0 and ran.stdout.split()[0] == "trace", ran.stderr + slurm.logs()
        assert default_of(learning) == want
    finally:
        slurm.stop()


MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
BATCH = """#!/bin/sh
#SBATCH --iez
#SBATCH --job-name=mpiwriter
#SBATCH --ntasks=2
echo "$IEZ_MODE $IEZ_APP"
mpirun -np 2 {mpi} {out}
srun -n1 {writer} {out}/by-srun
"""


def report_osts(api) -> None:
    """The OSTs the allocation will place on: an agent's report, fresh now (each report a higher seq)."""
    report_osts.seq = getattr(report_osts, "seq", 0) + 1
    assert httpx.post(api.url + "/v1/stats", timeout=30, headers={"Authorization": f"Bearer {api_token()}"},
                      json={"oss_id": "oss-spank", "seq": report_osts.seq, "time": time.time(), "cpu_pct": 1.0,
                            "mem_pct": 1.0, "osts": [{"name": f"fs-OST{i:04x}", "index": i, "kbytes_total": 10 << 20,
                                                      "kbytes_avail": 8 << 20} for i in range(4)]}).status_code < 300


def read_if_any(path: Path) -> str:
    return path.read_text() if path.exists() else f"({path} not written)"


def learnt_entries(api, app: str, want: int, mapdir: Path, tmp_path: Path) -> int:
    """Polls the API for ``app``'s map until it has ``want`` entries or the plugin's learner has ended."""
    headers, entries = {"Authorization": f"Bearer {TOKEN}"}, 0
    deadline = time.monotonic() + 300  # a fit and an allocation on a loaded machine: generous
    while time.monotonic() < deadline:
        got = httpx.get(api.url + f"/v1/apps/{app}/map", headers=headers, timeout=30)
        if got.status_code == 200:
            (tmp_path / "learnt.cdb").write_bytes(got.content)
            entries = LayoutMap(str(tmp_path / "learnt.cdb")).entries
            if entries == want:
                break
        if not learner_running(mapdir) and list(mapdir.glob("iez-trace.*.log")) and time.monotonic() > deadline - 290:
            break  # the learner ended without storing them: its log says why
        time.sleep(1)
    return entries


@pytest.mark.skipif(not (shutil.which("mpicc") and shutil.which("mpirun") and shutil.which("sbatch")),
                    reason="Open MPI (mpicc, mpirun) or sbatch is not installed")
def test_sbatch_of_an_mpi_program_is_traced_learnt_then_placed(api, iez_wrapper, tmp_path):
    """An MPI-IO program (2 ranks, a file per rank and a shared file) run by mpirun in a batch script with
    ``#SBATCH --iez``, plus an ``srun`` step inside it: the batch step names the application by the job's
    name, traces every rank and the inner step into one trace directory, learns it at the script's end;
    the second submission of the same script places every file from the map."""
    lib = build_lib()
    mpi = tmp_path / "mpi_trace_writer"
    subprocess.run(["mpicc", "-O2", "-o", str(mpi), str(REPO / "placement_lib/tests/apps/mpi_trace_writer.c")],
                   check=True, timeout=300)
    writer = tmp_path / "writer"
    writer.write_text(f"#!{sys.executable}\n" + JOB)
    writer.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "job.sh"
    script.write_text(BATCH.format(mpi=mpi, out=out, writer=writer))
    files = [out / "fpp.0000.dat", out / "fpp.0001.dat", out / "shared.dat", out / "by-srun"]
    user_env = {"IEZ_API_USER_TOKEN": TOKEN, "IEZ_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO),
                **MPI_ENV}
    mapdir = tmp_path / "mapdir"
    slurm = Slurm(plugstack(iez_wrapper, lib, api.url, mapdir))
    try:
        report_osts(api)
        first = slurm.sbatch(script, tmp_path / "first.out", env=user_env)
        printed = read_if_any(tmp_path / "first.out")
        assert first.returncode == 0, first.stderr + printed + slurm.logs()
        assert printed.split()[:2] == ["trace", "mpiwriter.root"], printed  # named by the job: traced
        assert all(f.is_file() for f in files), printed
        entries = learnt_entries(api, "mpiwriter.root", len(files), mapdir, tmp_path)
        logs = "".join(p.read_text() for p in mapdir.glob("iez-trace.*.log"))
        assert entries == len(files), f"the batch job was not learnt: {logs}"
        wait_for(lambda: not learner_running(mapdir), 120, "the plugin's learner to end")
        assert not [d for d in mapdir.glob("iez-trace.*") if d.is_dir()], "the learnt trace was not removed"
        for f in files:
            f.unlink()
        second = slurm.sbatch(script, tmp_path / "second.out", env=user_env)
        printed = read_if_any(tmp_path / "second.out")
        assert second.returncode == 0, second.stderr + printed + slurm.logs()
        assert printed.split()[:2] == ["place", "mpiwriter.root"], printed
        for f in files:  # every rank's file, the shared one and the inner step's: placed from the map
            assert "osts=" in os.getxattr(f, "user.iez.layout").decode(), f
    finally:
        slurm.stop()


def learner_running(mapdir: Path) -> bool:
    """Whether a process's command line names ``mapdir`` (the plugin's learner, or its sh)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(mapdir).encode() in (proc / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def api_token() -> str:
    from conftest import API_TOKEN

    return API_TOKEN
