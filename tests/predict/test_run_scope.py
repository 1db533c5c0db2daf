"""``iez run`` traces and places only the job's own file systems, never records a failed launch, and ``iez
learn`` takes only its application's traces (issue 14, reproduction 10), with real ``mpirun`` and real programs
under libiez."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import fresh_db, run_iez
from iez.config import database_url
from iez.db.engine import make_engine, read
from iez.db.requests import app_summary
from iez.placement import PlacementSettings, place_app
from iez.predict.scope import job_scope, mount_of
from predict_helpers import add_cluster

REPO = Path(__file__).resolve().parents[2]
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
WRITER = """
import os, sys
out = sys.argv[1]
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, f"part.{rank}"), "wb") as f:
    f.write(b"x" * ((rank + 1) << 20))
"""
pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

# ---- the scope rule ------------------------------------------------------------------------------

MOUNTS = ["/", "/proc", "/dev", "/dev/shm", "/run", "/tmp", "/lustre", "/home"]


def test_the_scope_is_the_file_systems_of_the_working_directory_and_outputs():
    scope = job_scope("/lustre/scratch/u/job", ["/home/u/results"], env={"XDG_RUNTIME_DIR": "/run/user/1000"},
                      mounts=MOUNTS)
    assert scope.include == ("/lustre", "/home")
    assert {"/tmp", "/var/tmp", "/dev/shm", "/run", "/var/run", "/run/user/1000"} <= set(scope.exclude)
    assert scope.contains("/lustre/scratch/u/job/out.0") and scope.contains("/home/u/results/r.h5")
    for runtime in ("/tmp/ompi.vm.0/pid.1/contact.txt", "/dev/shm/vader_segment.vm.1", "/run/user/1000/pmix.sock",
                    "/var/tmp/x", "/etc/passwd", "/usr/lib/x.so"):
        assert not scope.contains(runtime), runtime
    assert scope.env() == {"IEZ_INCLUDE": "/lustre:/home", "IEZ_EXCLUDE": ":".join(scope.exclude)}


def test_a_job_on_the_root_file_system_keeps_runtime_and_system_trees_out():
    scope = job_scope("/work/job", env={"TMPDIR": "/scratch-local/tmp"}, mounts=MOUNTS)
    assert scope.include == ("/",)
    assert {"/tmp", "/dev/shm", "/run", "/scratch-local/tmp", "/proc", "/usr", "/etc", "/dev"} <= set(scope.exclude)
    assert scope.contains("/work/job/out") and not scope.contains("/scratch-local/tmp/f")
    assert not scope.contains("/tmp/ompi.vm.0/x") and not scope.contains("/usr/bin/x")


def test_a_job_run_from_a_runtime_area_covers_its_own_directory_only():
    scope = job_scope("/tmp/pytest-7/job", env={}, mounts=MOUNTS)
    assert scope.include == ("/tmp/pytest-7/job",)
    assert "/tmp" not in scope.exclude and "/dev/shm" in scope.exclude
    assert scope.contains("/tmp/pytest-7/job/out/part.0")
    assert not scope.contains("/tmp/ompi.vm.0/pid.1/contact.txt") and not scope.contains("/tmp/pytest-7/other")


def test_an_include_the_user_set_is_kept_and_an_exclude_added_to():
    env = {"IEZ_INCLUDE": "/lustre/a:/tmp/mine", "IEZ_EXCLUDE": "/lustre/a/skip"}
    scope = job_scope("/home/u", ["/elsewhere"], env=env, mounts=MOUNTS)
    assert scope.include == ("/lustre/a", "/tmp/mine")
    assert scope.exclude[0] == "/lustre/a/skip" and "/tmp" not in scope.exclude and "/dev/shm" in scope.exclude
    assert scope.contains("/tmp/mine/f") and not scope.contains("/lustre/a/skip/f") and not scope.contains("/home/u/f")


def test_mount_points_come_from_the_real_mount_table():
    assert mount_of("/proc/self/status") == "/proc"
    assert mount_of("/no/such/dir/yet") == "/"  # an output yet to be made: the file system it will be made on


# ---- real programs -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lib() -> Path:
    subprocess.run(["make", "-s", "-C", str(REPO / "placement_lib")], check=True, stdout=subprocess.DEVNULL)
    return REPO / "placement_lib/build/libiez.so"


@pytest.fixture
def job(tmp_path):
    """A job directory outside /tmp (on the root file system here, as a cluster's /lustre would be), removed
    afterwards; Open MPI keeps its session directory in /tmp as it does on any node."""
    directory = Path(tempfile.mkdtemp(prefix="iez-run-scope-", dir=Path.home()))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


class Flow:
    def __init__(self, tmp: Path, job: Path, db: str):
        self.job, self.db, self.state = job, db, tmp / "state"
        self.writer = job / "writer.py"
        self.writer.write_text(WRITER)
        # the job's own checkout of iez (the directory the suite runs from), whatever the working directory
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("IEZ_") and k != "LD_PRELOAD"}
        self.env.update({"IEZ_DB": db, "IEZ_STATE_DIR": str(self.state), "PYTHONPATH": str(REPO), **MPI_ENV})
        self.engine = make_engine(database_url(db))

    def run(self, app: str, *cmd, code: int = 0) -> str:
        done = subprocess.run([sys.executable, "-m", "iez.cli", "run", app, "--", *map(str, cmd)], env=self.env,
                              capture_output=True, text=True, timeout=180, cwd=self.job)
        assert done.returncode == code, f"iez run {app}: {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stderr

    def mpirun(self, app: str, out: Path, code: int = 0) -> str:
        shutil.rmtree(out, ignore_errors=True)
        return self.run(app, "mpirun", "-np", "2", sys.executable, self.writer, out, code=code)

    def summary(self, app: str) -> dict:
        return read(self.engine, lambda conn: app_summary(conn, app))


def test_mpirun_session_files_are_neither_traced_nor_missed_and_failed_launches_are_not_runs(tmp_path, lib, job):
    flow = Flow(tmp_path, job, fresh_db("sqlite", tmp_path, "run_scope"))
    out = job / "out"

    # the plain library in tracing mode, with its default scope, sees Open MPI's session files in /tmp
    traces = tmp_path / "plain-traces"
    env = {**flow.env, "LD_PRELOAD": str(lib), "IEZ_MODE": "trace", "IEZ_TRACE_DIR": str(traces), "IEZ_APP": "x"}
    done = subprocess.run(["mpirun", "-np", "2", sys.executable, flow.writer, out], env=env, cwd=job,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    plain = json.loads(run_iez("trace", "parse", str(traces), "--json").stdout)
    assert any(r["file"].startswith("/tmp/ompi.") for r in plain), [r["file"] for r in plain]

    # 1: iez run traces the job: only its two output files become predictions
    log = flow.mpirun("mpi", out)
    assert "mpi: trace mode: no predictions stored yet (files under /)" in log, log
    assert "learnt from 1 traced run(s): 2 predicted requests stored" in log, log
    assert sorted(r["file"] for r in flow.summary("mpi")["requests"]) == [str(out / "part.0"), str(out / "part.1")]

    # 2: placed: both found, nothing missed, not flagged
    add_cluster(flow.db)
    assert len(place_app(flow.engine, "mpi", PlacementSettings(), 600, 600).placed) == 2
    log = flow.mpirun("mpi", out)
    assert "mpi: 2 files placed, 0 missed (0%)" in log, log
    assert "traced again" not in log
    runs = flow.summary("mpi")["runs"]
    assert [(r["files_found"], r["files_missed"]) for r in runs] == [(2, 0)]

    # 3: a launch that fails (mpirun cannot start the program) is not a run and flags nothing
    log = flow.run("mpi", "mpirun", "-np", "2", job / "no-such-program", code=mpirun_failure_code(flow))
    assert "the command failed" in log and "not recorded as a run" in log, log
    assert flow.summary("mpi")["runs"] == runs
    # a command that does not exist: one line, nothing recorded, nothing left behind
    before = sorted((flow.state / "runs" / "mpi").iterdir())
    log = flow.run("mpi", "no-such-command-iez", code=2)
    assert "iez run: error: cannot run 'no-such-command-iez': No such file or directory; nothing recorded" in log
    assert flow.summary("mpi")["runs"] == runs and sorted((flow.state / "runs" / "mpi").iterdir()) == before
    status = json.loads(run_iez("learn", "mpi", "--status", "--json", "--db", flow.db, env=flow.env).stdout)
    assert status["retrace"] is False and status["next_mode"] == "place"
    flow.engine.dispose()


def mpirun_failure_code(flow: Flow) -> int:
    """What mpirun itself exits with when it cannot start its program (the exit status iez run passes on)."""
    done = subprocess.run(["mpirun", "-np", "2", str(flow.job / "no-such-program")], env=flow.env, cwd=flow.job,
                          capture_output=True, timeout=120)
    assert done.returncode != 0
    return done.returncode


def test_a_traced_run_that_fails_is_not_learnt_and_the_next_one_is(tmp_path, lib, job):
    flow = Flow(tmp_path, job, fresh_db("sqlite", tmp_path, "run_failed_trace"))
    out = job / "out"
    crash = f"{sys.executable} {flow.writer} {out}/crashed && exit 3"
    log = flow.run("flaky", "sh", "-c", crash, code=3)
    assert "flaky: not learnt: the command failed (exit 3); its traces are left out of learning" in log, log
    with pytest.raises(LookupError):
        flow.summary("flaky")  # nothing stored: the application does not even exist
    log = flow.run("flaky", sys.executable, flow.writer, out)
    assert "learnt from 1 traced run(s): 1 predicted requests stored" in log, log
    assert [r["file"] for r in flow.summary("flaky")["requests"]] == [str(out / "part.0")]
    assert len(list((flow.state / "failed" / "flaky").iterdir())) == 1
    flow.engine.dispose()


def test_learn_takes_only_its_own_applications_traces_from_a_shared_directory(tmp_path, lib):
    shared, out = tmp_path / "shared-traces", tmp_path / "out"
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    for app in ("app-one", "app-two"):
        env = {**os.environ, "LD_PRELOAD": str(lib), "IEZ_MODE": "trace", "IEZ_TRACE_DIR": str(shared),
               "IEZ_APP": app, "IEZ_INCLUDE": str(out), "IEZ_RUN_ID": f"job-{app}"}
        done = subprocess.run([sys.executable, str(writer), str(out / app)], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    db = fresh_db("sqlite", tmp_path, "learn_shared")
    state = {"IEZ_STATE_DIR": str(tmp_path / "state")}
    engine = make_engine(database_url(db))
    for app in ("app-one", "app-two"):
        done = run_iez("learn", app, "--trace", str(shared), "--db", db, "--json", env=state)
        assert done.returncode == 0, done.stderr
        files = [r["file"] for r in read(engine, lambda conn: app_summary(conn, app))["requests"]]
        assert files == [str(out / app / "part.0")]
    # traces of other applications only: refused, naming them and the way to take them anyway
    done = run_iez("learn", "app-three", "--trace", str(shared), "--db", db, env=state)
    assert done.returncode == 2
    assert f"{shared}: no traces of application 'app-three'; they are of 'app-one', 'app-two'" in done.stderr
    assert "--trace-app NAME" in done.stderr
    done = run_iez("learn", "app-three", "--trace", str(shared), "--trace-app", "app-one", "--db", db, env=state)
    assert done.returncode == 0, done.stderr
    assert [r["file"] for r in read(engine, lambda conn: app_summary(conn, "app-three"))["requests"]] == [
        str(out / "app-one" / "part.0")]
    engine.dispose()


def test_trace_parse_stores_only_the_named_applications_rows_of_a_shared_job(tmp_path, lib):
    """Two applications of one batch job (one job id) trace into one directory: ``iez trace parse --store --app``
    stores each one's files under its own name (before, ``--app solver`` stored the pre-processor's too)."""
    shared, out = tmp_path / "shared-traces", tmp_path / "out"
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    for app in ("pre", "solver"):
        env = {**os.environ, "LD_PRELOAD": str(lib), "IEZ_MODE": "trace", "IEZ_TRACE_DIR": str(shared),
               "IEZ_APP": app, "IEZ_INCLUDE": str(out), "IEZ_RUN_ID": "slurm-42"}
        done = subprocess.run([sys.executable, str(writer), str(out / app)], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    db = fresh_db("sqlite", tmp_path, "parse_shared")
    engine = make_engine(database_url(db))
    for app in ("pre", "solver"):
        done = run_iez("trace", "parse", str(shared), "--store", "--app", app, "--db", db)
        assert done.returncode == 0, done.stderr
        files = [r["file"] for r in read(engine, lambda conn: app_summary(conn, app))["requests"]]
        assert files == [str(out / app / "part.0")]
    # a name of neither: both stored under it, as chosen (tests/trace/test_trace_parse.py)
    done = run_iez("trace", "parse", str(shared), "--store", "--app", "workflow", "--db", db)
    assert done.returncode == 0, done.stderr
    assert len(read(engine, lambda conn: app_summary(conn, "workflow"))["requests"]) == 2
    engine.dispose()
