"""AIPA end to end: the runs of an application in, the next run's write requests out, with their accuracy.

For each variable (write bytes, stripe count, MPI rank) the runs form one
series (:mod:`iez.predict.series`); a series continued exactly by rule needs
no fit, the others get an ARIMA order (:mod:`iez.predict.arima`, ``fast`` or
``grid`` selection) refitted on the whole series and forecast one run ahead.
File names come from the inferred name templates (:mod:`iez.predict.names`).
Each predicted file keeps the Lustre policy (pool, PFL template, learnt
directory default) of the most recent run: that of the last run's file of the
same name, else of the last run's request at the same position (the one
whose name template it follows).

:func:`predict` does it twice: on every run but the last, scored against the
last (:mod:`iez.predict.accuracy`), and on every run, for the requests of
the run after the last.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np

from iez.lustre_limits import MAX_STRIPE_COUNT
from iez.predict.accuracy import DEFINITION, name_accuracy, run_accuracy
from iez.predict.arima import MAX_ORDER, FitStats, Fitter, Order, grid_orders, refit_forecast, select
from iez.predict.names import NameModel
from iez.predict.series import VARIABLES, PRequest, RunData, detect

SELECTIONS = ("fast", "grid")


class Progress(Protocol):
    def begin(self, label: str, total: int | None) -> None: ...

    def advance(self, n: int = 1) -> None: ...

    def end(self) -> None: ...


class _NoProgress:
    def begin(self, label: str, total: int | None) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def end(self) -> None:
        pass


@dataclass
class VariableModel:
    variable: str
    method: str  # "arima", "mean", or an exact rule of series.detect
    order: Order
    seasonal_order: tuple[int, int, int, int] | None
    forecast: list[int]
    score: float | None = None  # tail RMSE of the chosen order, in the variable's units
    stats: FitStats = field(default_factory=FitStats)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"method": self.method, "order": list(self.order)}
        if self.seasonal_order:
            out["seasonal_order"] = list(self.seasonal_order)
        if self.score is not None:
            out["tail_rmse"] = self.score
        out.update(self.stats.to_dict())
        return out


@dataclass
class Forecast:
    requests: list[PRequest]  # file None: no name could be predicted
    models: dict[str, VariableModel]
    templates: list[str]

    @property
    def stats(self) -> FitStats:
        total = FitStats()
        for model in self.models.values():
            total.add(model.stats)
        return total


def integral(variable: str, values: Sequence[float] | np.ndarray) -> list[int]:
    """Forecast values as the whole numbers a request holds."""
    out = []
    for v in values:
        v = float(v) if np.isfinite(v) else 0.0
        n = int(round(v))
        if variable == "write_bytes":
            n = max(0, n)
        elif variable == "stripe_count":
            n = min(MAX_STRIPE_COUNT, max(1, n))
        else:
            n = max(-1, n)
        out.append(n)
    return out


def forecast_variable(variable: str, runs: Sequence[RunData], horizon: int, selection: str, fitter: Fitter,
                      max_order: int = MAX_ORDER, progress: Progress | None = None) -> VariableModel:
    per_run = [run.values(variable) for run in runs]
    exact = detect(per_run, horizon)
    if exact is not None:
        return VariableModel(variable, exact.method, exact.order, exact.seasonal_order,
                             integral(variable, exact.forecast))
    y = np.concatenate(per_run)
    mu, sd = float(np.mean(y)), float(np.std(y)) or 1.0
    z = (y - mu) / sd
    if progress:
        progress.begin(f"{variable}: {selection} ARIMA selection ({len(y)} values)",
                       len(grid_orders(max_order)) if selection == "grid" else None)
    try:
        chosen = select(z, horizon, fitter, selection, max_order) if len(z) > horizon else None
    finally:
        if progress:
            progress.end()
    stats = chosen.stats if chosen else FitStats()
    started = time.perf_counter()
    refit = refit_forecast(z, [o for o, _ in chosen.ranking], horizon, stats) if chosen and chosen.ranking else None
    stats.seconds += time.perf_counter() - started
    if refit is None:  # nothing could be fitted (too short): the mean, ARIMA(0,0,0)'s forecast
        return VariableModel(variable, "mean", (0, 0, 0), None, integral(variable, np.full(horizon, mu)), None,
                             stats)
    order, predicted = refit
    assert chosen is not None  # a refit comes from a selection's ranking
    score = dict(chosen.ranking).get(order)
    return VariableModel(variable, "arima", order, None, integral(variable, mu + sd * predicted),
                         None if score is None else round(score * sd, 6), stats)


def forecast_next(runs: Sequence[RunData], selection: str = "fast", fitter: Fitter | None = None,
                  max_order: int = MAX_ORDER, progress: Progress | None = None) -> Forecast:
    """The requests of the run after ``runs`` (horizon: the last run's length)."""
    if not runs:
        raise ValueError("no runs to learn from")
    if selection not in SELECTIONS:
        raise ValueError(f"unknown selection {selection!r}: choose {' or '.join(SELECTIONS)}")
    horizon = len(runs[-1])
    own = fitter is None
    fitter = fitter or Fitter()
    try:
        models = {v: forecast_variable(v, runs, horizon, selection, fitter, max_order, progress) for v in VARIABLES}
    finally:
        if own:
            fitter.close()
    name_model = NameModel([[(r.file, r.rank) for r in run.requests] for run in runs])
    names = name_model.predict(models["rank"].forecast)
    last = runs[-1].requests
    by_name = {r.file: r for r in last}
    requests = []
    for i, (name, wb, sc, rk) in enumerate(zip(names, models["write_bytes"].forecast,
                                               models["stripe_count"].forecast, models["rank"].forecast)):
        policy = by_name.get(name) or last[i % len(last)]
        requests.append(PRequest(name, wb, sc, rk, policy.pool, policy.components, policy.default_layout,
                                 policy.mirror_count))
    return Forecast(requests, models, name_model.describe())


@dataclass
class Prediction:
    run_ids: list[str]
    selection: str
    final: Forecast
    held_out: str | None = None
    evaluation: Forecast | None = None
    accuracy: dict[str, float] | None = None
    name_accuracy: float | None = None
    seconds: float = 0.0

    @property
    def named_requests(self) -> list[PRequest]:
        return [r for r in self.final.requests if r.file is not None]

    def to_dict(self) -> dict:
        """The ``iez predict --json`` object."""
        final = self.final
        stats = final.stats
        if self.evaluation:
            stats.add(self.evaluation.stats)
        out = {
            "runs": len(self.run_ids),
            "run_ids": self.run_ids,
            "selection": self.selection,
            "orders": {v: list(m.order) for v, m in final.models.items()},
            "methods": {v: m.method for v, m in final.models.items()},
            "accuracy": self.accuracy if self.accuracy is not None else {v: None for v in VARIABLES},
            "accuracy_definition": DEFINITION,
            "name_accuracy": self.name_accuracy,
            "held_out_run": self.held_out,
            "requests": [r.to_dict() for r in self.named_requests],
            "unnamed": [r.to_dict() for r in final.requests if r.file is None],
            "models": {v: m.to_dict() for v, m in final.models.items()},
            "name_templates": final.templates,
            "fit_stats": stats.to_dict(),
            "seconds": round(self.seconds, 4),
        }
        if self.evaluation:
            out["held_out_orders"] = {v: list(m.order) for v, m in self.evaluation.models.items()}
            out["held_out_methods"] = {v: m.method for v, m in self.evaluation.models.items()}
        return out


def predict(runs: Sequence[RunData], selection: str = "fast", workers: int | None = None,
            max_order: int = MAX_ORDER, progress: Progress | None = None, evaluate: bool = True,
            fitter: Fitter | None = None) -> Prediction:
    """Accuracy on the held-out last run (when there are two runs or more) and the forecast of the next run."""
    started = time.perf_counter()
    own = fitter is None
    fitter = fitter or Fitter(workers, progress.advance if progress else None)
    try:
        evaluation = accuracy = names = None
        held_out = None
        if evaluate and len(runs) >= 2:
            held_out = runs[-1].run_id
            evaluation = forecast_next(runs[:-1], selection, fitter, max_order, progress)
            accuracy = run_accuracy(runs[-1].requests, evaluation.requests)
            names = round(name_accuracy([r.file for r in runs[-1].requests],
                                        [r.file for r in evaluation.requests]), 3)
        final = forecast_next(runs, selection, fitter, max_order, progress)
    finally:
        if own:
            fitter.close()
    return Prediction([r.run_id for r in runs], selection, final, held_out, evaluation, accuracy, names,
                      time.perf_counter() - started)
