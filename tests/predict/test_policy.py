"""Predictions keep each file's Lustre policy: its pool, PFL template and learnt directory default (the most
recent run's), in ``iez predict --json``/``--out``, in the DB after ``iez learn``, and in the allocation."""

from __future__ import annotations

import csv
import json

import pytest
from sqlalchemy import update

from conftest import fresh_db, run_iez
from iez.config import Settings, database_url
from iez.db.engine import make_engine, read, write_session
from iez.db.models import OstRow
from iez.db.requests import app_summary
from iez.layout.model import request_policy
from iez.model import EOF_END, Component
from iez.placement import PlacementSettings, place_app
from iez.predict import load_runs, predict
from iez.predict.learn import learn as learn_runs
from iez.trace.csvformat import write_trace

from predict_helpers import add_cluster

MIB = 1 << 20
FLASH_PFL = ("version=2 comp=0:4194304:1048576:1:-:pool=flash comp=4194304:eof:1048576:2:-:pool=flash")
FLASH_TEMPLATE = (Component(0, 4 * MIB, 1, MIB, "flash"), Component(4 * MIB, EOF_END, 2, MIB, "flash"))
DISK_PLAIN = "version=2 comp=0:eof:1048576:2:-:pool=disk"


def write_run(directory, job: int, default: str, names: str = "/out/part.{rank}", ranks: int = 2,
              t0: float = 1_700_000_000.0) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        write_trace(directory / f"iez-trace.n1.{100 + rank}.{job}.csv", [dict(
            path=names.format(rank=rank, job=job), bytes_written=8 * MIB, file_size=8 * MIB, stripe_count=2,
            stripe_size=MIB, rank=rank, comm_size=ranks, open_time=f"{t0 + 3600 * job:.6f}", pid=100 + rank,
            host="n1", app="ckpt", job=f"j{job}", layout="", dir_layout=default)])


def test_the_next_run_takes_the_most_recent_runs_policy(tmp_path):
    """Run 1 wrote into a plain pool-disk directory, runs 2 and 3 into a flash PFL one: the prediction says
    flash PFL, with the default it was learnt under."""
    write_run(tmp_path, 1, DISK_PLAIN)
    write_run(tmp_path, 2, FLASH_PFL)
    write_run(tmp_path, 3, FLASH_PFL)
    runs = load_runs(tmp_path)
    assert [r.run_id for r in runs] == ["j1", "j2", "j3"]
    assert runs[0].requests[0].pool == "disk" and runs[0].requests[0].components == ()
    requests = predict(runs).final.requests
    assert [(r.file, r.pool, r.components, r.default_layout) for r in requests] == [
        (f"/out/part.{k}", "flash", FLASH_TEMPLATE, FLASH_PFL) for k in range(2)]


def test_renamed_files_take_the_policy_of_the_request_they_follow(tmp_path):
    """Names with a run counter are new each run: position decides, as for the name itself."""
    for job, default in ((1, FLASH_PFL), (2, DISK_PLAIN)):
        write_run(tmp_path, job, default, names="/out/ckpt{job}/part.{rank}")
    requests = predict(load_runs(tmp_path)).final.requests
    assert [r.file for r in requests] == ["/out/ckpt3/part.0", "/out/ckpt3/part.1"]
    assert {(r.pool, r.components, r.default_layout) for r in requests} == {("disk", (), DISK_PLAIN)}


def test_traces_without_layout_columns_predict_no_policy(tmp_path):
    for job in (1, 2):
        write_trace(tmp_path / f"iez-trace.n1.100.{job}.csv", [dict(
            path="/out/f", bytes_written=MIB, file_size=MIB, stripe_count=1, stripe_size=0, rank=0, comm_size=1,
            open_time=f"{1e9 + job:.6f}", pid=100, host="n1", app="a", job=f"j{job}")])
    (r,) = predict(load_runs(tmp_path)).final.requests
    assert (r.pool, r.components, r.default_layout) == (None, (), None)


@pytest.mark.slow
def test_predict_json_and_out_carry_pool_and_template(tmp_path):
    for job in (1, 2):
        write_run(tmp_path / "t", job, FLASH_PFL)
    out = tmp_path / "next.csv"
    proc = run_iez("predict", str(tmp_path / "t"), "--json", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    template = [{"end": 4 * MIB, "stripe_count": 1, "stripe_size": MIB, "pool": "flash"},
                {"end": -1, "stripe_count": 2, "stripe_size": MIB, "pool": "flash"}]
    assert [(r["file"], r["pool"], r["components"], r["default_layout"]) for r in data["requests"]] == [
        (f"/out/part.{k}", "flash", template, FLASH_PFL) for k in range(2)]
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["file", "write_bytes", "stripe_count", "rank", "pool", "components"]
    assert all(request_policy(r["pool"], r["components"], "out") == ("flash", FLASH_TEMPLATE) for r in rows)
    # the CSV (with a run column) reads back as runs with the same policy
    with open(tmp_path / "again.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, [*rows[0], "run"])
        writer.writeheader()
        writer.writerows({**r, "run": 1} for r in rows)
    assert {(q.pool, q.components) for q in load_runs(tmp_path / "again.csv")[0].requests} == {
        ("flash", FLASH_TEMPLATE)}


@pytest.mark.slow
def test_a_bad_template_in_a_requests_file_names_the_request(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps([{"file": "/s/a", "write_bytes": 1, "run": 1, "components": [{"stripe_count": 1}]}]))
    proc = run_iez("predict", str(path), "--json")
    assert proc.returncode == 2 and "request 1: components: component 0: a component needs its end" in proc.stderr


def test_learn_stores_the_policy_and_the_allocation_honours_it(tmp_path):
    """``iez learn`` stores pool, template and learnt default; the allocation the policy returns is stored
    with its layout text (pool, components) and the default; its OSTs are from the pool."""
    db = fresh_db("sqlite", tmp_path, "learn_policy")
    for job in (1, 2):
        write_run(tmp_path / "t", job, FLASH_PFL)
    settings = Settings.from_env(db=db, env={"IEZ_STATE_DIR": str(tmp_path / "state")})
    _, stored = learn_runs(settings, "ckpt", load_runs(tmp_path / "t"))
    assert stored["stored"] == 2
    engine = make_engine(database_url(db))
    try:
        requests = read(engine, lambda conn: app_summary(conn, "ckpt"))["requests"]
        assert {(r["pool"], json.dumps(r["components"]), r["default_layout"]) for r in requests} == {
            ("flash", json.dumps([{"end": 4 * MIB, "stripe_count": 1, "stripe_size": MIB, "pool": "flash"},
                                  {"end": -1, "stripe_count": 2, "stripe_size": MIB, "pool": "flash"}]),
             FLASH_PFL)}
        add_cluster(db, osts=8)
        flash = {1, 2, 5, 6}
        with write_session(engine) as session:
            session.execute(update(OstRow).where(OstRow.ost_index.in_(flash)).values(pools="flash"))
        done = place_app(engine, "ckpt", PlacementSettings(), stale_s=600, reservation_ttl_s=600)
        assert len(done.placed) == 2, done.refused
        for a in done.placed:
            assert a.pool == "flash" and set(a.osts) <= flash
            assert [(c.start, c.end, len(c.osts)) for c in a.components] == [(0, 4 * MIB, 1), (4 * MIB, EOF_END, 2)]
        summary = read(engine, lambda conn: app_summary(conn, "ckpt"))
        assert summary["pending"] == 0
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT path, layout, default_layout FROM placements").all()
            pools = conn.exec_driver_sql("SELECT pool FROM allocations WHERE state <> 'stale'").scalars().all()
        assert pools == ["flash", "flash"] and {r.default_layout for r in rows} == {FLASH_PFL}
        assert all(r.layout.startswith("version=2 comp=0:4194304:1048576:1:") for r in rows)
    finally:
        engine.dispose()
