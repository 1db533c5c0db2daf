"""Tracing mode (IEZ_MODE=trace, the paper's miniRecorder) under real programs.

Each traced process leaves one CSV in IEZ_TRACE_DIR (placement_lib/README.md
"Trace CSV"); these tests read those files with the csv module and compare
them with the bytes the programs are known to write.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "placement_lib" / "build" / "libiez.so"
APPS = ROOT / "placement_lib" / "tests" / "apps"
HEADER = ["path", "bytes_written", "file_size", "stripe_count", "stripe_size", "rank", "comm_size",
          "open_time", "pid", "host", "app", "job", "layout", "dir_layout"]
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_rmaps_base_oversubscribe": "1"}

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


@pytest.fixture(scope="module")
def lib() -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT / "placement_lib")], check=True, stdout=subprocess.DEVNULL)
    return LIB


@pytest.fixture(scope="module")
def apps(tmp_path_factory, lib) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("trace-apps")
    built = {}
    subprocess.run(["gcc", "-O2", "-o", str(out / "trace_writer"), str(APPS / "trace_writer.c")], check=True)
    built["trace_writer"] = out / "trace_writer"
    subprocess.run(["mpicc", "-O2", "-o", str(out / "mpi_trace_writer"), str(APPS / "mpi_trace_writer.c")], check=True)
    built["mpi_trace_writer"] = out / "mpi_trace_writer"
    return built


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("IEZ_", "OMPI_", "PMI", "SLURM_")) and k != "LD_PRELOAD"}


def traced_env(lib: Path, trace_dir: Path, include: Path, **extra: str) -> dict[str, str]:
    return {**clean_env(), "LD_PRELOAD": str(lib), "IEZ_MODE": "trace", "IEZ_TRACE_DIR": str(trace_dir),
            "IEZ_INCLUDE": str(include), "IEZ_STATE_DIR": str(trace_dir.parent / "state"), **extra}


def read_traces(trace_dir: Path) -> list[dict]:
    rows = []
    files = sorted(trace_dir.glob("iez-trace.*.csv"))
    for f in files:
        with f.open(newline="") as handle:
            reader = csv.reader(handle)
            assert next(reader) == HEADER, f
            rows += [dict(zip(HEADER, r)) for r in reader]
    assert not list(trace_dir.glob(".*.tmp")), "a temporary trace file was left behind"
    return rows


def test_posix_and_stdio_write_calls_are_counted_exactly(lib, apps, tmp_path):
    out, traces = tmp_path / "out", tmp_path / "traces"
    out.mkdir()
    (out / "read-only.dat").write_bytes(b"0123456789")
    env = traced_env(lib, traces, out, IEZ_APP="writer", IEZ_RUN_ID="job-42", IEZ_DEFAULT_STRIPE_COUNT="4",
                     OMPI_COMM_WORLD_RANK="3", OMPI_COMM_WORLD_SIZE="8")
    done = subprocess.run([str(apps["trace_writer"]), str(out)], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""
    rows = {Path(r["path"]).name: r for r in read_traces(traces)}
    assert set(rows) == {"posix.dat", "stdio.dat"}  # the file only read is not traced
    posix, stdio = rows["posix.dat"], rows["stdio.dat"]
    # write 1000 + pwrite 500 + writev 500 + pwritev 100
    assert (posix["bytes_written"], posix["file_size"]) == ("2100", "2100")
    # fwrite 7 x 1024 and the fprintf'd "2\n" (tests/placement_lib/test_trace_accounting.py: the stdio family)
    assert (stdio["bytes_written"], stdio["file_size"]) == ("7170", "7170")
    for row in rows.values():
        assert row["path"] == str(out / Path(row["path"]).name)
        assert (row["stripe_count"], row["stripe_size"]) == ("4", "0")
        assert (row["rank"], row["comm_size"]) == ("3", "8")
        assert (row["app"], row["job"], row["host"]) == ("writer", "job-42", os.uname().nodename)
        assert row["pid"].isdigit() and float(row["open_time"]) > 1.7e9


def test_mpi_io_bytes_are_counted_once_per_rank_with_mpi_ranks(lib, apps, tmp_path):
    out, traces = tmp_path / "out", tmp_path / "traces"
    out.mkdir()
    env = {**traced_env(lib, traces, out), **MPI_ENV}
    cmd = ["mpirun", "--oversubscribe", "-np", "4", "-x", "LD_PRELOAD", "-x", "IEZ_MODE", "-x", "IEZ_TRACE_DIR",
           "-x", "IEZ_INCLUDE", "-x", "IEZ_STATE_DIR", str(apps["mpi_trace_writer"]), str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = read_traces(traces)
    assert len(list(traces.glob("iez-trace.*.csv"))) == 4  # one per rank
    # Open MPI's own lock-test files below the output directory are traced, with nothing written
    assert all(r["bytes_written"] == "0" for r in rows if "locktest" in r["path"])
    written = [r for r in rows if r["bytes_written"] != "0"]
    by_path: dict[str, list[dict]] = {}
    for r in written:
        by_path.setdefault(r["path"], []).append(r)
    for i in range(4):
        (fpp,) = by_path[str(out / f"fpp.{i:04d}.dat")]
        assert (fpp["rank"], fpp["comm_size"], fpp["bytes_written"], fpp["file_size"]) == (str(i), "4", "4000", "4000")
    shared = by_path[str(out / "shared.dat")]
    # 2048 MPI_INTs per rank, counted at the MPI-IO call, not again in the POSIX writes under it
    assert sorted(r["rank"] for r in shared) == ["0", "1", "2", "3"]
    assert all(r["bytes_written"] == "8192" and r["file_size"] == "32768" for r in shared)
    assert set(by_path) == {str(out / f"fpp.{i:04d}.dat") for i in range(4)} | {str(out / "shared.dat")}


def test_forked_python_workers_each_leave_their_own_trace(lib, tmp_path):
    """multiprocessing's fork children leave through os._exit: libiez must still write their traces."""
    out, traces = tmp_path / "out", tmp_path / "traces"
    out.mkdir()
    script = f"""
import multiprocessing as mp, os
def work(i):
    with open(os.path.join({str(out)!r}, f"part.{{i}}"), "wb") as f:
        f.write(b"x" * (1000 * (i + 1)))
if __name__ == "__main__":
    with open(os.path.join({str(out)!r}, "parent.log"), "w") as f:
        f.write("parent\\n")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=work, args=(i,)) for i in range(3)]
    [p.start() for p in procs]
    [p.join() for p in procs]
    assert all(p.exitcode == 0 for p in procs)
"""
    done = subprocess.run([sys.executable, "-c", script], env=traced_env(lib, traces, out), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = read_traces(traces)
    assert len(list(traces.glob("iez-trace.*.csv"))) == 4
    got = sorted((Path(r["path"]).name, r["bytes_written"], r["pid"]) for r in rows)
    names = [g[0] for g in got]
    assert names == ["parent.log", "part.0", "part.1", "part.2"]  # the parent's file is not repeated by children
    assert [g[1] for g in got] == ["7", "1000", "2000", "3000"]
    assert len({g[2] for g in got}) == 4


def test_paths_needing_quotes_survive_the_csv(lib, tmp_path):
    out, traces = tmp_path / "out", tmp_path / "traces"
    out.mkdir()
    name = 'odd, "quoted"\nname.dat'
    script = f"open({str(out / name)!r}, 'w').write('abc')"
    done = subprocess.run([sys.executable, "-c", script], env=traced_env(lib, traces, out), capture_output=True)
    assert done.returncode == 0
    (row,) = read_traces(traces)
    assert row["path"] == str(out / name) and row["bytes_written"] == "3"


def test_paths_outside_include_and_without_trace_dir(lib, tmp_path):
    out, other, traces = tmp_path / "out", tmp_path / "other", tmp_path / "traces"
    out.mkdir()
    other.mkdir()
    script = f"open({str(other / 'x')!r}, 'w').write('abc')"
    subprocess.run([sys.executable, "-c", script], env=traced_env(lib, traces, out), check=True)
    assert not traces.exists() or not list(traces.glob("iez-trace.*.csv"))  # nothing below IEZ_INCLUDE was written
    env = traced_env(lib, traces, out)
    del env["IEZ_TRACE_DIR"]
    plain = subprocess.run([sys.executable, "-c", f"open({str(out / 'y')!r}, 'w').write('abc'); print('ok')"],
                           env=env, capture_output=True, text=True)
    assert (plain.returncode, plain.stdout, plain.stderr) == (0, "ok\n", "")  # silent, and the program is unharmed
    assert (out / "y").read_text() == "abc"


def test_traced_mpi_run_parses_into_write_requests_and_runs(lib, apps, tmp_path):
    """The paper's learning phase on a real MPI job: trace it, then `iez trace parse` the directory."""
    import json

    out, traces = tmp_path / "out", tmp_path / "traces"
    out.mkdir()
    env = {**traced_env(lib, traces, out, IEZ_RUN_ID="run-1", IEZ_APP="mpiwriter"), **MPI_ENV}
    cmd = ["mpirun", "--oversubscribe", "-np", "4", "-x", "LD_PRELOAD", "-x", "IEZ_MODE", "-x", "IEZ_TRACE_DIR",
           "-x", "IEZ_INCLUDE", "-x", "IEZ_STATE_DIR", "-x", "IEZ_RUN_ID", "-x", "IEZ_APP",
           str(apps["mpi_trace_writer"]), str(out)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=120)
    db = tmp_path / "iez.db"
    subprocess.run(["iez", "db", "upgrade", "--db", str(db)], env=clean_env(), capture_output=True, check=True)
    parsed = subprocess.run(["iez", "trace", "parse", str(traces), "--json", "--store", "--db", str(db),
                             "--out", str(tmp_path / "requests.csv")],
                            env=clean_env(), capture_output=True, text=True, check=True)
    requests = {Path(r["file"]).name: r for r in json.loads(parsed.stdout)}
    assert set(requests) == {f"fpp.{i:04d}.dat" for i in range(4)} | {"shared.dat"}
    for i in range(4):
        assert (requests[f"fpp.{i:04d}.dat"]["rank"], requests[f"fpp.{i:04d}.dat"]["write_bytes"]) == (i, 4000)
    assert (requests["shared.dat"]["rank"], requests["shared.dat"]["write_bytes"]) == (-1, 32768)

    from iez.sim.workloads import load_requests
    replay = load_requests(tmp_path / "requests.csv")
    assert sorted(r.write_bytes for job in replay for r in job.requests) == [4000] * 4 + [32768]

    import sqlite3
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT w.path, w.write_bytes, w.rank, w.source FROM write_requests w "
                              "JOIN applications a ON a.id = w.app_id WHERE a.name = 'mpiwriter'").fetchall()
    assert sorted((Path(p).name, b, r, s) for p, b, r, s in stored) == sorted(
        [(f"fpp.{i:04d}.dat", 4000, i, "traced") for i in range(4)] + [("shared.dat", 32768, -1, "traced")])
