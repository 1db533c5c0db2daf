"""ARIMA order selection and forecasts (the paper's AIPA, III-A2), exhaustive or fast.

The paper fits ARIMA(p, d, q) for every p, d, q in 0..5 (216 fits per
variable), skips the fits that do not converge, keeps the order with the
least RMSE, and fits it by exact maximum likelihood (Kalman filter). Its
``statsmodels.tsa.arima_model`` module no longer exists; this uses
``statsmodels.tsa.arima.model.ARIMA`` fitted with ``method="statespace"``,
the exact likelihood of the state-space form.

Scoring a candidate order (both searches): fit it on the series without its
last ``h`` values (``h`` = one run) and take the RMSE of its ``h``-step
forecast against them. An order with too few observations for its
parameters (``n - d < p + q + 3``) is not tried. A fit that raises, whose
optimiser reports no convergence or warns ``ConvergenceWarning``, or whose
forecast is not finite is skipped and counted; every warning is caught and
counted, nothing is printed.

- :func:`select_grid`: the paper's exhaustive search, every order of the grid.
- :func:`select_stepwise`: the fast search, after Hyndman and Khandakar's
  ``auto.arima``: ``d`` from repeated KPSS tests (difference while the
  series is not level-stationary at 5 %, at most twice), then start from
  (2,d,2), (0,d,0), (1,d,0), (0,d,1) and move to the best neighbour
  (p ± 1 and/or q ± 1, within 0..``max_order``) while it improves the score.
  It tries 10 to 30 orders instead of 216.

Both fit their candidates in parallel in a ``ProcessPoolExecutor`` of
``min(cpu count, 4)`` worker processes (:class:`Fitter`). Series are
standardised (mean 0, standard deviation 1) before fitting, which leaves the
choice unchanged and keeps the optimiser away from byte-sized magnitudes.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
import warnings
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

MAX_ORDER = 5
Order = tuple[int, int, int]

#: statuses of one candidate fit
OK, NOT_CONVERGED, FAILED, TOO_SHORT = "ok", "not-converged", "failed", "too-short"


def grid_orders(max_order: int = MAX_ORDER, max_d: int | None = None) -> list[Order]:
    """Every (p, d, q) with p, q in 0..max_order and d in 0..max_d (default max_order): 216 for 5."""
    top_d = max_order if max_d is None else max_d
    return [(p, d, q) for p in range(max_order + 1) for d in range(top_d + 1) for q in range(max_order + 1)]


def fits_in(n: int, order: Order) -> bool:
    """Whether ``n`` observations are enough for ``order``'s parameters."""
    p, d, q = order
    return n - d >= p + q + 3


def _trend(d: int) -> str:
    return "c" if d == 0 else "n"


def fit(y: np.ndarray, order: Order):
    """Exact-ML ARIMA fit; returns ``(results, warning count, converged)``, raising on failure."""
    from statsmodels.tools.sm_exceptions import ConvergenceWarning
    from statsmodels.tsa.arima.model import ARIMA

    with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
        warnings.simplefilter("always")
        results = ARIMA(np.asarray(y, dtype=float), order=order, trend=_trend(order[1])).fit(method="statespace")
    converged = bool(results.mle_retvals.get("converged", True)) if results.mle_retvals else True
    converged = converged and not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return results, len(caught), converged


def forecast_with(results, steps: int) -> np.ndarray:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return np.asarray(results.forecast(steps=steps), dtype=float)


@dataclass(frozen=True)
class Scored:
    order: Order
    score: float | None  # RMSE on the held-out tail; None unless status is OK
    status: str
    warnings: int = 0
    seconds: float = 0.0


def score_order(task: tuple[np.ndarray, int, Order]) -> Scored:
    """Fit ``order`` on all but the last ``h`` values and score its forecast of them (runs in a worker)."""
    y, h, order = task
    start = time.perf_counter()
    train, tail = y[:-h], y[-h:]
    if not fits_in(len(train), order):
        return Scored(order, None, TOO_SHORT)
    try:
        results, n_warn, converged = fit(train, order)
    except Exception:  # numerical failures of every kind: LinAlgError, ValueError, IndexError...
        return Scored(order, None, FAILED, seconds=time.perf_counter() - start)
    if not converged:
        return Scored(order, None, NOT_CONVERGED, n_warn, time.perf_counter() - start)
    predicted = forecast_with(results, h)
    if not np.all(np.isfinite(predicted)):
        return Scored(order, None, FAILED, n_warn, time.perf_counter() - start)
    rmse = float(np.sqrt(np.mean((predicted - tail) ** 2)))
    return Scored(order, rmse, OK, n_warn, time.perf_counter() - start)


@dataclass
class FitStats:
    """What a selection cost: fits tried and how they ended, warnings caught, wall time."""

    fits: int = 0
    not_converged: int = 0
    failed: int = 0
    too_short: int = 0
    warnings: int = 0
    seconds: float = 0.0

    def count(self, scored: Scored) -> None:
        if scored.status == TOO_SHORT:
            self.too_short += 1
            return
        self.fits += 1
        self.warnings += scored.warnings
        if scored.status == NOT_CONVERGED:
            self.not_converged += 1
        elif scored.status == FAILED:
            self.failed += 1

    def add(self, other: "FitStats") -> None:
        for name in ("fits", "not_converged", "failed", "too_short", "warnings", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_dict(self) -> dict:
        return {"fits": self.fits, "not_converged": self.not_converged, "failed": self.failed,
                "too_short": self.too_short, "warnings": self.warnings, "seconds": round(self.seconds, 4)}


def one_blas_thread():
    """BLAS on one thread: a fit's matrices are tiny, and OpenBLAS threads on them make fits several times slower."""
    import statsmodels.tsa.arima.model  # noqa: F401  (loads scipy's BLAS first, so that the limit reaches it)

    return threadpool_limits(limits=1, user_api="blas")


def _worker_init() -> None:
    one_blas_thread()


def _noop(_: int) -> None:
    return None


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 4))


class Fitter:
    """Runs candidate fits, in worker processes when there are several (created on first use).

    ``progress(n)`` is called after every ``n`` finished fits. Use as a
    context manager, or call :meth:`close`.
    """

    def __init__(self, workers: int | None = None, progress: Callable[[int], None] | None = None):
        self.workers = default_workers() if workers is None else max(1, workers)
        self.progress = progress
        self._pool: Executor | None = None

    def start(self) -> "Fitter":
        """Start the worker processes now (before any thread, e.g. a progress display, starts)."""
        if self.workers > 1 and self._pool is None:
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else None)
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=context, initializer=_worker_init)
            list(self._pool.map(_noop, range(2 * self.workers)))  # the workers exist from here on
        return self

    def map(self, tasks: Sequence[tuple[np.ndarray, int, Order]]) -> list[Scored]:
        runnable = [t for t in tasks if fits_in(len(t[0]) - t[1], t[2])]
        results = [Scored(t[2], None, TOO_SHORT) for t in tasks if not fits_in(len(t[0]) - t[1], t[2])]
        if len(runnable) > 1 and self.workers > 1:
            pool = self.start()._pool
            assert pool is not None  # start() made it (workers > 1)
            futures = [pool.submit(score_order, t) for t in runnable]
            for future in as_completed(futures):
                results.append(future.result())
                if self.progress:
                    self.progress(1)
        else:
            with one_blas_thread():
                for task in runnable:
                    results.append(score_order(task))
                    if self.progress:
                        self.progress(1)
        order_index = {t[2]: i for i, t in enumerate(tasks)}
        return sorted(results, key=lambda s: order_index[s.order])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> "Fitter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class Selection:
    order: Order | None  # None: no order could be scored
    score: float | None
    method: str
    stats: FitStats = field(default_factory=FitStats)
    ranking: list[tuple[Order, float]] = field(default_factory=list)  # scored orders, best first


def _finish(scored: Iterable[Scored], method: str, stats: FitStats, started: float) -> Selection:
    ok = sorted(((s.order, s.score) for s in scored if s.status == OK and s.score is not None),
                key=lambda x: (x[1], sum(x[0]), x[0]))
    stats.seconds += time.perf_counter() - started
    if not ok:
        return Selection(None, None, method, stats)
    return Selection(ok[0][0], ok[0][1], method, stats, ok)


def select_grid(y: np.ndarray, h: int, fitter: Fitter, max_order: int = MAX_ORDER,
                max_d: int | None = None) -> Selection:
    """The paper's exhaustive search: least tail RMSE over every order of the grid."""
    started, stats = time.perf_counter(), FitStats()
    y = np.asarray(y, dtype=float)
    scored = fitter.map([(y, h, order) for order in grid_orders(max_order, max_d)])
    for s in scored:
        stats.count(s)
    return _finish(scored, "grid", stats, started)


def choose_d(y: np.ndarray, max_d: int = 2, alpha: float = 0.05) -> int:
    """Differences needed for level stationarity by repeated KPSS tests (Hyndman-Khandakar)."""
    from statsmodels.tsa.stattools import kpss

    d, z = 0, np.asarray(y, dtype=float)
    while d < max_d and len(z) >= 8 and np.ptp(z) > 0:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                pvalue = kpss(z, regression="c", nlags="auto")[1]
            except (ValueError, OverflowError, np.linalg.LinAlgError):
                break
        if not math.isfinite(pvalue) or pvalue >= alpha:
            break
        z, d = np.diff(z), d + 1
    return d


def select_stepwise(y: np.ndarray, h: int, fitter: Fitter, max_order: int = MAX_ORDER, max_d: int = 2,
                    max_models: int = 60) -> Selection:
    """The fast search: KPSS for d, then a stepwise walk over (p, q) by the same tail RMSE."""
    started, stats = time.perf_counter(), FitStats()
    y = np.asarray(y, dtype=float)
    d = min(choose_d(y[:-h] if len(y) > h else y, max_d), max_order)
    seen: dict[Order, Scored] = {}

    def evaluate(orders: Iterable[Order]) -> None:
        todo = [o for o in dict.fromkeys(orders) if o not in seen and 0 <= o[0] <= max_order and 0 <= o[2] <= max_order]
        for s in fitter.map([(y, h, o) for o in todo]):
            seen[s.order] = s
            stats.count(s)

    def best() -> Scored | None:
        ok = [s for s in seen.values() if s.status == OK]
        return min(ok, key=lambda s: (s.score, sum(s.order), s.order)) if ok else None

    start_orders = [(2, d, 2), (0, d, 0), (1, d, 0), (0, d, 1)]
    evaluate(o for o in start_orders if o[0] <= max_order and o[2] <= max_order)
    current = best()
    while current is not None and len(seen) < max_models:
        p, _, q = current.order
        evaluate((p + dp, d, q + dq) for dp in (-1, 0, 1) for dq in (-1, 0, 1) if dp or dq)
        candidate = best()
        if candidate is None or candidate.order == current.order:
            break
        current = candidate
    return _finish(seen.values(), "stepwise", stats, started)


def select(y: np.ndarray, h: int, fitter: Fitter, method: str = "fast", max_order: int = MAX_ORDER) -> Selection:
    if method == "grid":
        return select_grid(y, h, fitter, max_order)
    if method in ("fast", "stepwise"):
        return select_stepwise(y, h, fitter, max_order)
    raise ValueError(f"unknown selection {method!r}: choose fast or grid")


def refit_forecast(y: np.ndarray, orders: Sequence[Order], h: int, stats: FitStats) -> tuple[Order, np.ndarray] | None:
    """Fit the first order of ``orders`` that converges on all of ``y``; its ``h``-step forecast."""
    for order in orders:
        if not fits_in(len(y), order):
            continue
        stats.fits += 1
        try:
            with one_blas_thread():
                results, n_warn, converged = fit(y, order)
        except Exception:
            stats.failed += 1
            continue
        stats.warnings += n_warn
        if not converged:
            stats.not_converged += 1
            continue
        predicted = forecast_with(results, h)
        if np.all(np.isfinite(predicted)):
            return order, predicted
        stats.failed += 1
    return None
