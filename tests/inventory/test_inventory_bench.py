"""``benchmarks/inventory_bench.py``: a small ingest runs, is checked against the tree and reports its rate; an
ingest that leaves the inventory short gives no rate; a scratch directory an earlier run left, ``--replan``
without its database and a ``--held`` it cannot take are refused with one line (before, tracebacks)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = str(ROOT / "benchmarks" / "inventory_bench.py")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, BENCH, *args], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_small_ingest_reports_every_record(tmp_path):
    """Into an inventory already holding 500 files of another root, which stay as they were."""
    done = run("--ingest", "300", "--held", "500", "--skip", "synthetic", "--skip", "tree", "--mysql", "none",
               "--dir", str(tmp_path / "b"), "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout[done.stdout.index("{"):])
    sqlite = figures["ingest"]["sqlite"]
    # one MKDIR; 300 files: CREAT, SATTR and CLOSE each; 30 renamed; up to 30 unlinked (not those renamed first)
    assert 3 * 300 + 30 < sqlite["records"] <= 1 + 3 * 300 + 30 + 30
    unlinked = sqlite["records"] - (1 + 3 * 300 + 30)
    assert sqlite["files_checked"] == 300 - unlinked  # the renamed kept, the unlinked gone
    assert sqlite["records_per_s"] > 0
    assert sqlite["held"] == 500  # checked by the benchmark: still 500 rows of the other root after


def test_a_directory_an_earlier_run_left_is_refused(tmp_path):
    (tmp_path / "ingest").mkdir()
    done = run("--skip", "synthetic", "--skip", "tree", "--mysql", "none", "--dir", str(tmp_path))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"{tmp_path / 'ingest'}" in done.stderr and "earlier run" in done.stderr


def test_replan_without_the_synthetic_inventory_is_refused(tmp_path):
    done = run("--skip", "ingest", "--skip", "tree", "--replan", "--dir", str(tmp_path))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "synthetic.db" in done.stderr


def test_an_ingest_that_leaves_the_inventory_short_is_not_a_rate(tmp_path, monkeypatch):
    """The rate is printed only after the inventory is checked against the tree: a consumer that dropped the
    last batch's writes would otherwise have looked fast."""
    spec = importlib.util.spec_from_file_location("inventory_bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from iez.inventory import store

    data, lines = bench.ingest_tree(tmp_path / "t", 50)
    real = store.put_files
    monkeypatch.setattr(store, "put_files", lambda conn, rows, *a, **k: real(conn, rows[1:], *a, **k))
    with pytest.raises(SystemExit, match="does not hold the tree.*missing"):
        bench.ingest(bench.fresh(str(tmp_path / "short.db")), data, lines, tmp_path)


def test_a_held_count_it_cannot_take_is_refused(tmp_path):
    for args in (("--held", "-5"), ("--held", "10", "--against", str(tmp_path))):
        done = run(*args, "--mysql", "none", "--dir", str(tmp_path / "b"))
        assert done.returncode == 2 and "Traceback" not in done.stderr and "--held" in done.stderr, args
        assert not (tmp_path / "b").exists()
