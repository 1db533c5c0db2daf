"""The same programs under libiez-san.so (ASan + UBSan, ASan's runtime first in LD_PRELOAD).

Any sanitizer report on stderr fails the test; placement and counts must be
what the plain build gives.
"""

from __future__ import annotations

import sys

import pytest

from conftest import (BACKENDS, MIB, PROBE_CREATES, assert_no_sanitizer_report, counts_rows, layouts_below,
                      pin_layouts, pin_probe_paths, probe_setup, reset_dir)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def test_the_sanitized_build_is_what_runs(san_runner, libiez_san):
    maps = san_runner.iez(["cat", "/proc/self/maps"], None)
    assert maps.returncode == 0, maps.stderr
    assert b"libasan.so" in maps.stdout and str(libiez_san).encode() in maps.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_touch_and_dd(backend, shared_db, san_runner, state_dir, tmp_path):
    db = shared_db(backend)
    work = tmp_path / "work"
    src = tmp_path / "src.bin"
    src.write_bytes(bytes(range(256)) * 1024)
    expected = pin_layouts(db, {work / "t1": (MIB, [1, 2]), work / "dd.out": (MIB, [3])})

    result = san_runner.compare(["touch", work / "t1", work / "t2"], db, work)
    assert_no_sanitizer_report(result.lib)
    result.assert_same()
    assert layouts_below(work) == {str(work / "t1"): expected[str(work / "t1")]}

    result = san_runner.compare(["dd", f"if={src}", f"of={work / 'dd.out'}", "bs=16K", "status=noxfer"], db, work)
    assert_no_sanitizer_report(result.lib)
    result.assert_same()
    assert (work / "dd.out").read_bytes() == src.read_bytes()
    assert layouts_below(work) == {str(work / "dd.out"): expected[str(work / "dd.out")]}
    assert sorted((r["app"], r["hits"], r["misses"]) for r in counts_rows(state_dir)) == [
        ("dd", "1", "0"), ("touch", "1", "1")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_python(backend, shared_db, san_runner, tmp_path):
    db = shared_db(backend)
    work = tmp_path / "work"
    expected = pin_layouts(db, {work / "py.txt": (MIB, [5, 4])})
    script = "import sys\nfor p in sys.argv[1:]:\n    open(p, 'w').write('x' * 10000)\n"
    result = san_runner.compare([sys.executable, "-B", "-c", script, work / "py.txt", work / "other"], db, work)
    assert_no_sanitizer_report(result.lib)
    result.assert_same()
    assert layouts_below(work) == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads(backend, shared_db, san_runner, state_dir, apps, tmp_path):
    db = shared_db(backend)
    exe = apps("threads_create")
    work = tmp_path / "work"
    expected = pin_layouts(db, {work / f"t.{i}": (MIB, [i, 64 + i]) for i in range(64)})
    for run in range(2):
        reset_dir(work)
        # thread safety is the point, not the deadline: under ASan 64 threads' first MariaDB lookups took longer
        # than 100 ms on a CI node at low load, and a create past its deadline goes unplaced (as it should)
        done = san_runner.iez([exe, work, 64, 1024], db, IEZ_TIMEOUT_MS=10000)
        assert_no_sanitizer_report(done)
        assert (done.returncode, done.stdout) == (0, b"created 64\n"), done.stderr
        assert layouts_below(work) == expected, f"run {run}"
    assert [(r["hits"], r["errors"]) for r in counts_rows(state_dir)] == [("64", "0")] * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_fork(backend, shared_db, san_runner, state_dir, apps, tmp_path):
    db = shared_db(backend)
    exe = apps("fork_create")
    work = tmp_path / "work"
    expected = pin_layouts(db, {work / "parent.dat": (MIB, [1]), work / "child.1": (MIB, [2]),
                                work / "child.2": (MIB, [3])})
    result = san_runner.compare([exe, work, 3], db, work)
    assert_no_sanitizer_report(result.lib)
    result.assert_same(stdout=False)
    assert result.lib.returncode == 0
    assert layouts_below(work) == expected
    rows = counts_rows(state_dir)
    assert len(rows) == 4
    assert sum(int(r["hits"]) for r in rows) == 3 and sum(int(r["misses"]) for r in rows) == 2


def test_errno_probe_with_a_missing_db_and_pinned_paths(shared_db, san_runner, apps, tmp_path):
    """Failure paths (no DB) and placement paths (every probe path pinned) under the sanitizers."""
    db = shared_db("sqlite")
    work = tmp_path / "work"
    expected = pin_probe_paths(db, work)
    for use, placed in ((db, PROBE_CREATES), (str(tmp_path / "nodb.db"), [])):
        result = san_runner.compare([apps("errno_probe"), work], use, work, setup=probe_setup)
        assert_no_sanitizer_report(result.lib)
        result.assert_same()
        assert layouts_below(work) == {str(work / n): expected[str(work / n)] for n in placed}


@pytest.mark.parametrize("backend", BACKENDS)
def test_signal_handlers(backend, shared_db, san_runner, state_dir, apps, tmp_path):
    """signal_actions (test_signal_actions.py): handlers behind libiez's trampolines, read back, raised, left by
    siglongjmp; the handlers' creates skip MariaDB, the program's own are placed."""
    db = shared_db(backend)
    work = tmp_path / "work"
    names = [f"{p}.{k}" for p in ("in", "ret", "out", "after") for k in range(4)]
    expected = pin_layouts(db, {work / n: (MIB, [k, 8 + k]) for k, n in enumerate(names)})
    result = san_runner.compare([apps("signal_actions"), work, 4], db, work)
    assert_no_sanitizer_report(result.lib)
    result.assert_same()
    outside = {p: t for p, t in expected.items() if p.rsplit("/", 1)[1].split(".")[0] in ("out", "after")}
    assert layouts_below(work) == (outside if backend == "mariadb" else expected)
