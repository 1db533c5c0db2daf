"""``iez trace parse``: tracing-mode CSV files merged into write requests, stored, and replayable."""

from __future__ import annotations

import csv
import json
from datetime import datetime, timezone

import pytest
from sqlalchemy import select

from conftest import fresh_db, iez_cli
from iez.config import database_url
from iez.db.engine import make_engine, read
from iez.db.models import Run
from iez.db.requests import app_summary
from iez.sim.workloads import load_requests
from iez.trace.csvformat import TRACE_COLUMNS, read_counts, read_trace, write_trace
from iez.trace.parse import Request, TraceDir, merge_requests, parse_dir

MIB = 1 << 20
HEADER = ",".join(TRACE_COLUMNS) + "\n"
COUNTS_HEADER = "app,job,host,pid,rank,hits,misses,errors,started,ended\n"


def row(path, written, size=-1, rank=0, pid=100, host="n1", stripes=1, stripe_size=0, app="ior", job="77",
        comm_size=4) -> dict:
    return dict(path=path, bytes_written=written, file_size=size, stripe_count=stripes, stripe_size=stripe_size,
                rank=rank, comm_size=comm_size, open_time="1700000000.250000", pid=pid, host=host, app=app,
                job=job)


def trace(directory, name: str, rows: list[dict]) -> None:
    """One process's trace file, as the library writes it."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"iez-trace.{name}.csv", "w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(TRACE_COLUMNS)
        for r in rows:
            writer.writerow([r[c] for c in TRACE_COLUMNS])


def counts(directory, name: str, lines: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"iez-counts.{name}.csv").write_text(COUNTS_HEADER + "".join(line + "\n" for line in lines))


def ior_run(directory, job="77") -> None:
    """4 ranks on 2 hosts: each writes its own file (FPP) and a quarter of one shared file."""
    for rank in range(4):
        host, pid = f"n{rank // 2}", 1000 + rank
        trace(directory, f"{host}.{pid}.{rank}", [
            row(f"/scratch/fpp.{rank:04d}", (rank + 1) * MIB, size=(rank + 1) * MIB, rank=rank, pid=pid, host=host,
                stripes=4, stripe_size=MIB, job=job),
            # each rank sees the shared file's size when it closes; the last to close sees all 16 MiB
            row("/scratch/shared.h5", 4 * MIB, size=4 * MIB * (rank + 1), rank=rank, pid=pid, host=host,
                stripes=8, stripe_size=4 * MIB, job=job),
        ])


def cli(*args):
    return iez_cli("trace", "parse", *args)


# ---- merging rules -----------------------------------------------------------------------------------

def test_fpp_files_keep_their_rank_and_the_shared_file_is_rank_minus_one(tmp_path):
    ior_run(tmp_path / "t")
    parsed = parse_dir(tmp_path / "t")
    assert parsed.job == "77" and parsed.apps == ["ior"]
    assert parsed.requests == [Request(f"/scratch/fpp.{r:04d}", (r + 1) * MIB, 4, MIB, r) for r in range(4)] + [
        Request("/scratch/shared.h5", 16 * MIB, 8, 4 * MIB, -1)]


def test_size_rule_largest_known_size_else_sum_of_bytes_written(tmp_path):
    rows = [row("/s/known", 10, size=50, rank=0), row("/s/known", 10, size=-1, rank=1, pid=2),
            row("/s/unknown", 10, rank=0), row("/s/unknown", 15, rank=1, pid=2),
            row("/s/empty", 0, size=0), row("/s/opened-only", 0)]
    trace(tmp_path, "a", rows)
    reqs = {r.file: r for r in merge_requests(read_trace(tmp_path / "iez-trace.a.csv"))}
    assert reqs["/s/known"].write_bytes == 50
    assert reqs["/s/unknown"].write_bytes == 25
    assert "/s/empty" not in reqs and "/s/opened-only" not in reqs
    kept = {r.file: r for r in merge_requests(read_trace(tmp_path / "iez-trace.a.csv"), keep_empty=True)}
    assert kept["/s/empty"].write_bytes == 0 and kept["/s/opened-only"].write_bytes == 0


def test_rank_rules(tmp_path):
    rows = [
        # one writer among readers-for-write: that writer's rank
        row("/s/one", 0, rank=0), row("/s/one", 9, rank=2, pid=3), row("/s/one", 0, rank=3, pid=4),
        # two processes, both rank 0 (no MPI), both writing: shared
        row("/s/twoproc", 5, rank=0, pid=10), row("/s/twoproc", 5, rank=0, pid=11),
        # same pid number on two hosts is two processes
        row("/s/twohosts", 5, rank=0, pid=10, host="a"), row("/s/twohosts", 5, rank=0, pid=10, host="b"),
        # nobody wrote through traced calls but the size grew (mmap): the openers decide
        row("/s/mmap", 0, size=100, rank=5),
    ]
    trace(tmp_path, "a", rows)
    ranks = {r.file: r.rank for r in merge_requests(read_trace(tmp_path / "iez-trace.a.csv"))}
    assert ranks == {"/s/one": 2, "/s/twoproc": -1, "/s/twohosts": -1, "/s/mmap": 5}


def test_stripe_count_and_size_are_the_most_common_known_values(tmp_path):
    rows = [row("/s/f", 1, stripes=4, stripe_size=MIB, pid=1), row("/s/f", 1, stripes=4, stripe_size=0, pid=2),
            row("/s/f", 1, stripes=2, stripe_size=0, pid=3), row("/s/f", 1, stripes=0, stripe_size=0, pid=4),
            row("/s/g", 1, stripes=0, stripe_size=0), row("/s/h", 1, stripes=-1, stripe_size=0)]
    trace(tmp_path, "a", rows)
    reqs = {r.file: r for r in merge_requests(read_trace(tmp_path / "iez-trace.a.csv"))}
    assert (reqs["/s/f"].stripe_count, reqs["/s/f"].stripe_size) == (4, MIB)
    assert (reqs["/s/g"].stripe_count, reqs["/s/g"].stripe_size) == (1, None)
    assert reqs["/s/h"].stripe_count == -1


def test_temporary_files_are_ignored(tmp_path):
    ior_run(tmp_path)
    (tmp_path / ".iez-trace.n9.1.1.csv.tmp").write_text("half a row")
    (tmp_path / "iez-trace.n9.2.2.csv.tmp").write_text("half a row")
    assert len(parse_dir(tmp_path).requests) == 5


def test_quoted_fields_round_trip(tmp_path):
    odd = '/scratch/a,b "c"\nd'
    write_trace(tmp_path / "iez-trace.x.csv", [row(odd, 3), row("/s/after", 4)])
    rows = read_trace(tmp_path / "iez-trace.x.csv")
    assert [r.path for r in rows] == [odd, "/s/after"]
    assert rows[1].source == f"{tmp_path / 'iez-trace.x.csv'}:4"  # the quoted newline took a line


# ---- jobs ------------------------------------------------------------------------------------------

def test_several_jobs_are_reported_separately_and_the_command_asks_for_one(tmp_path):
    ior_run(tmp_path, job="77")
    trace(tmp_path, "n5.1.1", [row("/other/x", 7, job="78")])
    by_job = TraceDir(tmp_path).runs_by_job()
    assert sorted(by_job) == ["77", "78"]
    assert [r.file for r in by_job["78"].requests] == ["/other/x"]
    assert len(by_job["77"].requests) == 5
    proc = cli(str(tmp_path), "--json")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"iez trace: error: {tmp_path} holds 2 jobs ('77', '78'): pick one with --job ID"
    picked = cli(str(tmp_path), "--json", "--job", "78")
    assert json.loads(picked.stdout) == [{"file": "/other/x", "write_bytes": 7, "stripe_count": 1,
                                          "stripe_size": None, "rank": 0}]
    unknown = cli(str(tmp_path), "--job", "99")
    assert unknown.returncode == 2 and "no rows for job '99'; jobs here: '77', '78'" in unknown.stderr


# ---- malformed files ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, where, reason", [
    (HEADER + "/s/a,1,-1,1,0,0,1,1.0,5,h,a,j\n/s/b,12x,-1,1,0,0,1,1.0,5,h,a,j\n", "line 3",
     "bytes_written: '12x' is not a whole number"),
    (HEADER + "/s/a,1,-1,1,0,0,1,1.0,5,h,a\n", "line 2", "expected 12 fields, got 11"),
    (HEADER + "s/a,1,-1,1,0,0,1,1.0,5,h,a,j\n", "line 2", "path: 's/a' is not an absolute path"),
    (HEADER + "/s/a,1,-2,1,0,0,1,1.0,5,h,a,j\n", "line 2", "file_size: -2 is below -1"),
    (HEADER + "/s/a,1,-1,1,0,0,1,soon,5,h,a,j\n", "line 2", "open_time: 'soon' is not a number"),
    (HEADER.replace("rank,", "mpi_rank,"), "line 1", "header"),
    (HEADER + "/s/a,1,-1,1,0,0,1,1.0,5,h,a,j", "line 2", "file ends mid-row (truncated?)"),
    (HEADER + '"/s/a,1,-1,1\n', "line 2", "file ends inside a quoted field (truncated?)"),
    (HEADER + "/s/a,1,-1,1,0,0,1,1.0,5,h,a,j\n\n", "line 3", "expected 12 fields, got 0"),
])
def test_malformed_trace_names_file_and_line(tmp_path, text, where, reason):
    bad = tmp_path / "iez-trace.bad.1.1.csv"
    bad.write_text(text)
    with pytest.raises(ValueError) as err:
        read_trace(bad)
    assert str(err.value).startswith(f"{bad}: {where}: ") and reason in str(err.value)


def test_empty_file_and_empty_directory_are_reported(tmp_path):
    (tmp_path / "iez-trace.e.1.1.csv").write_text("")
    proc = cli(str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (f"iez trace: error: {tmp_path / 'iez-trace.e.1.1.csv'}: empty file, "
                                   "not even a header (was its writer killed?)")
    (tmp_path / "iez-trace.e.1.1.csv").unlink()
    empty = cli(str(tmp_path))
    assert empty.returncode == 2 and "no iez-trace.*.csv or iez-counts.*.csv files" in empty.stderr
    missing = cli(str(tmp_path / "nope"))
    assert missing.returncode == 2 and "No such file or directory" in missing.stderr


def test_malformed_counts_names_file_and_line(tmp_path):
    counts(tmp_path, "c", ["ior,77,n1,5,0,3,1,0,100.5,200.5", "ior,77,n1,6,1,-3,1,0,100.5,200.5"])
    with pytest.raises(ValueError, match=r"iez-counts\.c\.csv: line 3: hits: -3 is below 0"):
        read_counts(tmp_path / "iez-counts.c.csv")


# ---- output and storage -------------------------------------------------------------------------------

def test_out_csv_replays_with_load_requests(tmp_path):
    ior_run(tmp_path / "t")
    out = tmp_path / "reqs.csv"
    proc = cli(str(tmp_path / "t"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().splitlines()[0] == "file,write_bytes,stripe_count,rank"
    [job] = load_requests(out, app="ior")
    assert [(r.file, r.write_bytes, r.stripe_count, r.rank) for r in job.requests] == [
        (f"/scratch/fpp.{r:04d}", (r + 1) * MIB, 4, r) for r in range(4)] + [("/scratch/shared.h5", 16 * MIB, 8, -1)]
    assert "5 write requests (job '77'; apps: ior)" in proc.stdout
    assert "/scratch/shared.h5" in proc.stdout.splitlines()[-1]


def test_counts_sum_per_app_and_job(tmp_path):
    counts(tmp_path, "n1.5", ["ior,77,n1,5,0,3,1,0,100.5,200.25"])
    counts(tmp_path, "n2.6", ["ior,77,n2,6,1,4,2,1,99.75,201.5"])
    [run] = parse_dir(tmp_path).runs
    assert run.to_dict() == {"app": "ior", "job": "77", "processes": 2, "hits": 7, "misses": 3, "errors": 1,
                             "started": 99.75, "ended": 201.5}


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc).replace(tzinfo=None)


def test_store_puts_requests_and_runs_in_the_db(backend, tmp_path):
    db = fresh_db(backend, tmp_path, "trace_store")
    ior_run(tmp_path / "t")
    counts(tmp_path / "t", "n1.5", ["ior,77,n1,5,0,3,1,0,1700000000.5,1700000100.25"])
    counts(tmp_path / "t", "n2.6", ["ior,77,n2,6,1,1,3,2,1700000001.0,1700000200.75"])
    proc = cli(str(tmp_path / "t"), "--store", "--db", db, "--json")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 5
    assert "stored 5 requests and 1 runs (0 already there) for 'ior'" in proc.stderr
    engine = make_engine(database_url(db))
    try:
        summary = read(engine, lambda conn: app_summary(conn, "ior"))
        stored = {r["file"]: (r["write_bytes"], r["stripe_count"], r["stripe_size"], r["rank"], r["source"])
                  for r in summary["requests"]}
        assert stored == {**{f"/scratch/fpp.{r:04d}": ((r + 1) * MIB, 4, MIB, r, "traced") for r in range(4)},
                          "/scratch/shared.h5": (16 * MIB, 8, 4 * MIB, -1, "traced")}
        runs = read(engine, lambda conn: conn.execute(select(Run)).all())
        assert [(r.started, r.ended, r.files_found, r.files_missed) for r in runs] == [
            (utc(1700000000.5), utc(1700000200.75), 4, 4)]
        # parsing the same directory again changes nothing
        again = cli(str(tmp_path / "t"), "--store", "--db", db)
        assert again.returncode == 0, again.stderr
        assert "stored 5 requests and 0 runs (1 already there)" in again.stdout
        assert len(read(engine, lambda conn: conn.execute(select(Run)).all())) == 1
        assert len(read(engine, lambda conn: app_summary(conn, "ior"))["requests"]) == 5
    finally:
        engine.dispose()


def test_store_under_an_app_name_and_refusals(tmp_path):
    db = fresh_db("sqlite", tmp_path, "names")
    trace(tmp_path / "t", "a", [row("/s/a", 5, app="ior"), row("/s/b", 5, app="hacc", pid=2)])
    mixed = cli(str(tmp_path / "t"), "--store", "--db", db)
    assert mixed.returncode == 2
    assert "the traces name 2 applications ('hacc', 'ior'): give --app NAME" in mixed.stderr
    named = cli(str(tmp_path / "t"), "--store", "--db", db, "--app", "both", "--json")
    assert named.returncode == 0, named.stderr
    engine = make_engine(database_url(db))
    try:
        assert [r["file"] for r in read(engine, lambda conn: app_summary(conn, "both"))["requests"]] == ["/s/a", "/s/b"]
    finally:
        engine.dispose()
    stray = cli(str(tmp_path / "t"), "--db", db)
    assert stray.returncode == 2 and "--db and --app only apply with --store" in stray.stderr
