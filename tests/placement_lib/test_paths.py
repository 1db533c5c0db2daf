"""Which paths libiez considers, how it makes them absolute, and flags it must honour."""

from __future__ import annotations

import csv
import os
import sys
import time

import pytest

from conftest import (BACKENDS, MIB, PROBE_CREATES, counts_rows, layouts_below, pin_layouts, pin_probe_paths,
                      probe_setup, reset_dir)

pytestmark = pytest.mark.slow


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_errno_probe_with_every_path_pinned(backend, shared_db, runner, apps, tmp_path):
    """Pinned paths go through placement; results, errno and modes stay those of the plain calls."""
    db = shared_db(backend)
    work = tmp_path / "work"
    expected = pin_probe_paths(db, work)
    result = runner.compare([apps("errno_probe"), work], db, work, setup=probe_setup)
    result.assert_same()
    # exactly the new files are placed, including those the application opened with O_EXCL, "wx" and openat
    assert layouts_below(work) == {str(work / n): expected[str(work / n)] for n in PROBE_CREATES}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_exclude_and_include_prefixes(backend, shared_db, runner, state_dir, tmp_path):
    db = shared_db(backend)
    work = tmp_path / "work"
    names = ["skip/a", "skip/deeper/b", "skipped.txt", "keep/c", "other/d", "also/e", "top"]
    expected = pin_layouts(db, {work / n: (MIB, [i]) for i, n in enumerate(names)})

    def setup(w):
        for d in ("skip/deeper", "keep", "other", "also"):
            (w / d).mkdir(parents=True)

    files = [work / n for n in names]
    # IEZ_EXCLUDE: whole path components only ("skip" does not cover "skipped.txt"), several prefixes
    result = runner.compare(["touch", *files], db, work, setup,
                            IEZ_EXCLUDE=f"{work / 'skip'}:{work / 'other'}/")
    result.assert_same()
    assert layouts_below(work) == {str(work / n): expected[str(work / n)]
                                   for n in ("skipped.txt", "keep/c", "also/e", "top")}
    assert [(r["hits"], r["misses"]) for r in counts_rows(state_dir)] == [("4", "0")]

    # IEZ_INCLUDE: only below its prefixes, and IEZ_EXCLUDE still applies inside them
    result = runner.compare(["touch", *files], db, work, setup,
                            IEZ_INCLUDE=f"{work / 'keep'}:{work / 'skip'}", IEZ_EXCLUDE=str(work / "skip" / "deeper"))
    result.assert_same()
    assert layouts_below(work) == {str(work / n): expected[str(work / n)] for n in ("skip/a", "keep/c")}

    # the state directory is never considered, even when pinned
    inside_state = state_dir / "mine.dat"
    pin_layouts(db, {inside_state: (MIB, [1])})
    done = runner.iez(["touch", inside_state], db)
    assert done.returncode == 0 and inside_state.exists()
    assert layouts_below(state_dir) == {}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_relative_paths_and_directory_descriptors(backend, shared_db, runner, apps, tmp_path):
    db = shared_db(backend)
    work = tmp_path / "work"
    names = ["rel1", "rel2", "at1", "at2", "at3", "op1", "op2", "py_at", "sub/py_rel"]
    expected = pin_layouts(db, {work / n: (MIB, [10 + i, 20 + i]) for i, n in enumerate(names)})

    def setup(w):
        (w / "sub").mkdir()

    # relative to the working directory, with ".", ".." and "//" folded lexically
    result = runner.compare(["touch", "../rel1", ".//..//sub/../rel2"], db, work, setup, cwd=work / "sub")
    result.assert_same()
    assert layouts_below(work) == {str(work / n): expected[str(work / n)] for n in ("rel1", "rel2")}

    # openat() against a directory descriptor, opened for reading or as O_PATH
    at = apps("at_create")
    for flags, created in (([], ("at1", "at2", "at3")), (["--opath"], ("op1", "op2"))):
        args = ["sub/../at1", "./at2", "sub//..//at3"] if not flags else ["op1", "sub/./../op2"]
        result = runner.compare([at, *flags, work, *args], db, work, setup)
        result.assert_same()
        assert result.lib.returncode == 0
        assert layouts_below(work) == {str(work / n): expected[str(work / n)] for n in created}

    # Python: os.open with dir_fd, and open() of a relative name
    script = ("import os, sys\n"
              "d = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
              "fd = os.open('py_at', os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o640, dir_fd=d)\n"
              "os.write(fd, b'at'); os.close(fd)\n"
              "os.chdir(sys.argv[1])\n"
              "open('sub/../sub/py_rel', 'x').write('rel')\n")
    result = runner.compare([sys.executable, "-B", "-c", script, work], db, work, setup)
    result.assert_same()
    assert result.lib.returncode == 0, result.lib.stderr
    assert layouts_below(work) == {str(work / n): expected[str(work / n)] for n in ("py_at", "sub/py_rel")}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_application_o_excl_on_new_pinned_file(backend, shared_db, runner, state_dir, tmp_path):
    """The application's O_EXCL succeeds on a file iez just created for it, and still fails on an old one."""
    db = shared_db(backend)
    work = reset_dir(tmp_path / "work")
    expected = pin_layouts(db, {work / "new": (MIB, [4, 2]), work / "old": (MIB, [1])})
    (work / "old").write_text("before\n")
    script = ("import os, sys, errno\n"
              "fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)\n"
              "os.write(fd, b'new'); os.close(fd)\n"
              "try:\n"
              "    os.open(sys.argv[2], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)\n"
              "except OSError as e:\n"
              "    print(errno.errorcode[e.errno])\n")
    done = runner.iez([sys.executable, "-B", "-c", script, work / "new", work / "old"], db)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"EEXIST\n", b"")
    assert (work / "new").read_bytes() == b"new"
    assert os.stat(work / "new").st_mode & 0o777 == 0o600
    assert (work / "old").read_text() == "before\n"
    assert layouts_below(work) == {str(work / "new"): expected[str(work / "new")]}
    assert [(r["hits"], r["misses"], r["errors"]) for r in counts_rows(state_dir)] == [("1", "0", "0")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_wide_layouts(backend, shared_db, runner, state_dir, tmp_path):
    """800 OSTs fit the attribute; 2000 (LOV_MAX_STRIPE_COUNT) do not on ext4, so they go to the sidecar log."""
    db = shared_db(backend)
    work = tmp_path / "work"
    expected = pin_layouts(db, {work / "mid": (MIB, list(range(0, 1600, 2))),
                                work / "wide": (4 * MIB, list(range(1999, -1, -1)))})
    result = runner.compare(["touch", work / "mid", work / "wide"], db, work)
    result.assert_same()
    stored = layouts_below(work)
    logged = {}
    if (state_dir / "layouts.log").exists():
        for line in (state_dir / "layouts.log").read_text().splitlines():
            attr, path = line.split("\t")
            logged[path] = attr
    assert stored[str(work / "mid")] == expected[str(work / "mid")]
    assert {**stored, **logged} == expected  # each layout recorded whole, in one place or the other
    assert [(r["hits"], r["errors"]) for r in counts_rows(state_dir)] == [("2", "0")]


@pytest.mark.timeout(120)
def test_counts_columns_and_where_they_go(shared_db, runner, state_dir, tmp_path):
    db = shared_db("sqlite")
    work = reset_dir(tmp_path / "work")
    pin_layouts(db, {work / "a": (MIB, [1])})
    trace_dir = tmp_path / "traces"
    before = time.time()
    done = runner.iez(["touch", work / "a", work / "b"], db, IEZ_APP='my app, "quoted"', SLURM_JOB_ID="77",
                      IEZ_TRACE_DIR=trace_dir)
    after = time.time()
    assert done.returncode == 0
    # IEZ_TRACE_DIR set: the counts go there, not to $IEZ_STATE_DIR/runs
    assert not (state_dir / "runs").exists()
    files = sorted(trace_dir.iterdir())
    assert len(files) == 1 and files[0].name.startswith("iez-counts.") and files[0].suffix == ".csv"
    lines = files[0].read_text().splitlines()
    assert lines[0] == "app,job,host,pid,rank,hits,misses,errors,started,ended,skips"
    assert lines[1].startswith('"my app, ""quoted""",77,' + os.uname().nodename + ",")
    row = counts_rows_from(files[0])
    assert (row["app"], row["job"], row["rank"], row["hits"], row["misses"], row["errors"], row["skips"]) == (
        'my app, "quoted"', "77", "0", "1", "1", "0", "0")
    assert before - 1 <= float(row["started"]) <= float(row["ended"]) <= after + 1

    # IEZ_RUN_ID wins over the batch systems' variables
    (work / "a").unlink()
    done = runner.iez(["touch", work / "a"], db, IEZ_RUN_ID="run-9", SLURM_JOB_ID="77", PBS_JOBID="5")
    assert done.returncode == 0
    assert [(r["app"], r["job"]) for r in counts_rows(state_dir)] == [("touch", "run-9")]


def counts_rows_from(path):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1
    return rows[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["off", "bogus"])
def test_mode_off_does_nothing(mode, shared_db, runner, state_dir, tmp_path):
    db = shared_db("sqlite")
    work = tmp_path / "work"
    pin_layouts(db, {work / "a": (MIB, [1])})
    result = runner.compare(["touch", work / "a", work / "b"], db, work, IEZ_MODE=mode)
    result.assert_same()
    assert layouts_below(work) == {}
    assert not (state_dir / "runs").exists()
