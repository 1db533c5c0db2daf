"""``iez run APP -- CMD``: a real Python writer under libiez, traced and learnt first, placed next, and traced
again by itself once a run misses most of its files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import fresh_db, run_iez
from iez.config import Settings, database_url
from iez.placement import PlacementSettings, place_app
from iez.db.engine import make_engine, read
from iez.db.requests import app_summary
from iez.layout.emulated import parse_attr
from iez.predict.learn import needs_retrace
from predict_helpers import add_cluster

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
WRITER = """
import os, sys
out, prefix = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
for i in range(3):
    with open(os.path.join(out, f"{prefix}.{i:04d}"), "wb") as f:
        f.write(b"x" * ((i + 1) << 20))
"""


def layout(path: Path):
    try:
        return parse_attr(os.getxattr(path, "user.iez.layout"), str(path))
    except OSError:
        return None


def test_first_run_traced_then_placed_then_retraced_after_misses(tmp_path):
    build = subprocess.run(["make", "-C", str(REPO / "placement_lib")], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    db, state, out = fresh_db("sqlite", tmp_path, "run"), tmp_path / "state", tmp_path / "out"
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    env = {"IEZ_STATE_DIR": str(state), "IEZ_DB": db, "IEZ_INCLUDE": str(out), "IEZ_DEFAULT_STRIPE_COUNT": "2"}
    settings = Settings.from_env(env=env)
    engine = make_engine(database_url(db))

    def iez_run(prefix: str):
        if out.exists():
            shutil.rmtree(out)  # a fresh output directory, as a new job has
        proc = run_iez("run", "writer", "--", sys.executable, str(writer), str(out), prefix, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    # 1: no predictions yet -> traced, then learnt by itself
    log = iez_run("part")
    assert "writer: trace mode: no predictions stored yet" in log and "3 predicted requests stored" in log
    assert all(layout(p) is None for p in out.iterdir())
    summary = read(engine, lambda conn: app_summary(conn, "writer"))
    assert [(r["file"], r["write_bytes"], r["stripe_count"], r["source"]) for r in summary["requests"]] == [
        (str(out / f"part.{i:04d}"), (i + 1) * MIB, 2, "predicted") for i in range(3)]

    # the MDS allocates the predicted requests
    add_cluster(db)
    placed = {a.file: a for a in place_app(engine, "writer", PlacementSettings(), stale_s=600, reservation_ttl_s=600).placed}
    assert len(placed) == 3

    # 2: placed: every file is created with its allocated layout
    log = iez_run("part")
    assert "writer: place mode" in log and "3 files placed, 0 missed" in log
    for name, allocation in placed.items():
        got = layout(Path(name))
        assert got is not None, name
        assert (got.stripe_size, tuple(got.osts)) == (allocation.stripe_size, tuple(allocation.osts))
    assert not needs_retrace("writer", settings)

    # 3: the job writes other files: all missed -> flagged
    log = iez_run("other")
    assert "0 files placed, 3 missed" in log and "next run will be traced again" in log
    assert needs_retrace("writer", settings)

    # 4: traced again without a manual step, and learnt from this run alone
    log = iez_run("other")
    assert "writer: trace mode: run" in log and "learnt from 1 traced run" in log
    assert not needs_retrace("writer", settings)
    summary = read(engine, lambda conn: app_summary(conn, "writer"))
    assert [r["file"] for r in summary["requests"]] == [str(out / f"other.{i:04d}") for i in range(3)]
    assert summary["pending"] == 3
    engine.dispose()


def test_run_options_may_follow_the_app_and_a_missing_library_is_one_line(tmp_path):
    env = {"IEZ_STATE_DIR": str(tmp_path / "state"), "IEZ_DB": str(tmp_path / "iez.db")}
    proc = run_iez("run", "app", "--preload", str(tmp_path / "nope.so"), "--", "true", env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"iez run: error: --preload={tmp_path / 'nope.so'} does not exist (the preload " \
        "library libiez.so)"
    proc = run_iez("run", "app", env=env)
    assert proc.returncode == 2 and "no command to run" in proc.stderr
