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
from iez.layout.emulated import canonical_template, format_attr, parse_attr
from iez.layout.model import Layout
from iez.model import EOF_END, Component
from iez.trace.csvformat import TRACE_COLUMNS, TRACE_COLUMNS_V1, read_counts, read_trace, write_trace
from iez.trace.parse import Request, TraceDir, merge_requests, parse_dir

MIB = 1 << 20
HEADER = ",".join(TRACE_COLUMNS_V1) + "\n"  # the header before layouts were recorded
HEADER_V2 = ",".join(TRACE_COLUMNS) + "\n"
COUNTS_HEADER = "app,job,host,pid,rank,hits,misses,errors,started,ended\n"
COUNTS_HEADER_V2 = "app,job,host,pid,rank,hits,misses,errors,started,ended,skips\n"
# A directory default as the library records it: Data-on-MDT up to 1 MiB, 4 stripes up to 64 MiB, then every
# OST of the pool, all in pool flash (canonical template text: no OSTs)
PFL_DEFAULT = ("version=2 comp=0:1048576:1048576:0:mdt:pool=flash comp=1048576:67108864:1048576:4:-:pool=flash "
               "comp=67108864:eof:4194304:-1:-:pool=flash")
PFL_TEMPLATE = (Component(0, MIB, 0, MIB, "flash", dom=True), Component(MIB, 64 * MIB, 4, MIB, "flash"),
                Component(64 * MIB, EOF_END, -1, 4 * MIB, "flash"))


def row(path, written, size=-1, rank=0, pid=100, host="n1", stripes=1, stripe_size=0, app="ior", job="77",
        comm_size=4, layout="", dir_layout="") -> dict:
    return dict(path=path, bytes_written=written, file_size=size, stripe_count=stripes, stripe_size=stripe_size,
                rank=rank, comm_size=comm_size, open_time="1700000000.250000", pid=pid, host=host, app=app,
                job=job, layout=layout, dir_layout=dir_layout)


def trace(directory, name: str, rows: list[dict], columns=TRACE_COLUMNS_V1) -> None:
    """One process's trace file, as the library writes it (the older header unless ``columns`` says)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"iez-trace.{name}.csv", "w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for r in rows:
            writer.writerow([r.get(c, "") for c in columns])


def counts(directory, name: str, lines: list[str], header: str = COUNTS_HEADER) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"iez-counts.{name}.csv").write_text(header + "".join(line + "\n" for line in lines))


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
                                          "stripe_size": None, "rank": 0, "pool": None, "components": None,
                                          "default_layout": None}]
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
    assert out.read_text().splitlines()[0] == "file,write_bytes,stripe_count,rank,pool,components"
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
                             "started": 99.75, "ended": 201.5, "skips": 0}


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc).replace(tzinfo=None)


@pytest.mark.slow
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


# ---- layouts and directory defaults (trace columns layout, dir_layout; counts column skips) -----------

def test_the_pfl_default_text_is_canonical():
    assert canonical_template(parse_attr(PFL_DEFAULT, "test")) == PFL_DEFAULT
    assert parse_attr(PFL_DEFAULT, "test").template() == PFL_TEMPLATE


def test_old_headers_read_as_unknown_layouts_and_no_skips(tmp_path):
    trace(tmp_path, "a", [row("/s/a", 5)])
    counts(tmp_path, "c", ["ior,77,n1,5,0,3,1,0,100.5,200.5"])
    (r,) = read_trace(tmp_path / "iez-trace.a.csv")
    assert (r.layout, r.dir_layout) == (None, None)
    assert read_counts(tmp_path / "iez-counts.c.csv")[0].skips == 0
    (request,) = parse_dir(tmp_path).requests
    assert (request.pool, request.components, request.default_layout) == (None, (), None)


def test_a_directory_default_becomes_the_request_policy(tmp_path):
    """Emulation: no file layout, the directory's default (pool + PFL template) is what the next run gets."""
    trace(tmp_path, "a", [row("/pfl/a", 200 * MIB, dir_layout=PFL_DEFAULT),
                          row("/pfl/b", MIB, rank=1, pid=2, dir_layout=PFL_DEFAULT),
                          row("/none/c", MIB, rank=2, pid=3, dir_layout="")], columns=TRACE_COLUMNS)
    reqs = {r.file: r for r in parse_dir(tmp_path).requests}
    assert (reqs["/pfl/a"].pool, reqs["/pfl/a"].components, reqs["/pfl/a"].default_layout) == (
        "flash", PFL_TEMPLATE, PFL_DEFAULT)
    assert reqs["/pfl/b"].components == PFL_TEMPLATE
    assert (reqs["/none/c"].pool, reqs["/none/c"].components, reqs["/none/c"].default_layout) == (None, (), "")


def test_a_plain_default_with_a_pool_gives_a_pool_and_no_template(tmp_path):
    plain = "version=2 comp=0:eof:1048576:2:-:pool=disk"
    trace(tmp_path, "a", [row("/d/a", MIB, dir_layout=plain)], columns=TRACE_COLUMNS)
    (r,) = parse_dir(tmp_path).requests
    assert (r.pool, r.components, r.default_layout) == ("disk", (), plain)


def test_the_file_layout_wins_over_the_directory_default(tmp_path):
    """Lustre: the layout the file actually got (here an explicit ``lfs setstripe`` of 2 components) is kept,
    its OSTs dropped; the directory default is still the one learnt."""
    actual = Layout.from_components((Component(0, 4 * MIB, 1, MIB, osts=(3,)),
                                     Component(4 * MIB, EOF_END, 2, MIB, osts=(5, 6))))
    text = format_attr(actual)
    rows = [row("/l/a", 8 * MIB, layout=text, dir_layout=PFL_DEFAULT),
            row("/l/a", 0, rank=1, pid=2, layout="", dir_layout=PFL_DEFAULT)]
    trace(tmp_path, "a", rows, columns=TRACE_COLUMNS)
    (r,) = parse_dir(tmp_path).requests
    assert r.components == (Component(0, 4 * MIB, 1, MIB), Component(4 * MIB, EOF_END, 2, MIB))
    assert r.pool is None and r.default_layout == PFL_DEFAULT
    assert r.to_dict()["components"] == [{"end": 4 * MIB, "stripe_count": 1, "stripe_size": MIB},
                                         {"end": -1, "stripe_count": 2, "stripe_size": MIB}]


def test_a_canonical_form_is_kept_for_the_directory_default(tmp_path):
    """A default recorded with OSTs (``lfs setstripe -i``) is compared without them."""
    with_osts = "version=2 comp=0:eof:1048576:2:4,5:pool=disk"
    trace(tmp_path, "a", [row("/d/a", MIB, dir_layout=with_osts)], columns=TRACE_COLUMNS)
    (r,) = read_trace(tmp_path / "iez-trace.a.csv")
    assert r.dir_layout == "version=2 comp=0:eof:1048576:2:-:pool=disk"


@pytest.mark.parametrize("column, text, reason", [
    ("layout", "version=2 comp=0:eof:1048576:2", "expected START:END:STRIPE_SIZE:STRIPE_COUNT:OSTS"),
    ("dir_layout", "version=4 stripe_size=1", "expected 'version=1"),
    ("layout", "version=2 comp=0:100:1048576:1:-", ""),  # ends before EOF: still a valid layout text
    ("dir_layout", "version=2 comp=0:eof:1048576:1:-:pool=much-too-long-pool-name", "is not a Lustre pool name"),
])
def test_a_malformed_layout_names_file_line_and_column(tmp_path, column, text, reason):
    trace(tmp_path, "a", [row("/s/a", 1), row("/s/b", 1, **{column: text})], columns=TRACE_COLUMNS)
    path = tmp_path / "iez-trace.a.csv"
    if not reason:
        assert read_trace(path)[1].layout is not None
        return
    with pytest.raises(ValueError) as err:
        read_trace(path)
    assert str(err.value).startswith(f"{path}: line 3: {column}: layout attribute ") and reason in str(err.value)
    proc = cli(str(tmp_path))
    assert proc.returncode == 2 and f"{path}: line 3: {column}" in proc.stderr and "Traceback" not in proc.stderr


def test_new_header_rows_need_all_fields(tmp_path):
    bad = tmp_path / "iez-trace.bad.1.1.csv"
    bad.write_text(HEADER_V2 + "/s/a,1,-1,1,0,0,1,1.0,5,h,a,j\n")
    with pytest.raises(ValueError, match=r"line 2: expected 14 fields, got 12"):
        read_trace(bad)


def test_skips_are_summed_apart_from_misses(tmp_path):
    counts(tmp_path, "n1.5", ["ior,77,n1,5,0,3,1,0,100.5,200.25,2"], header=COUNTS_HEADER_V2)
    counts(tmp_path, "n2.6", ["ior,77,n2,6,1,4,2,1,99.75,201.5,5"], header=COUNTS_HEADER_V2)
    counts(tmp_path, "n3.7", ["ior,77,n3,7,2,1,0,0,99.5,200.0"])  # an older library: no skips column
    [run] = parse_dir(tmp_path).runs
    assert (run.hits, run.misses, run.errors, run.skips, run.processes) == (8, 3, 1, 7, 3)
    with pytest.raises(ValueError, match=r"line 2: skips: -1 is below 0"):
        counts(tmp_path / "bad", "x", ["ior,77,n1,5,0,3,1,0,100.5,200.25,-1"], header=COUNTS_HEADER_V2)
        read_counts(tmp_path / "bad" / "iez-counts.x.csv")


@pytest.mark.slow
def test_store_keeps_pool_template_default_and_skips(backend, tmp_path):
    """A trace whose directory default is a pool + PFL template becomes a request with that pool, template and
    learnt default in the DB; the run keeps its skips apart from its misses."""
    db = fresh_db(backend, tmp_path, "trace_policy")
    trace(tmp_path / "t", "a", [row("/pfl/a", 200 * MIB, dir_layout=PFL_DEFAULT),
                                row("/none/c", MIB, rank=1, pid=2, dir_layout="")], columns=TRACE_COLUMNS)
    counts(tmp_path / "t", "n1.5", ["ior,77,n1,5,0,1,0,0,1700000000.5,1700000100.25,1"], header=COUNTS_HEADER_V2)
    proc = cli(str(tmp_path / "t"), "--store", "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert "1 hits, 0 misses, 0 errors, 1 skips" in proc.stdout
    engine = make_engine(database_url(db))
    try:
        stored = {r["file"]: r for r in read(engine, lambda conn: app_summary(conn, "ior"))["requests"]}
        pfl = stored["/pfl/a"]
        assert pfl["pool"] == "flash" and pfl["default_layout"] == PFL_DEFAULT
        assert pfl["components"] == [
            {"end": MIB, "stripe_count": 0, "stripe_size": MIB, "pool": "flash", "pattern": "mdt"},
            {"end": 64 * MIB, "stripe_count": 4, "stripe_size": MIB, "pool": "flash"},
            {"end": -1, "stripe_count": -1, "stripe_size": 4 * MIB, "pool": "flash"}]
        assert (stored["/none/c"]["pool"], stored["/none/c"]["components"], stored["/none/c"]["default_layout"]) \
            == (None, None, "")
        runs = read(engine, lambda conn: conn.execute(select(Run)).all())
        assert [(r.files_found, r.files_missed, r.files_skipped) for r in runs] == [(1, 0, 1)]
    finally:
        engine.dispose()


@pytest.mark.slow
def test_a_changed_default_retires_the_allocation(tmp_path):
    """Learning the same file under another directory default is a new request: its allocation goes stale."""
    from iez.db.allocations import lookup
    from iez.db.engine import write_session
    from iez.db.models import AllocationRow, WriteRequestRow

    db = fresh_db("sqlite", tmp_path, "default_change")
    trace(tmp_path / "t", "a", [row("/pfl/a", MIB, dir_layout=PFL_DEFAULT)], columns=TRACE_COLUMNS)
    assert cli(str(tmp_path / "t"), "--store", "--db", db).returncode == 0
    engine = make_engine(database_url(db))
    try:
        with write_session(engine) as session:
            req = session.scalar(select(WriteRequestRow))
            session.add(AllocationRow(request_id=req.id, path=req.path, stripe_size=MIB, stripe_count=1, osts="3",
                                      policy="iez", default_layout=req.default_layout))
        assert read(engine, lambda conn: lookup(conn, "/pfl/a")) is not None
        again = cli(str(tmp_path / "t"), "--store", "--db", db)  # same default: the allocation stays
        assert again.returncode == 0 and read(engine, lambda conn: lookup(conn, "/pfl/a")) is not None
        trace(tmp_path / "t", "a", [row("/pfl/a", MIB, dir_layout="")], columns=TRACE_COLUMNS)
        assert cli(str(tmp_path / "t"), "--store", "--db", db).returncode == 0
        assert read(engine, lambda conn: lookup(conn, "/pfl/a")) is None
    finally:
        engine.dispose()
