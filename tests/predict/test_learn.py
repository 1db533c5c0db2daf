"""``iez learn``: predictions stored as the application's requests (SQLite and MariaDB), visible to the MDS,
and the re-trace flag raised by a run that missed most of its files."""

from __future__ import annotations

import json

import pytest

from conftest import BACKENDS, fresh_db, run_iez
from iez.config import Settings, database_url
from iez.db.allocations import pending_requests
from iez.placement import PlacementSettings, place_app
from iez.db.engine import make_engine, read, write_session
from iez.db.requests import app_summary, application
from iez.predict import load_runs
from iez.predict.learn import learn as learn_runs
from iez.predict.learn import needs_retrace
from iez.predict.learn import status as learn_status
from iez.predict.synth import SynthSpec, write_runs

from predict_helpers import add_cluster

pytestmark = pytest.mark.slow

COUNTS_HEADER = "app,job,host,pid,rank,hits,misses,errors,started,ended\n"


def learn(db, state, *args):
    return run_iez("learn", *args, "--db", db, env={"IEZ_STATE_DIR": str(state)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_learn_stores_predictions_that_the_mds_sees_pending_and_allocates(backend, tmp_path):
    db = fresh_db(backend, tmp_path, "learn")
    write_runs(SynthSpec("hacc-fpp", 8, runs=3, stripe_count=4), tmp_path / "t")
    proc = learn(db, tmp_path / "state", "hacc", "--trace", str(tmp_path / "t"), "--trace-app", "hacc-io", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["stored"]["stored"] == 8 and out["accuracy"]["write_bytes"] == 100.0
    engine = make_engine(database_url(db))
    summary = read(engine, lambda conn: app_summary(conn, "hacc"))
    assert summary["pending"] == 8
    assert {(r["file"], r["write_bytes"], r["stripe_count"], r["rank"], r["source"]) for r in summary["requests"]} == {
        (f"/lustre/scratch/hacc-io/FPP1-Part{k:08d}-of-00000008.data", 803_405_824, 4, k, "predicted")
        for k in range(8)}
    with write_session(engine) as session:
        assert len(pending_requests(session, application(session, "hacc").id)) == 8

    # a new prediction replaces the old one: the files it no longer names are removed
    write_runs(SynthSpec("hacc-fpp", 4, runs=2, stripe_count=4, particles=1000, directory="/scratch/h"), tmp_path / "u")
    proc = learn(db, tmp_path / "state", "hacc", "--trace", str(tmp_path / "u"), "--trace-app", "hacc-io", "--json")
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(proc.stdout)["stored"]
    assert (stored["stored"], stored["removed"], stored["unnamed"]) == (4, 8, 0)
    summary = read(engine, lambda conn: app_summary(conn, "hacc"))
    assert sorted(r["file"] for r in summary["requests"]) == [
        f"/scratch/h/FPP1-Part{k:08d}-of-00000004.data" for k in range(4)]

    add_cluster(db)
    placed = place_app(engine, "hacc", PlacementSettings(), stale_s=600, reservation_ttl_s=600).placed
    assert len(placed) == 4 and all(a.stripe_count == 4 for a in placed)
    assert read(engine, lambda conn: app_summary(conn, "hacc"))["pending"] == 0
    engine.dispose()


def counts(directory, name, app, hits, misses, started=1_700_000_000.0):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"iez-counts.n1.{name}.csv").write_text(
        COUNTS_HEADER + f"{app},j{name},n1,{name},0,{hits},{misses},0,{started:.6f},{started + 5:.6f}\n")


def status(db, state, app, env=None) -> dict:
    proc = run_iez("learn", app, "--status", "--json", "--db", db, env={"IEZ_STATE_DIR": str(state), **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_run_missing_more_than_half_its_files_flags_the_app_until_it_learns(tmp_path):
    db, state = fresh_db("sqlite", tmp_path, "flag"), tmp_path / "state"
    settings = Settings.from_env(db=db, env={"IEZ_STATE_DIR": str(state)})
    write_runs(SynthSpec("ior-fpp", 4, runs=2), tmp_path / "t")
    runs = load_runs(tmp_path / "t")
    learn_runs(settings, "ior", runs)
    info = learn_status(settings, "ior")
    assert info["retrace"] is False and info["next_mode"] == "place" and info["predicted_requests"] == 4

    counts(tmp_path / "ok", 101, "ior", hits=3, misses=1)  # 25 % missed
    proc = run_iez("trace", "parse", str(tmp_path / "ok"), "--store", "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert not needs_retrace("ior", settings)

    counts(tmp_path / "bad", 102, "ior", hits=1, misses=3, started=1_700_000_100.0)  # 75 % missed
    proc = run_iez("trace", "parse", str(tmp_path / "bad"), "--store", "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert not needs_retrace("ior", settings, threshold=0.8)  # 75 % is not above 80 %
    info = status(db, state, "ior")
    assert info["retrace"] is True and info["next_mode"] == "trace"
    assert info["latest_run"]["miss_rate"] == 0.75 and "75%" in info["reason"]
    assert (state / "retrace" / "ior").is_file()
    assert needs_retrace("ior", settings)

    # learning again clears the flag, and the old run does not raise it again
    learn_runs(settings, "ior", runs)
    info = learn_status(settings, "ior")
    assert info["retrace"] is False and info["learned"]["max_run_id"] == 2
    assert not needs_retrace("ior", settings)


def test_the_threshold_comes_from_the_environment(tmp_path, monkeypatch):
    db, state = fresh_db("sqlite", tmp_path, "env"), tmp_path / "state"
    settings = Settings.from_env(db=db, env={"IEZ_STATE_DIR": str(state)})
    counts(tmp_path / "c", 7, "app", hits=4, misses=6)  # 60 % missed
    assert run_iez("trace", "parse", str(tmp_path / "c"), "--store", "--db", db).returncode == 0
    monkeypatch.setenv("IEZ_RETRACE_MISS_RATE", "0.6")
    assert not needs_retrace("app", settings)  # the paper's 60 % (V-b): not above it
    monkeypatch.setenv("IEZ_RETRACE_MISS_RATE", "0.5")
    assert needs_retrace("app", settings)


def test_status_of_an_unknown_app_says_trace_first(tmp_path):
    db = fresh_db("sqlite", tmp_path, "empty")
    info = status(db, tmp_path / "state", "newapp")
    assert info == {**info, "retrace": False, "predicted_requests": 0, "next_mode": "trace", "latest_run": None}


def test_skips_are_not_misses(tmp_path):
    """A run whose creates were mostly left to Lustre because the user changed the directory's default
    (skips) was predicted right: it does not flag the application."""
    db, state = fresh_db("sqlite", tmp_path, "skips"), tmp_path / "state"
    settings = Settings.from_env(db=db, env={"IEZ_STATE_DIR": str(state)})
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "iez-counts.n1.5.csv").write_text(
        COUNTS_HEADER.replace("ended", "ended,skips")
        + "app,j5,n1,5,0,1,1,0,1700000000.000000,1700000005.000000,8\n")  # 1 hit, 1 miss, 8 skips
    proc = run_iez("trace", "parse", str(tmp_path / "c"), "--store", "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert not needs_retrace("app", settings, threshold=0.5)  # 50 % of 2 is not above 50 %
    info = status(db, state, "app")
    assert info["latest_run"]["files_skipped"] == 8 and info["latest_run"]["miss_rate"] == 0.5
    assert info["retrace"] is False
