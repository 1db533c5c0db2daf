"""The learning phase as a flow: predictions stored for the MDS, and runs that miss re-traced without manual steps.

- :func:`learn`: traces (or a Darshan log) of an application's runs →
  :func:`iez.predict.predict` → the next run's requests stored through
  :func:`iez.db.requests.upsert_requests` with source ``predicted``. The
  MDS (or ``allocate``) then allocates them like any pending request. Each
  keeps its file's pool, PFL template and learnt directory default (those of
  the most recent run), so the allocation honours them and the library
  applies it only while the directory's default is still the learnt one. The
  application's older predicted requests that the new prediction no longer
  names lose their allocation and are removed, so they stop holding OST space.
- The re-trace flag (paper III-B3 and V-b): each run under the placement
  library leaves counts of the creates it found (hits) and missed; ``iez trace
  parse --store`` or :func:`run_app` store them as ``runs`` rows. When the
  latest run stored since the last learning has a miss rate
  ``files_missed / (files_found + files_missed)`` above the threshold
  (default 0.5, ``IEZ_RETRACE_MISS_RATE`` or ``--retrace-miss-rate``; the
  paper says 50 % in III-B3 and 60 % in V-b), the application is flagged
  (skips, creates left to Lustre because a directory's default changed, are
  neither: the prediction was right, the user chose otherwise):
  a marker file ``$IEZ_STATE_DIR/retrace/<app>`` holds why. Learning removes
  it and notes the last run it had seen in ``<app>.learned`` beside it, so an
  old run never flags again. No table changes.
- :func:`run_app` (``iez run APP -- CMD``): runs the command under the
  preload library, in tracing mode when the application is flagged or has
  no predictions yet (traces in ``$IEZ_STATE_DIR/traces/<app>/<stamp>``),
  then learns from the traces of this learning phase by itself; otherwise in
  placement mode, with counts in ``$IEZ_STATE_DIR/runs/<app>/<stamp>``,
  stored as a run and checked against the threshold afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence
from urllib.parse import quote

from sqlalchemy import delete, func, select, update

from iez.config import DEFAULT_MISS_RATE as DEFAULT_MISS_RATE  # `iez predict` names the default
from iez.config import ConfigError, Settings, describe
from iez.freshness import StaleRule
from iez.db import open_db
from iez.db.engine import read, write_transaction
from iez.db.models import STALE, AllocationRow, Application, Run, WriteRequestRow
from iez.db.owners import login_user
from iez.db.requests import RequestIn, application, chunks, retire, upsert_requests
from iez.maps import start_job_map
from iez.predict.aipa import Prediction, predict
from iez.predict.scope import Scope, job_scope
from iez.runtime import find_library
from iez.predict.series import PRequest, RunData, from_request, load_runs, make_run, natural_key, runs_of_tracedir
from iez.trace.csvformat import read_counts
from iez.trace.parse import RunCounts, counts_files, summarise_counts, trace_files

RETRACE_ENV = "IEZ_RETRACE_MISS_RATE"
PREDICTED = "predicted"
SCHEDULER_RUN_IDS = ("IEZ_RUN_ID", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID")


def retrace_threshold(value: float | None = None, env: dict | None = None) -> float:
    """The miss rate above which an application is re-traced: ``value``, else ``IEZ_RETRACE_MISS_RATE``
    (:class:`iez.config.Settings`, default 0.5)."""
    if value is None:
        return Settings.from_env(env=env).retrace_miss_rate
    if not 0 <= value < 1:
        raise ConfigError(f"re-trace miss rate {value} must be in [0, 1)")
    return value


def stamp() -> str:
    """A UTC time stamp that sorts as text: ``20240102T030405123456Z``."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def app_key(app: str) -> str:
    """The application's name as one file name."""
    return quote(app, safe="") or "%00"


def _retrace_dir(settings: Settings) -> Path:
    return settings.state_dir / "retrace"


def marker_path(settings: Settings, app: str) -> Path:
    return _retrace_dir(settings) / app_key(app)


def learned_path(settings: Settings, app: str) -> Path:
    return _retrace_dir(settings) / f"{app_key(app)}.learned"


def traces_root(settings: Settings, app: str) -> Path:
    return settings.state_dir / "traces" / app_key(app)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


# ---- runs and the flag --------------------------------------------------------------------------

def _latest_run(engine, app: str, after_id: int) -> dict | None:
    def query(conn):
        row = conn.execute(
            select(Run.id, Run.started, Run.ended, Run.files_found, Run.files_missed, Run.files_skipped)
            .join(Application, Application.id == Run.app_id)
            .where(Application.name == app, Run.id > after_id)
            .order_by(Run.id.desc()).limit(1)).first()
        return None if row is None else dict(row._mapping)

    return read(engine, query)


def _predicted_count(engine, app: str) -> int:
    return read(engine, lambda conn: conn.execute(
        select(func.count(WriteRequestRow.id)).join(Application, Application.id == WriteRequestRow.app_id)
        .where(Application.name == app, WriteRequestRow.source == PREDICTED)).scalar_one())


def _max_run_id(engine, app: str) -> int:
    return read(engine, lambda conn: conn.execute(
        select(func.max(Run.id)).join(Application, Application.id == Run.app_id)
        .where(Application.name == app)).scalar_one() or 0)


def miss_rate(found: int, missed: int) -> float | None:
    total = found + missed
    return None if total == 0 else missed / total


def check_runs(settings: Settings, app: str, threshold: float | None = None, engine=None) -> dict | None:
    """Flag ``app`` when the latest run stored since it last learnt misses more than the threshold.

    Returns that run (with its ``miss_rate``), or None when there is none.
    """
    threshold = retrace_threshold(threshold)
    engine = engine or open_db(settings)
    seen = (_read_json(learned_path(settings, app)) or {}).get("max_run_id", 0)
    run = _latest_run(engine, app, int(seen or 0))
    if run is None:
        return None
    rate = miss_rate(run["files_found"], run["files_missed"])
    run = {"id": run["id"], "files_found": run["files_found"], "files_missed": run["files_missed"],
           "files_skipped": run["files_skipped"], "miss_rate": rate, "started": run["started"].isoformat() + "Z",
           "ended": run["ended"].isoformat() + "Z" if run["ended"] else None}
    if rate is not None and rate > threshold:
        marker = _read_json(marker_path(settings, app))
        if not marker or marker.get("run_id") != run["id"]:
            _write_json(marker_path(settings, app), {
                "app": app, "reason": f"run {run['id']} missed {run['files_missed']} of "
                f"{run['files_found'] + run['files_missed']} files ({rate:.0%} > {threshold:.0%})",
                "run_id": run["id"], "miss_rate": rate, "threshold": threshold,
                "flagged_at": stamp() if not marker else marker.get("flagged_at", stamp())})
    return run


def flag(settings: Settings, app: str, reason: str) -> None:
    """Mark ``app`` for re-tracing by hand (``iez learn --retrace APP``)."""
    _write_json(marker_path(settings, app), {"app": app, "reason": reason, "run_id": None, "flagged_at": stamp()})


def needs_retrace(app: str, settings: Settings | None = None, threshold: float | None = None) -> bool:
    """Whether ``app``'s next run should be traced again: its marker exists once the runs are checked."""
    settings = settings or Settings.from_env()
    check_runs(settings, app, threshold)
    return marker_path(settings, app).exists()


def status(settings: Settings, app: str, threshold: float | None = None, engine=None) -> dict:
    """What ``iez learn --status`` prints: the flag, why, the latest run, and how many predictions are stored."""
    threshold = retrace_threshold(threshold)
    engine = engine or open_db(settings)
    run = check_runs(settings, app, threshold, engine)
    marker = _read_json(marker_path(settings, app))
    predicted = _predicted_count(engine, app)
    flagged = marker is not None
    return {
        "app": app, "db": describe(settings.db_url), "retrace": flagged,
        "reason": (marker or {}).get("reason") if flagged else None,
        "threshold": threshold, "latest_run": run, "predicted_requests": predicted,
        "learned": _read_json(learned_path(settings, app)),
        "next_mode": "trace" if flagged or predicted == 0 else "place",
    }


# ---- storing predictions ------------------------------------------------------------------------

def store_predictions(settings: Settings, app: str, requests: Sequence[PRequest], replace: bool = True,
                      engine=None, owner: str | None = None) -> dict:
    """Store the named predicted requests for ``app``; with ``replace``, drop its other predicted requests."""
    engine = engine or open_db(settings)
    named = [(r.file, r) for r in requests if r.file is not None]
    owner = owner or login_user()  # a Darshan log's user (iez learn --darshan-dir), else who runs this

    def store(session) -> tuple[list[int], int]:  # may run twice (write_transaction): DB work only
        removed = 0
        ids = upsert_requests(session, app, [
            RequestIn.learnt(file, r, PREDICTED) for file, r in named], owner=owner)
        if replace:
            app_id = application(session, app).id
            keep = set(ids)
            old = [i for i in session.scalars(select(WriteRequestRow.id).where(
                WriteRequestRow.app_id == app_id, WriteRequestRow.source == PREDICTED)) if i not in keep]
            for part in chunks(old):
                live = session.scalars(select(AllocationRow.id).where(
                    AllocationRow.request_id.in_(part), AllocationRow.state != STALE)).all()
                retire(session, live)
                session.execute(update(AllocationRow).where(AllocationRow.request_id.in_(part))
                                .values(request_id=None))
                session.execute(delete(WriteRequestRow).where(WriteRequestRow.id.in_(part)))
            removed = len(old)
        return ids, removed

    ids, removed = write_transaction(engine, store)
    return {"db": describe(settings.db_url), "app": app, "stored": len(ids), "removed": removed,
            "unnamed": len(requests) - len(named)}


def _store_runs(engine, app: str, runs: Sequence[RunCounts]) -> int:
    """Counts summaries as ``runs`` rows (the same app, start and end is stored once); how many were new."""
    owner = login_user()

    def store(session) -> int:  # may run twice (write_transaction): DB work only, its count afresh
        new = 0
        app_id = application(session, app, create=True, owner=owner).id
        for run in runs:
            started = datetime.fromtimestamp(run.started, timezone.utc).replace(tzinfo=None)
            ended = datetime.fromtimestamp(run.ended, timezone.utc).replace(tzinfo=None)
            if session.scalar(select(Run.id).where(Run.app_id == app_id, Run.started == started,
                                                   Run.ended == ended)) is None:
                session.add(Run(app_id=app_id, started=started, ended=ended,
                                files_found=run.hits, files_missed=run.misses, files_skipped=run.skips))
                new += 1
        return new

    return write_transaction(engine, store)


def _looks_like_darshan(path: Path) -> bool:
    if path.suffix == ".darshan":
        return True
    try:
        head = path.read_bytes()[:512]
    except OSError:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return b"\x00" in head


def load_trace(path: Path | str, app: str | None = None) -> list[RunData]:
    """Runs from a trace directory (with ``app``, only that application's rows), a requests CSV/JSON, or a
    Darshan log (one run)."""
    path = Path(path)
    if path.is_file() and _looks_like_darshan(path):
        from iez.trace.darshan import read_log  # the darshan package is needed only here

        imported = read_log(path)
        return [make_run(str(getattr(imported, "jobid", "") or path.name),
                         [from_request(r) for r in imported.requests])]
    return load_runs(path, app)


#: Requests per ``POST /v1/requests`` (the API takes 100,000 at most; smaller bodies stay under its size limit).
API_BATCH = 20_000


def post_learning(api: str, app: str, prediction: Prediction, allocate: str | None = None) -> dict:
    """Store a prediction as ``app``'s requests through the REST API (``POST /v1/requests``, as the user the
    environment authenticates), then ``POST /v1/allocate`` with ``allocate``: a compute node learning a job at
    its end, where the DB is out of reach. Earlier predictions of the same files are updated in place; those
    this one does not name stay (the API has no replace)."""
    from iez.api.client import base_url, call

    base = base_url(api)
    named = [r.to_dict() for r in prediction.final.requests if r.file is not None]
    for r in named:
        r["source"] = PREDICTED
        r["components"] = r.get("components") or None
    stored = 0
    for n in range(0, len(named), API_BATCH):
        answer = json.loads(call(base, "POST", "/v1/requests", {"app": app, "requests": named[n:n + API_BATCH]}))
        stored += len(answer["ids"])
    out = {"api": base, "app": app, "stored": stored, "removed": 0,
           "unnamed": len(prediction.final.requests) - len(named)}
    if allocate:
        placed = json.loads(call(base, "POST", "/v1/allocate", {"app": app, "policy": allocate}, timeout=300))
        out["allocated"] = len(placed["allocations"])
        out["refused"] = len(placed.get("refused", []))
    return out


def record_learning(settings: Settings, app: str, prediction: Prediction, allocate: str | None = None,
                    replace: bool = True, owner: str | None = None) -> dict:
    """Store a prediction as ``app``'s requests (and allocate them with ``allocate``); clears the re-trace flag."""
    engine = open_db(settings)
    stored = store_predictions(settings, app, prediction.final.requests, replace, engine, owner=owner)
    if allocate:
        from iez.placement import PlacementSettings, place_app

        done = place_app(engine, app, PlacementSettings(allocate), StaleRule.from_settings(settings), settings.reservation_ttl_s)
        stored["allocated"] = len(done.placed)
        stored["refused"] = len(done.refused)
    _write_json(learned_path(settings, app), {"app": app, "max_run_id": _max_run_id(engine, app),
                                               "learned_at": stamp(), "requests": stored["stored"]})
    marker_path(settings, app).unlink(missing_ok=True)
    stored["retrace"] = False
    return stored


def learn(settings: Settings, app: str, runs: Sequence[RunData], selection: str = "fast",
          workers: int | None = None, allocate: str | None = None, progress=None,
          replace: bool = True) -> tuple[Prediction, dict]:
    """Predict the next run of ``app`` from ``runs`` and store it (:func:`record_learning`)."""
    prediction = predict(runs, selection, workers, progress=progress)
    return prediction, record_learning(settings, app, prediction, allocate, replace)


# ---- iez run ------------------------------------------------------------------------------------

def epoch_runs(settings: Settings, app: str) -> list[RunData]:
    """The traced runs of the current learning phase (since the flag was raised, else all), oldest first."""
    root = traces_root(settings, app)
    marker = _read_json(marker_path(settings, app)) or {}
    since = marker.get("flagged_at", "")
    dirs = sorted((d for d in root.iterdir() if d.is_dir() and d.name >= since and trace_files(d)),
                  key=lambda d: natural_key(d.name)) if root.is_dir() else []
    return [run for d in dirs for run in runs_of_tracedir(d, label=d.name, app=app)]


def in_scope(runs: Sequence[RunData], scope: Scope) -> list[RunData]:
    """``runs`` with only the requests of files inside ``scope`` (runs left empty dropped)."""
    kept = [make_run(run.run_id, [r for r in run.requests if r.file is None or scope.contains(r.file)])
            for run in runs]
    return [run for run in kept if run.requests]


def set_aside(settings: Settings, app: str, directory: Path) -> Path:
    """Move a failed run's trace or counts directory out of the learning phase, kept for a look."""
    target = settings.state_dir / "failed" / app_key(app) / directory.name
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(directory, target)
    return target


def run_app(settings: Settings, app: str, cmd: Sequence[str], force_trace: bool = False,
            preload: str | None = None, threshold: float | None = None, allocate: str | None = None,
            selection: str = "fast", log=sys.stderr, outputs: Sequence[str] = ()) -> int:
    """Run ``cmd`` under the library in the mode ``app`` needs, then learn or check; the command's exit status.

    Only files on the file systems of the working directory and ``outputs`` are traced and placed
    (:mod:`iez.predict.scope`). A run that fails (non-zero exit) is never learnt from, and one that created
    no file in scope (the launch failed) is not recorded as a run.
    """
    if not cmd:
        raise ValueError("no command to run: iez run APP -- CMD [ARGS...]")
    threshold = retrace_threshold(threshold)
    library = find_library(preload)  # --preload, IEZ_PRELOAD_LIB, a source tree's build, the packaged copy
    info = status(settings, app, threshold)
    mode = "trace" if force_trace or info["next_mode"] == "trace" else "place"
    run_stamp = stamp()
    directory = (traces_root(settings, app) if mode == "trace" else settings.state_dir / "runs" / app_key(app)) \
        / run_stamp
    directory.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update({"IEZ_MODE": mode, "IEZ_TRACE_DIR": str(directory), "IEZ_APP": app, "IEZ_DB": settings.db,
                "IEZ_STATE_DIR": str(settings.state_dir)})
    if not any(env.get(name) for name in SCHEDULER_RUN_IDS):
        env["IEZ_RUN_ID"] = run_stamp
    env["LD_PRELOAD"] = " ".join(p for p in (str(library), env.get("LD_PRELOAD", "")) if p)
    scope = job_scope(os.getcwd(), outputs, env)
    env.update(scope.env())
    why = info["reason"] or ("no predictions stored yet" if info["predicted_requests"] == 0 else "asked")
    print(f"iez run: {app}: {mode} mode" + (f": {why}" if mode == "trace" else "")
          + f" (files under {scope.describe()})", file=log)
    job_map = start_job_map(settings, app, directory, env, log) if mode == "place" else None  # IEZ_MAP
    try:
        code = subprocess.run(list(cmd), env=env).returncode
    except OSError as err:  # not found, not executable: nothing ran
        shutil.rmtree(directory, ignore_errors=True)
        raise ValueError(f"cannot run {cmd[0]!r}: {err.strerror}; nothing recorded") from None
    finally:
        if job_map:
            job_map.unlink(missing_ok=True)
    if code != 0 and mode == "trace":
        kept = set_aside(settings, app, directory)
        print(f"iez run: {app}: not learnt: the command failed (exit {code}); its traces are left out of learning "
              f"(kept in {kept})", file=log)
        return code
    if mode == "trace":
        try:
            runs = in_scope(epoch_runs(settings, app), scope)
            if not runs:
                raise ValueError(f"the run left no write requests in {directory}")
            prediction, stored = learn(settings, app, runs, selection, allocate=allocate)
        except ValueError as err:
            print(f"iez run: {app}: not learnt: {err}", file=log)
            return code
        acc = prediction.accuracy
        print(f"iez run: {app}: learnt from {len(runs)} traced run(s): {stored['stored']} predicted requests "
              f"stored" + (f", accuracy {acc}" if acc else "") +
              (f", {stored['unnamed']} without a predictable name" if stored["unnamed"] else ""), file=log)
        return code
    counts = [row for path in counts_files(directory) for row in read_counts(path) if row.app == app]
    if code != 0 and not any(row.hits or row.misses or row.skips for row in counts):
        kept = set_aside(settings, app, directory)
        print(f"iez run: {app}: the command failed (exit {code}) before creating any file under "
              f"{scope.describe()}: not recorded as a run (counts kept in {kept})", file=log)
        return code
    if counts:
        engine = open_db(settings)
        _store_runs(engine, app, summarise_counts(counts))
        run = check_runs(settings, app, threshold, engine)
        if run and (run["miss_rate"] is not None or run["files_skipped"]):
            flagged = marker_path(settings, app).exists()
            rate = "" if run["miss_rate"] is None else f" ({run['miss_rate']:.0%})"
            print(f"iez run: {app}: {run['files_found']} files placed, {run['files_missed']} missed{rate}"
                  + (f", {run['files_skipped']} left to Lustre (directory default changed)"
                     if run["files_skipped"] else "") + ("; its next run will be traced again" if flagged else ""),
                  file=log)
    return code
