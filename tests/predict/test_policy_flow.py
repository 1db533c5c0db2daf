"""Lustre's policies end to end on the emulated file system: a directory whose default is a pool + PFL
template is traced (``dir_layout``), learnt (``iez run``), allocated in the pool with that template, and
placed by libiez as a composite layout; once the user changes the directory's default, the library leaves
the files to it (skips), and skips do not make the application re-trace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import update

from conftest import fresh_db, run_iez
from iez.config import Settings, database_url
from iez.db.engine import make_engine, read, write_session
from iez.db.models import OstRow
from iez.db.requests import app_summary
from iez.layout.emulated import canonical_template, parse_attr
from iez.model import EOF_END, Component
from iez.placement import PlacementSettings, place_app
from iez.predict.learn import needs_retrace
from predict_helpers import add_cluster

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
WRITER = """
import os, sys
out = sys.argv[1]
for i in range(3):
    with open(os.path.join(out, f"part.{i:04d}"), "wb") as f:
        f.write(b"x" * ((3 * i + 2) << 20))
"""
PFL = {"components": [{"end": MIB, "stripe_count": 1, "stripe_size": MIB},
                      {"end": -1, "stripe_count": 2, "stripe_size": MIB}], "pool": "flash"}
TEMPLATE = (Component(0, MIB, 1, MIB, "flash"), Component(MIB, EOF_END, 2, MIB, "flash"))
FLASH = {1, 2, 4, 5}


def attr(path: Path):
    try:
        return parse_attr(os.getxattr(path, "user.iez.layout"), str(path))
    except OSError:
        return None


def test_a_pfl_pool_default_is_learnt_placed_and_then_left_to_the_user(tmp_path):
    build = subprocess.run(["make", "-C", str(REPO / "placement_lib")], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    db, state, out = fresh_db("sqlite", tmp_path, "policy_flow"), tmp_path / "state", tmp_path / "out"
    writer = tmp_path / "writer.py"
    writer.write_text(WRITER)
    env = {"IEZ_STATE_DIR": str(state), "IEZ_DB": db, "IEZ_INCLUDE": str(out)}
    settings = Settings.from_env(env=env)
    engine = make_engine(database_url(db))

    def set_default(layout: dict) -> str:
        proc = run_iez("layout", "set-default", str(out), "--layout", json.dumps(layout), env=env)
        assert proc.returncode == 0, proc.stderr
        return canonical_template(attr(out))

    def iez_run() -> str:
        for f in out.iterdir():
            f.unlink()  # new files in the same directory, whose default stays
        proc = run_iez("run", "pfl", "--", sys.executable, str(writer), str(out), env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    try:
        out.mkdir()
        default = set_default(PFL)
        # 1: traced and learnt: the requests carry the pool, the template and the directory's default
        log = iez_run()
        assert "pfl: trace mode" in log and "3 predicted requests stored" in log
        requests = read(engine, lambda conn: app_summary(conn, "pfl"))["requests"]
        assert {(r["pool"], r["default_layout"]) for r in requests} == {("flash", default)}
        assert all(r["components"] == [{"end": MIB, "stripe_count": 1, "stripe_size": MIB, "pool": "flash"},
                                       {"end": -1, "stripe_count": 2, "stripe_size": MIB, "pool": "flash"}]
                   for r in requests)

        # the MDS allocates in the pool, with the template
        add_cluster(db)
        with write_session(engine) as session:
            session.execute(update(OstRow).where(OstRow.ost_index.in_(FLASH)).values(pools="flash"))
        placed = {a.file: a for a in place_app(engine, "pfl", PlacementSettings(), 600, 600).placed}
        assert len(placed) == 3
        for a in placed.values():
            assert a.pool == "flash" and set(a.osts) <= FLASH
            assert tuple(c.template() for c in a.components) == TEMPLATE

        # 2: placed: each file gets its composite layout in the pool
        log = iez_run()
        assert "pfl: place mode" in log and "3 files placed, 0 missed" in log
        for name, a in placed.items():
            got = attr(Path(name))
            assert got is not None and got.components == a.components, name

        # 3: the user re-stripes the directory: the library leaves the files to its new default (skips),
        # and the application is not flagged for re-tracing
        set_default({"stripe_count": 1, "stripe_size": MIB})
        log = iez_run()
        assert "0 files placed, 0 missed" in log and "3 left to Lustre" in log
        for name in placed:
            assert attr(Path(name)) is None  # the emulation applies no default to a new file itself
        assert not needs_retrace("pfl", settings)
    finally:
        engine.dispose()
        shutil.rmtree(out, ignore_errors=True)
