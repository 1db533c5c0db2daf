"""Who writes layout maps besides ``iez map export``: the MDS after it allocates an application, and
``iez run`` at job start (the job then reads its layouts from the map, not the DB)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from sqlalchemy import update

from conftest import BACKENDS, fresh_db
from map_helpers import MIB, REPO, add_app_layouts, attr, build_lib

from iez.config import database_url
from iez.db.engine import make_engine, write_session
from iez.db.models import AllocationRow
from iez.db.requests import RequestIn, upsert_requests
from iez.db.stats import OssReport, OstReport, ingest
from iez.maps import LayoutMap, map_file
from iez.mds.resources import Usage
from iez.mds.service import MdsConfig, MdsService


class IdleNode:
    def sample(self) -> Usage:
        return Usage(1.0, 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_mds_writes_an_apps_map_after_allocating_it(backend, tmp_path):
    db = fresh_db(backend, tmp_path, "mapmds")
    maps = tmp_path / "state" / "maps"
    engine = make_engine(database_url(db))
    svc = MdsService(engine, MdsConfig(poll_s=0.1, maps_dir=maps), sampler=IdleNode())
    try:
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        reports = [OssReport(f"oss{o}", 1, now, 5.0, 5.0, [OstReport(f"fs-OST{i:04x}", i, 100 * 2**20, 90 * 2**20)
                                                           for i in range(o, 6, 2)], interval_s=60.0) for o in range(2)]
        with write_session(engine) as s:
            for r in reports:
                ingest(s, r)
            upsert_requests(s, "ior/run 1", [RequestIn(f"/l/ior.{i}", 64 * MIB, 2) for i in range(4)])
        for r in reports:
            svc.view.apply(r)
        assert svc.allocate(["ior/run 1"]) == 4
        path = map_file(maps, "ior/run 1")
        assert path.name == "ior%2Frun%201.cdb"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(maps.stat().st_mode) == 0o711
        m = LayoutMap(path)
        assert (m.app, m.entries) == ("ior/run 1", 4)
        with engine.connect() as conn:
            rows = {r.path: r for r in conn.execute(AllocationRow.__table__.select())}
        for i in range(4):
            e = m.lookup(f"/l/ior.{i}")
            row = rows[f"/l/ior.{i}"]
            assert (e.stripe_size, e.stripe_count, e.osts) == (row.stripe_size, row.stripe_count, row.osts)
    finally:
        svc.stop()
        engine.dispose()


def run_env(db: str, state) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IEZ_") and k != "LD_PRELOAD"}
    return {**env, "IEZ_DB": db, "IEZ_STATE_DIR": str(state), "IEZ_DEBUG": "1", "PYTHONPATH": str(REPO)}


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_iez_run_gives_the_job_a_map_of_its_layouts_and_removes_it(backend, tmp_path):
    build_lib()
    db = fresh_db(backend, tmp_path, "maprun")
    out = tmp_path / "out"
    out.mkdir()
    add_app_layouts(db, "writer", [{"path": str(out / "a"), "stripe_size": MIB, "osts": [1, 2]},
                                   {"path": str(out / "p"), "stripe_size": 2 * MIB, "osts": [3], "pinned": True}])
    state = tmp_path / "state"
    proc = subprocess.run([sys.executable, "-m", "iez.cli", "run", "writer", "--", "sh", "-c",
                           f"echo x > {out}/a; echo y > {out}/p; echo z > {out}/b"],
                          env=run_env(db, state), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "writer: place mode" in proc.stderr
    assert re.search(r"layouts\.cdb (read|mapped) \(", proc.stderr), proc.stderr  # the library read the map ...
    assert attr(out / "a") == "version=1 stripe_size=1048576 stripe_count=2 osts=1,2"
    assert attr(out / "p") == "version=1 stripe_size=2097152 stripe_count=1 osts=3"  # hand-pinned ones too
    assert attr(out / "b") is None
    assert "2 files placed, 1 missed" in proc.stderr
    assert not list(state.rglob("layouts.cdb"))  # ... which is gone after the job


@pytest.mark.slow
def test_iez_run_falls_back_to_the_db_when_the_map_cannot_be_written(tmp_path):
    build_lib()
    db = fresh_db("sqlite", tmp_path, "maprunbad")
    out = tmp_path / "out"
    out.mkdir()
    add_app_layouts(db, "writer", [{"path": str(out / "a"), "stripe_size": MIB, "osts": [1, 2]},
                                   {"path": str(out / "bad"), "stripe_size": MIB, "osts": [1]}])
    engine = make_engine(database_url(db))
    with write_session(engine) as s:  # a row no map can hold (the library refuses it from the DB too)
        s.execute(update(AllocationRow).where(AllocationRow.path == str(out / "bad")).values(osts="1\x00"))
    engine.dispose()
    proc = subprocess.run([sys.executable, "-m", "iez.cli", "run", "writer", "--", "sh", "-c", f"echo x > {out}/a"],
                          env=run_env(db, tmp_path / "state"), capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)  # iez run places below the job's working directory (out is in /tmp)
    assert proc.returncode == 0, proc.stderr
    assert "writer: no layout map (" in proc.stderr and "NUL byte" in proc.stderr
    assert "mapped" not in proc.stderr
    assert attr(out / "a") == "version=1 stripe_size=1048576 stripe_count=2 osts=1,2", proc.stderr  # from IEZ_DB
