"""``iez trace import-darshan``: real Darshan logs turned into write requests, replayed and stored.

The logs and the facts asserted come from ``tests/data/darshan`` and its README (a copy of the project's shared data).
"""

from __future__ import annotations

import csv
import importlib.util
import json
from functools import cache
from pathlib import Path

import pytest

from conftest import fresh_db, iez_cli
from iez.config import database_url
from iez.db.engine import make_engine, read
from iez.db.requests import app_summary
from iez.layout.model import request_policy
from iez.model import EOF_END, Component
from iez.sim.workloads import load_requests
from iez.trace.darshan import DarshanRequest, import_darshan, read_log

LOGS = Path(__file__).resolve().parents[1] / "data" / "darshan"
ALL_LOGS = ("dlio-python-a", "dlio-python-b", "e3sm-io-512ranks", "empty", "hdf5-file-opens",
            "ior-posix-16ranks", "mpi-io-test-3.5.0", "theta-imbalanced-io")
MIB = 1 << 20
THETA_SHARED = "/lus/theta-fs0/3981085427"
E3SM_DIR = "/projects/radix-io/snyder/e3sm"
E3SM_H0_BYTES = 303_145_177_708  # POSIX_BYTES_WRITTEN summed over the 56 aggregator ranks


def log(name: str) -> str:
    return str(LOGS / f"{name}.darshan")


@cache
def _imported(name: str, keep_read: bool) -> tuple[DarshanRequest, ...]:
    return tuple(import_darshan(log(name), keep_read=keep_read))


@pytest.fixture(scope="module")
def imported():
    """``imported(name, keep_read=False)``: the requests of one log, read once per module."""
    return lambda name, keep_read=False: _imported(name, keep_read)


def by_file(requests) -> dict[str, DarshanRequest]:
    return {r.file: r for r in requests}


def test_the_logs_are_all_there():
    assert sorted(p.stem for p in LOGS.glob("*.darshan")) == sorted(ALL_LOGS)


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_LOGS)
def test_every_log_imports(imported, name):
    for keep_read in (False, True):
        requests = imported(name, keep_read)
        files = [r.file for r in requests]
        assert files == sorted(set(files))  # one request per file
        for r in requests:
            assert r.write_bytes > 0 or keep_read
            assert r.stripe_count >= 1 and r.rank >= -1
            assert not (r.file.startswith("<") and r.file.endswith(">"))  # no <STDOUT> and friends
            if r.ost_ids is None:
                assert r.stripe_size is None and r.stripe_count == 1
            else:
                assert r.stripe_count == len(r.ost_ids) == len(set(r.ost_ids))
                assert r.stripe_size and r.stripe_size > 0
    assert {r.file for r in imported(name)} <= {r.file for r in imported(name, True)}


def test_the_empty_log_gives_no_requests(imported):
    assert imported("empty") == () and imported("empty", True) == ()
    assert read_log(log("empty")).modules == []


@pytest.mark.slow
def test_theta_imbalanced_io(imported):
    every = imported("theta-imbalanced-io", True)
    lustre = [r for r in every if r.ost_ids is not None]
    assert len(lustre) == 13  # 13 distinct Lustre files (1,001 LUSTRE records, one per rank and file)
    assert all(r.stripe_count == 1 and r.stripe_size == MIB for r in lustre)
    assert all(r.file.startswith("/lus/theta-fs0/") for r in lustre)
    shared = by_file(every)[THETA_SHARED]
    assert shared == DarshanRequest(THETA_SHARED, 52_938_395_468, 1, MIB, -1, ost_ids=(29,))
    assert by_file(imported("theta-imbalanced-io"))[THETA_SHARED] == shared
    # the 1,026 files of the POSIX module are all there when reads are kept
    assert len(every) >= 1026
    written = imported("theta-imbalanced-io")
    assert len(written) == 13 and sum(r.ost_ids is not None for r in written) == 11
    assert max(written, key=lambda r: r.write_bytes).file == THETA_SHARED


def test_theta_mpiio_bytes_win_when_posix_missed_them(imported):
    """/lus/theta-fs0/312046190: MPI-IO wrote 25,098,793,816 bytes, Darshan's POSIX layer saw 78,480."""
    r = by_file(imported("theta-imbalanced-io"))["/lus/theta-fs0/312046190"]
    assert (r.write_bytes, r.rank, r.ost_ids) == (25_098_793_816, -1, (27,))


def test_theta_notes_the_partial_posix_module():
    assert read_log(log("theta-imbalanced-io")).partial_modules == ["POSIX"]


def test_e3sm_io(imported):
    every = by_file(imported("e3sm-io-512ranks", True))
    assert len(every) == 3  # 113 POSIX and 113 LUSTRE records for 3 distinct files
    written = by_file(imported("e3sm-io-512ranks"))
    assert sorted(written) == [f"{E3SM_DIR}/can_I_out_h0.nc", f"{E3SM_DIR}/can_I_out_h1.nc"]
    h0, h1 = written[f"{E3SM_DIR}/can_I_out_h0.nc"], written[f"{E3SM_DIR}/can_I_out_h1.nc"]
    assert h0.write_bytes == pytest.approx(E3SM_H0_BYTES, rel=0.01)
    assert h0.write_bytes == pytest.approx(303e9, rel=0.01)  # "about 303 GB"
    assert h1.write_bytes == pytest.approx(1.5e9, rel=0.02)  # "about 1.5 GB"
    for r in (h0, h1):
        assert r.rank == -1 and r.stripe_size == MIB and r.stripe_count == 56
        assert len(set(r.ost_ids)) == 56 and set(r.ost_ids) <= set(range(56))  # all 56 OSTs of Theta
    (only_read,) = set(every) - set(written)
    assert every[only_read].write_bytes == 0 and every[only_read].stripe_count == 56


def test_ior_posix_one_shared_file(imported):
    (r,) = imported("ior-posix-16ranks")
    assert (r.file, r.write_bytes, r.rank, r.stripe_count, r.stripe_size, r.ost_ids) == (
        "/home/snyder/software/ior/build/testFile", 16 * MIB, -1, 1, MIB, (102,))


def test_ior_posix_keeps_its_pool_but_not_its_incomplete_pfl_template(imported):
    """Its LUSTRE record (module version 2) has one component in pool ddn_ssd, flagged instantiated (PFL) and
    ending at 500 GiB: Lustre had not instantiated the rest, so the template is not known to the end."""
    (r,) = imported("ior-posix-16ranks")
    assert r.pool == "ddn_ssd" and r.components == ()


def test_version_1_lustre_records_give_no_pool_nor_template(imported):
    """Theta's logs predate per-component records: stripe size, width and OSTs only."""
    for name in ("theta-imbalanced-io", "e3sm-io-512ranks"):
        assert all(r.pool is None and r.components == () for r in imported(name, True))
    (r,) = imported("mpi-io-test-3.5.0")  # version 2, plain layout, no pool
    assert r.pool is None and r.components == ()


def test_mpi_io_test_one_shared_file(imported):
    (r,) = imported("mpi-io-test-3.5.0")
    assert (r.write_bytes, r.rank, r.stripe_count, r.ost_ids) == (64 * MIB, -1, 1, (1,))
    assert r.file.endswith("/mpi-io-test.tmp.dat")


def test_hdf5_files_one_per_rank(imported):
    written = imported("hdf5-file-opens")
    assert [(Path(r.file).name, r.rank) for r in written] == [(f"test_h5f_only_{n}.h5", n) for n in range(3)]
    # 992 bytes written (HDF5 rewrites its superblock) into an 800-byte extent: the extent wins
    assert {r.write_bytes for r in written} == {800}
    assert all(r.ost_ids is None and r.stripe_count == 1 for r in written)


def test_read_only_logs(imported):
    for name in ("dlio-python-a", "dlio-python-b"):
        assert imported(name) == ()  # only <STDERR> was written
        kept = imported(name, True)
        assert kept and all(r.write_bytes == 0 and r.ost_ids for r in kept)


# --- the command line -----------------------------------------------------------------------


def test_json_contract():
    proc = iez_cli("trace", "import-darshan", log("theta-imbalanced-io"), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert isinstance(rows, list) and len(rows) == 13
    for row in rows:
        assert {"file", "write_bytes", "stripe_count", "stripe_size", "rank", "ost_ids"} <= set(row)
    shared = next(row for row in rows if row["file"] == THETA_SHARED)
    assert shared == {"file": THETA_SHARED, "write_bytes": 52_938_395_468, "stripe_count": 1,
                      "stripe_size": MIB, "rank": -1, "ost_ids": [29], "pool": None, "components": None}
    assert "ran out of record memory" in proc.stderr  # the note goes to stderr, JSON stays clean
    empty = iez_cli("trace", "import-darshan", log("empty"), "--json")
    assert empty.returncode == 0 and json.loads(empty.stdout) == []


def test_table_output():
    proc = iez_cli("trace", "import-darshan", log("e3sm-io-512ranks"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("2 write requests in ")
    assert "can_I_out_h0.nc" in proc.stdout and str(E3SM_H0_BYTES) in proc.stdout


@pytest.fixture(scope="module")
def broken_logs(tmp_path_factory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("broken")
    theta, e3sm = Path(log("theta-imbalanced-io")).read_bytes(), Path(log("e3sm-io-512ranks")).read_bytes()
    logs = {"truncated": (where / "theta-half.darshan", theta[: len(theta) // 2]),
            # only the last module (HEATMAP, not one the importer uses) is cut: still refused
            "truncated-tail": (where / "e3sm-half.darshan", e3sm[: len(e3sm) // 2]),
            "text": (where / "notes.darshan", b"this is not a Darshan log\n"),
            "empty-file": (where / "zero.darshan", b"")}
    for path, data in logs.values():
        path.write_bytes(data)
    return {kind: path for kind, (path, _) in logs.items()}


@pytest.mark.parametrize("kind", ["truncated", "truncated-tail", "text", "empty-file"])
def test_a_broken_log_is_refused_in_one_line(broken_logs, kind):
    path = broken_logs[kind]
    with pytest.raises(ValueError, match="Darshan log|truncated or corrupt") as err:
        import_darshan(path)
    assert str(path) in str(err.value)
    proc = iez_cli("trace", "import-darshan", str(path), "--json")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("iez trace: error: ") and str(path) in lines[0]


def test_a_missing_log_is_refused(tmp_path):
    proc = iez_cli("trace", "import-darshan", str(tmp_path / "nope.darshan"))
    assert proc.returncode == 2 and "nope.darshan" in proc.stderr and "Traceback" not in proc.stderr


def test_out_csv_replays_in_the_simulator(tmp_path):
    out = tmp_path / "e3sm.csv"
    proc = iez_cli("trace", "import-darshan", log("e3sm-io-512ranks"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(Path(r["file"]).name, int(r["write_bytes"]), int(r["stripe_count"]), int(r["rank"])) for r in rows] == [
        ("can_I_out_h0.nc", E3SM_H0_BYTES, 56, -1), ("can_I_out_h1.nc", 1_518_095_340, 56, -1)]
    (job,) = load_requests(out)
    assert len(job.requests) == 2
    sim = iez_cli("simulate", "--replay", str(out), "--oss", "4", "--osts-per-oss", "14", "--ost-size", "2T",
                  "--policy", "iez,rr", "--json")
    assert sim.returncode == 0, sim.stderr
    results = json.loads(sim.stdout)
    assert [r["policy"] for r in results] == ["iez", "rr"]
    assert all(r["ost_cost"] >= 1 and r["max_fill"] > 0 for r in results)


@pytest.mark.slow
def test_store(backend, tmp_path):
    db = fresh_db(backend, tmp_path, "darshan_store")
    proc = iez_cli("trace", "import-darshan", log("theta-imbalanced-io"), "--store", "--app", "theta",
                   "--db", db, "--json")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 13
    assert "stored 13 requests for 'theta'" in proc.stderr
    engine = make_engine(database_url(db))
    try:
        stored = {r["file"]: r for r in read(engine, lambda conn: app_summary(conn, "theta"))["requests"]}
        assert len(stored) == 13 and {r["source"] for r in stored.values()} == {"darshan"}
        shared = stored[THETA_SHARED]
        assert (shared["write_bytes"], shared["stripe_count"], shared["stripe_size"], shared["rank"]) == (
            52_938_395_468, 1, MIB, -1)
        assert stored["598080496"]["stripe_size"] is None  # no LUSTRE record
        again = iez_cli("trace", "import-darshan", log("theta-imbalanced-io"), "--store", "--app", "theta",
                        "--db", db)
        assert again.returncode == 0, again.stderr
        assert len(read(engine, lambda conn: app_summary(conn, "theta"))["requests"]) == 13
    finally:
        engine.dispose()


def test_store_needs_an_app_and_db_needs_store(tmp_path):
    db = fresh_db("sqlite", tmp_path, "darshan_refusals")
    no_app = iez_cli("trace", "import-darshan", log("ior-posix-16ranks"), "--store", "--db", db)
    assert no_app.returncode == 2 and "--store needs --app NAME" in no_app.stderr
    stray = iez_cli("trace", "import-darshan", log("ior-posix-16ranks"), "--db", db)
    assert stray.returncode == 2 and "--db and --app only apply with --store" in stray.stderr


# --- composite (PFL) layouts: a log written by libdarshan-util (tests/trace/data/make_pfl_log.py) ------------

PFL_LOG = Path(__file__).resolve().parent / "data" / "pfl-synthetic.darshan"
PFL_DIR = "/lustre/scratch/pfl"


def test_pfl_components_pools_dom_and_overstriping():
    r = by_file(import_darshan(PFL_LOG))
    assert sorted(r) == [f"{PFL_DIR}/{n}" for n in ("dom.dat", "over.dat", "partial.dat", "pfl.dat", "plain.dat")]
    pfl = r[f"{PFL_DIR}/pfl.dat"]
    assert (pfl.write_bytes, pfl.rank, pfl.pool) == (200 * MIB, -1, "flash")
    assert pfl.components == (Component(0, 4 * MIB, 1, MIB, "flash"), Component(4 * MIB, 64 * MIB, 4, MIB, "flash"),
                              Component(64 * MIB, EOF_END, 8, 4 * MIB, "flash"))
    assert pfl.ost_ids == (3, 4, 5, 6, 7, 0, 1, 2) and pfl.stripe_count == 8  # every component 200 MiB reaches
    dom = r[f"{PFL_DIR}/dom.dat"]
    assert dom.pool is None and dom.components == (Component(0, MIB, 0, MIB, dom=True),
                                                   Component(MIB, EOF_END, 2, MIB))
    assert dom.ost_ids == (1, 2)
    over = r[f"{PFL_DIR}/over.dat"]
    assert over.components == (Component(0, EOF_END, 4, MIB, overstriping=True),)
    partial = r[f"{PFL_DIR}/partial.dat"]  # only [0, 4 MiB) instantiated: no template, the pool stays
    assert (partial.pool, partial.components, partial.ost_ids) == ("flash", (), (6,))
    plain = r[f"{PFL_DIR}/plain.dat"]  # not composite: a pool, no template
    assert (plain.pool, plain.components, plain.ost_ids, plain.stripe_count) == ("disk", (), (8, 9), 2)


def test_the_pfl_log_is_what_its_script_writes(tmp_path):
    """The committed log and a fresh one from the script (same library) import the same."""
    spec = importlib.util.spec_from_file_location("make_pfl_log", PFL_LOG.with_name("make_pfl_log.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fresh = module.write(tmp_path / "fresh.darshan")
    assert import_darshan(fresh) == import_darshan(PFL_LOG)


def test_pfl_json_table_and_out(tmp_path):
    out = tmp_path / "pfl.csv"
    proc = iez_cli("trace", "import-darshan", str(PFL_LOG), "--json", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = {Path(r["file"]).name: r for r in json.loads(proc.stdout)}
    assert rows["pfl.dat"]["pool"] == "flash"
    assert rows["pfl.dat"]["components"] == [
        {"end": 4 * MIB, "stripe_count": 1, "stripe_size": MIB, "pool": "flash"},
        {"end": 64 * MIB, "stripe_count": 4, "stripe_size": MIB, "pool": "flash"},
        {"end": -1, "stripe_count": 8, "stripe_size": 4 * MIB, "pool": "flash"}]
    assert rows["dom.dat"]["components"][0] == {"end": MIB, "stripe_count": 0, "stripe_size": MIB, "pattern": "mdt"}
    assert rows["plain.dat"]["components"] is None and rows["plain.dat"]["pool"] == "disk"
    with open(out, newline="") as f:
        written = {Path(r["file"]).name: r for r in csv.DictReader(f)}
    assert written["pfl.dat"]["pool"] == "flash"
    assert request_policy(written["pfl.dat"]["pool"], written["pfl.dat"]["components"], "csv") == (
        "flash", by_file(import_darshan(PFL_LOG))[f"{PFL_DIR}/pfl.dat"].components)
    assert written["plain.dat"]["components"] == ""
    table = iez_cli("trace", "import-darshan", str(PFL_LOG))
    assert table.returncode == 0, table.stderr
    line = next(x for x in table.stdout.splitlines() if x.endswith("/pfl.dat"))
    assert line.split()[4:7] == ["3,4,5,6,7,0,1,2", "flash", "3"]  # OSTs, pool, components


def test_pfl_store_keeps_pool_and_template_and_leaves_the_default_unknown(tmp_path):
    db = fresh_db("sqlite", tmp_path, "darshan_pfl")
    proc = iez_cli("trace", "import-darshan", str(PFL_LOG), "--store", "--app", "pfl", "--db", db)
    assert proc.returncode == 0, proc.stderr
    engine = make_engine(database_url(db))
    try:
        stored = {Path(r["file"]).name: r for r in read(engine, lambda conn: app_summary(conn, "pfl"))["requests"]}
    finally:
        engine.dispose()
    assert stored["pfl.dat"]["pool"] == "flash" and len(stored["pfl.dat"]["components"]) == 3
    assert stored["dom.dat"]["components"][0]["pattern"] == "mdt"
    assert (stored["plain.dat"]["pool"], stored["plain.dat"]["components"]) == ("disk", None)
    assert {r["default_layout"] for r in stored.values()} == {None}  # Darshan cannot tell
