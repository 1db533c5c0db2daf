"""MPI-IO under mpirun and HDF5 under libiez: files placed, bytes intact."""

from __future__ import annotations

import shutil

import pytest

from conftest import BACKENDS, MIB, Runner, counts_rows, layouts_below, pin_layouts, reset_dir, run_cmd, tree

pytestmark = pytest.mark.slow

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
NP = 4
CHUNK = 256 * 1024
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def _mpirun(runner: Runner | None, db: str | None, exe, *args, **extra):
    """mpirun -np 4; under libiez the variables go to the ranks only (-x NAME=VALUE), never to mpirun itself."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(NP)]
    if runner is not None:
        for name, value in runner.env(db, **extra).items():
            cmd += ["-x", f"{name}={value}"]
    return run_cmd([*cmd, exe, *args], MPI_ENV, timeout=90)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_mpi_file_per_process_and_shared_file(backend, shared_db, runner, state_dir, apps, tmp_path):
    db = shared_db(backend)
    exe = apps("mpi_writer")
    work = tmp_path / "work"
    expected = pin_layouts(db, {
        work / "fpp.0": (MIB, [0, 1]),
        work / "fpp.2": (2 * MIB, [2]),
        work / "shared.dat": (MIB, [3, 1, 2, 0]),
    })

    reset_dir(work)
    plain = _mpirun(None, None, exe, work, CHUNK)
    assert plain.returncode == 0, plain.stderr.decode(errors="replace")
    reset_dir(work)
    placed = _mpirun(runner, db, exe, work, CHUNK)
    assert placed.returncode == 0, placed.stderr.decode(errors="replace")
    assert sorted(placed.stdout.splitlines()) == sorted(plain.stdout.splitlines()) == [
        f"rank {r} of {NP} ok".encode() for r in range(NP)]

    for rank in range(NP):
        assert (work / f"fpp.{rank}").read_bytes() == bytes([ord("A") + rank]) * CHUNK
    assert (work / "shared.dat").read_bytes() == b"".join(bytes([ord("a") + r]) * CHUNK for r in range(NP))
    assert layouts_below(work) == expected

    rows = counts_rows(state_dir)
    assert sorted(int(r["rank"]) for r in rows) == list(range(NP)), rows
    assert sum(int(r["hits"]) for r in rows) == 3, rows
    assert all(r["errors"] == "0" for r in rows), rows
    by_rank = {int(r["rank"]): r for r in rows}
    assert int(by_rank[0]["hits"]) >= 1 and int(by_rank[2]["hits"]) >= 1  # their own pinned files


# h5cc links HDF5 statically by default: then only the open() inside HDF5 is seen.
# With -shlib, H5Fcreate itself is interposed as well.
H5_LINKS = {"static": (), "shared": ("-shlib",)}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("link", sorted(H5_LINKS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_hdf5_file_is_placed_and_valid(backend, link, shared_db, runner, state_dir, apps, tmp_path):
    db = shared_db(backend)
    exe = apps("h5_writer", *H5_LINKS[link])
    work = reset_dir(tmp_path / "work")
    pinned, other = work / "pinned.h5", work / "other.h5"
    expected = pin_layouts(db, {pinned: (MIB, [7, 3])})

    plain = runner.plain([exe, work / "plain.h5", 5000])
    assert (plain.returncode, plain.stdout) == (0, b"wrote 5000\n"), plain.stderr
    for target in (pinned, other):
        done = runner.iez([exe, target, 5000], db)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"wrote 5000\n", b"")
        # HDF5 stores object times, so the bytes differ from the plain file's, never the size
        assert target.stat().st_size == (work / "plain.h5").stat().st_size
        assert target.read_bytes()[:8] == HDF5_SIGNATURE
        check = runner.plain([exe, target, 5000, "verify"])
        assert (check.returncode, check.stdout) == (0, b"verified 5000\n"), check.stderr
        if shutil.which("h5dump"):
            header = run_cmd(["h5dump", "-H", target])
            assert header.returncode == 0, header.stderr
            assert b'DATASET "data"' in header.stdout and b"H5T_IEEE_F64LE" in header.stdout
    (work / "plain.h5").unlink()
    assert layouts_below(work) == expected
    hits = sorted(r["hits"] for r in counts_rows(state_dir))
    assert hits == ["0", "1"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("link", sorted(H5_LINKS))
def test_hdf5_create_is_counted_once(link, shared_db, runner, state_dir, apps, tmp_path):
    """One H5Fcreate is one create: one hit or one miss (README "Counts CSV"), whichever way HDF5 is linked."""
    db = shared_db("sqlite")
    exe = apps("h5_writer", *H5_LINKS[link])
    work = reset_dir(tmp_path / "work")
    pin_layouts(db, {work / "pinned.h5": (MIB, [1])})
    for name in ("pinned.h5", "other.h5"):
        done = runner.iez([exe, work / name, 10], db)
        assert done.returncode == 0, done.stderr
    counts = sorted((r["hits"], r["misses"], r["errors"]) for r in counts_rows(state_dir))
    assert counts == [("0", "1", "0"), ("1", "0", "0")]


@pytest.mark.timeout(120)
def test_mpi_file_open_failure_leaves_what_the_plain_call_leaves(shared_db, runner, apps, tmp_path):
    """README: if the application's call fails after iez created the file, the file is removed.

    MPI_MODE_CREATE with MPI_MODE_RDONLY (or RDWR with WRONLY) is an erroneous
    access mode: MPI_File_open fails, and no file may be left behind.
    """
    db = shared_db("sqlite")
    exe = apps("mpi_open_modes")
    work = tmp_path / "work"
    names = ["create_rdonly", "create_rdwr_wronly", "missing/f", "exists", "excl_new", "wronly_new", "rdwr_new"]
    expected = pin_layouts(db, {work / n: (MIB, [i]) for i, n in enumerate(names)})

    def setup(w):
        (w / "exists").write_text("old\n")

    reset_dir(work, setup)
    plain = _mpirun(None, None, exe, work)
    plain_tree = tree(work)
    reset_dir(work, setup)
    placed = _mpirun(runner, db, exe, work, IEZ_INCLUDE=work)
    assert plain.returncode == placed.returncode == 0, placed.stderr
    assert placed.stdout == plain.stdout
    assert b"create_rdonly error" in plain.stdout and b"create_wronly ok" in plain.stdout
    assert tree(work) == plain_tree
    assert layouts_below(work) == {str(work / n): expected[str(work / n)] for n in ("excl_new", "wronly_new", "rdwr_new")}
