"""Runs as time series (paper III-A2), and the series that need no model.

A run is the list of write requests one execution of an application made
(file, write bytes, stripe count, MPI rank), ordered by rank then file name.
Concatenating the runs in order gives one series per variable
(:data:`VARIABLES`); the forecast horizon is one run's length (the last
run's), so forecasting "the next ``h`` values" forecasts the next run.

Series that a model would only approximate are recognised and continued
exactly (:func:`detect`), in this order:

- ``constant``: every value equal (the stripe count of every workload, the
  sizes of a noise-free FPP run) — continued as that value;
- ``repeat``: a single run, so nothing is known across runs — the next run
  is taken to repeat it (the paper traces one run and places the next);
- ``periodic``: every run identical (ranks ``0..N-1`` each run, equal
  per-rank sizes) — the next run repeats the last;
- ``linear``: a constant non-zero step between consecutive values (a
  counter) — continued with that step;
- ``seasonal-linear``: three or more runs of one length where each run is
  the previous one plus the same per-position change — continued likewise.

Each carries the ARIMA order it is equivalent to: ``(0,0,0)`` with a mean
for ``constant``; ``(0,1,0)`` with drift for ``linear``; for the run-wise
ones ``(0,0,0)`` on the seasonally differenced series, i.e. seasonal order
``(0,1,0)`` (``(0,2,0)`` for ``seasonal-linear``) with the run length as the
period.

:func:`load_runs` reads the inputs ``iez predict`` takes: a directory of
runs (``run-*`` subdirectories of tracing-mode CSV files, or one directory
whose rows carry several job ids), a requests CSV or JSON with a ``run``
column, or a single tracing-mode CSV file. Each request keeps its file's
Lustre policy (``pool``, ``components`` and ``default_layout``, from the
trace's layout columns or the requests file's columns of those names): it is
not forecast, the next run's files take the most recent run's
(:func:`iez.predict.aipa.forecast_next`).

Given an application name, trace files yield only the rows of that
application (their ``app`` column, the library's ``IEZ_APP``): a trace
directory several applications share never lends one application's files to
another (:class:`OtherApps` when it holds none of the one asked for).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from iez.errors import InputError
from iez.layout.emulated import canonical_template, parse_attr
from iez.layout.model import components_from_json, request_policy
from iez.model import Component
from iez.trace.csvformat import TRACE_COLUMNS, TRACE_COLUMNS_V1, read_trace
from iez.trace.parse import Request, TraceDir, merge_requests, trace_files
from iez.trace.policy import template_json

VARIABLES = ("write_bytes", "stripe_count", "rank")


@dataclass(frozen=True)
class PRequest:
    """One write request of a run, observed or predicted (``file`` None: no name could be predicted)."""

    file: str | None
    write_bytes: int
    stripe_count: int
    rank: int
    pool: str | None = None
    components: tuple[Component, ...] = ()  # PFL template
    default_layout: str | None = None  # the directory default it was learnt under ("" none, None unknown)
    mirror_count: int = 1  # copies of the file (FLR mirrors) it had

    def to_dict(self) -> dict:
        """``file, write_bytes, stripe_count, rank``, and ``pool``, ``components`` (the contract's template list,
        or null) and ``default_layout``; ``mirror_count`` when the file has mirrors."""
        out = {"file": self.file, "write_bytes": self.write_bytes, "stripe_count": self.stripe_count,
               "rank": self.rank, "pool": self.pool, "components": template_json(self.components),
               "default_layout": self.default_layout}
        if self.mirror_count > 1:
            out["mirror_count"] = self.mirror_count
        return out


def from_dict(d: dict | list, where: str) -> PRequest:
    """A run's request from :meth:`PRequest.to_dict`'s object (``where`` names it in errors); a list is the
    Darshan import state's older record, ``[file, write_bytes, stripe_count, rank, pool]``."""
    if isinstance(d, list):
        return PRequest(*d)
    components = components_from_json(d["components"], where) if d.get("components") else ()
    return PRequest(d["file"], d["write_bytes"], d["stripe_count"], d["rank"], d.get("pool"), components,
                    d.get("default_layout"), d.get("mirror_count", 1))


def from_request(r: Request) -> PRequest:
    """A parsed trace request as a run's request, its policy kept."""
    return PRequest(r.file, r.write_bytes, r.stripe_count, r.rank, r.pool, r.components, r.default_layout,
                    r.mirror_count)


@dataclass(frozen=True)
class RunData:
    run_id: str
    requests: tuple[PRequest, ...]

    def values(self, variable: str) -> np.ndarray:
        return np.array([getattr(r, variable) for r in self.requests], dtype=float)

    def __len__(self) -> int:
        return len(self.requests)


def ordered(requests: Sequence[PRequest]) -> tuple[PRequest, ...]:
    """Requests in series order: by rank, then file name."""
    return tuple(sorted(requests, key=lambda r: (r.rank, r.file or "")))


def make_run(run_id: str, requests: Sequence[PRequest]) -> RunData:
    return RunData(str(run_id), ordered(requests))


def natural_key(text: str) -> list:
    """``run-2`` before ``run-10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


# ---- reading runs -------------------------------------------------------------------------------

class OtherApps(InputError):
    """Traces hold rows, but none of the application asked for; the message names the ones they hold."""


def _only_app(rows: list, app: str | None, seen: set[str] | None) -> list:
    if seen is not None:
        seen.update(r.app for r in rows)
    return rows if app is None else [r for r in rows if r.app == app]


def runs_of_tracedir(directory: Path, label: str | None = None, app: str | None = None,
                     seen: set[str] | None = None) -> list[RunData]:
    """The runs (one per job id) in a trace directory; with ``app``, of that application's rows alone
    (``seen`` collects every application the rows name)."""
    traces = TraceDir(directory)
    traces.rows = _only_app(traces.rows, app, seen)
    traces.counts = [c for c in traces.counts if app is None or c.app == app]
    first_open: dict[str, float] = {}
    for row in traces.rows:
        first_open[row.job] = min(row.open_time, first_open.get(row.job, row.open_time))
    runs = []
    for job in sorted({r.job for r in traces.rows}, key=lambda j: (first_open[j], natural_key(j))):
        parsed = traces.run(job)
        runs.append(make_run(job or label or directory.name, [from_request(r) for r in parsed.requests]))
    return [r for r in runs if r.requests]


def _int_field(row: dict, key: str, where: str) -> int:
    value = row.get(key)
    if value is None or value == "":
        raise ValueError(f"{where}: missing {key!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {key} {value!r} is not a number") from None
    if not number.is_integer():
        raise ValueError(f"{where}: {key} {value!r} is not a whole number")
    return int(number)


def _default_layout(value, where: str) -> str | None:
    """A requests file's ``default_layout``: absent or null unknown, ``""`` none, else layout text (canonical)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{where}: default_layout must be layout text, got {value!r}")
    return canonical_template(parse_attr(value, f"{where}: default_layout")) if value else ""


def _runs_of_records(records: list[dict], source: str) -> list[RunData]:
    groups: dict[str, list[PRequest]] = {}
    for i, rec in enumerate(records):
        where = f"{source}: request {i + 1}"
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: expected an object with file, write_bytes, stripe_count, rank, run")
        file = rec.get("file") or rec.get("path")
        if not file:
            raise ValueError(f"{where}: missing 'file'")
        run = str(rec.get("run", rec.get("job", "")) or "")
        pool, components = request_policy(rec.get("pool"), rec.get("components"), where)
        groups.setdefault(run, []).append(PRequest(
            str(file), _int_field(rec, "write_bytes", where),
            _int_field(rec, "stripe_count", where) if rec.get("stripe_count") not in (None, "") else 1,
            _int_field(rec, "rank", where) if rec.get("rank") not in (None, "") else 0,
            pool, components, _default_layout(rec.get("default_layout"), where),
            _int_field(rec, "mirror_count", where) if rec.get("mirror_count") not in (None, "") else 1))
    return [make_run(run, reqs) for run, reqs in sorted(groups.items(), key=lambda kv: natural_key(kv[0]))]


def _read_requests_file(path: Path, app: str | None = None, seen: set[str] | None = None) -> list[RunData]:
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        if isinstance(data, dict):
            data = data.get("requests", data.get("runs"))
            if data and isinstance(data[0], dict) and "requests" in data[0]:  # [{"run", "requests": [...]}]
                data = [dict(r, run=run.get("run", i)) for i, run in enumerate(data) for r in run["requests"]]
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON list of requests or an object with 'requests'")
        return _runs_of_records(data, str(path))
    header = next(csv.reader([stripped.splitlines()[0] if stripped else ""]), [])
    if header in (list(TRACE_COLUMNS), list(TRACE_COLUMNS_V1)):  # one tracing-mode CSV file: its jobs are the runs
        rows = _only_app(read_trace(path), app, seen)
        runs = []
        for job in sorted({r.job for r in rows}, key=natural_key):
            merged = merge_requests([r for r in rows if r.job == job])
            runs.append(make_run(job, [from_request(r) for r in merged]))
        return runs
    if "write_bytes" not in header:
        raise ValueError(f"{path}: not a requests CSV (header needs file, write_bytes, stripe_count, rank[, run]) "
                         "nor JSON")
    return _runs_of_records(list(csv.DictReader(text.splitlines())), str(path))


def load_runs(path: Path | str, app: str | None = None) -> list[RunData]:
    """The runs at ``path`` in run order (see the module text), with ``app`` only that application's traced
    rows; ValueError when there are none (:class:`OtherApps` when the traces are of other applications)."""
    path = Path(path)
    seen: set[str] = set()
    if path.is_dir():
        if trace_files(path):
            runs = runs_of_tracedir(path, app=app, seen=seen)
        else:
            subdirs = sorted((d for d in path.iterdir() if d.is_dir() and trace_files(d)),
                             key=lambda d: natural_key(d.name))
            if not subdirs:
                raise ValueError(f"{path}: no iez-trace.*.csv files in it nor in run-* subdirectories")
            runs = [run for d in subdirs for run in runs_of_tracedir(d, label=d.name, app=app, seen=seen)]
    elif path.is_file():
        runs = _read_requests_file(path, app, seen)
    else:
        raise ValueError(f"{path}: no such file or directory")
    if app is not None and seen and app not in seen:
        names = ", ".join(repr(a) for a in sorted(seen))
        raise OtherApps(f"{path}: no traces of application {app!r}; they are of {names} (the library's "
                        f"IEZ_APP, else the program's name): give --trace-app NAME to learn from those")
    runs = [r for r in runs if r.requests]
    if not runs:
        raise ValueError(f"{path}: no write requests in any run")
    return runs


# ---- degenerate series --------------------------------------------------------------------------

@dataclass(frozen=True)
class Exact:
    """A series continued by rule, without a fit."""

    method: str
    forecast: np.ndarray
    order: tuple[int, int, int]
    seasonal_order: tuple[int, int, int, int] | None = None


def _tile(run: np.ndarray, horizon: int) -> np.ndarray:
    reps = -(-horizon // len(run))
    return np.tile(run, reps)[:horizon]


def detect(runs: Sequence[np.ndarray], horizon: int) -> Exact | None:
    """The exact continuation of the series made of ``runs`` for ``horizon`` values, or None."""
    runs = [np.asarray(r, dtype=float) for r in runs if len(r)]
    if not runs or horizon < 1:
        return None
    y = np.concatenate(runs)
    last, period = runs[-1], len(runs[-1])
    if np.all(y == y[0]):
        return Exact("constant", np.full(horizon, y[0]), (0, 0, 0))
    if len(runs) == 1:
        return Exact("repeat", _tile(last, horizon), (0, 0, 0), (0, 1, 0, period))
    same_length = all(len(r) == period for r in runs)
    if same_length and all(np.array_equal(r, last) for r in runs):
        return Exact("periodic", _tile(last, horizon), (0, 0, 0), (0, 1, 0, period))
    steps = np.diff(y)
    if len(y) >= 3 and np.all(steps == steps[0]) and steps[0] != 0:
        return Exact("linear", y[-1] + steps[0] * np.arange(1, horizon + 1), (0, 1, 0))
    if same_length and len(runs) >= 3 and period >= 1:
        deltas = [b - a for a, b in zip(runs, runs[1:])]
        if all(np.array_equal(d, deltas[0]) for d in deltas) and np.any(deltas[0] != 0):
            out: list[np.ndarray] = []
            current = last
            while sum(len(o) for o in out) < horizon:
                current = current + deltas[0]
                out.append(current)
            return Exact("seasonal-linear", np.concatenate(out)[:horizon], (0, 0, 0), (0, 2, 0, period))
    return None
