"""ARIMA selection: real exact-ML fits, the paper's grid and the fast stepwise search, quiet and counted."""

from __future__ import annotations

import numpy as np
import pytest

from iez.predict import load_runs, predict
from iez.predict.accuracy import mape_accuracy
from iez.predict.arima import (OK, Fitter, grid_orders, refit_forecast, score_order, select_grid, select_stepwise)
from iez.predict.synth import SynthSpec, write_runs


def test_the_paper_grid_has_216_orders():
    orders = grid_orders()
    assert len(orders) == len(set(orders)) == 216
    assert (5, 1, 2) in orders and (2, 1, 1) in orders


@pytest.mark.slow
def test_an_arima_forecast_of_a_noisy_series_beats_the_naive_one():
    """AR(1) noise around a level: the fitted model forecasts towards the level, naive repeats the last value."""
    rng = np.random.default_rng(11)
    h, arima_se, naive_se = 8, 0.0, 0.0
    with Fitter(1) as fitter:
        for _ in range(8):
            e = rng.normal(0, 1, 96)
            y = np.empty(96)
            y[0] = e[0]
            for t in range(1, 96):
                y[t] = 0.3 * y[t - 1] + e[t]
            train, test = 50 + y[:-h], 50 + y[-h:]
            chosen = select_stepwise(train, h, fitter, max_order=2)
            order, forecast = refit_forecast(train, [o for o, _ in chosen.ranking], h, chosen.stats)
            arima_se += float(np.sum((forecast - test) ** 2))
            naive_se += float(np.sum((train[-1] - test) ** 2))
    assert arima_se < 0.8 * naive_se


@pytest.mark.slow
def test_predict_on_noisy_runs_fits_the_sizes_and_beats_repeating_the_last_run(tmp_path):
    arima_acc, naive_acc = [], []
    for seed in (0, 1, 2):
        write_runs(SynthSpec("ior-fpp", 8, runs=5, noise=0.05, seed=seed), tmp_path / str(seed))
        runs = load_runs(tmp_path / str(seed))
        prediction = predict(runs, "fast", workers=1)
        assert prediction.evaluation.models["write_bytes"].method == "arima"
        assert prediction.accuracy["stripe_count"] == prediction.accuracy["rank"] == 100.0
        arima_acc.append(prediction.accuracy["write_bytes"])
        naive_acc.append(mape_accuracy([r.write_bytes for r in runs[-1].requests],
                                       [r.write_bytes for r in runs[-2].requests]))
    assert sum(arima_acc) > sum(naive_acc)


@pytest.mark.slow
def test_fast_selection_is_within_half_a_point_of_the_grid_with_fewer_fits(tmp_path):
    write_runs(SynthSpec("hacc-fpp", 8, runs=4, noise=0.02, seed=9), tmp_path)
    runs = load_runs(tmp_path)
    with Fitter(2) as fitter:
        grid = predict(runs, "grid", max_order=2, fitter=fitter)
        fast = predict(runs, "fast", max_order=2, fitter=fitter)
    assert fast.accuracy["write_bytes"] >= grid.accuracy["write_bytes"] - 0.5
    grid_fits = grid.final.stats.fits + grid.evaluation.stats.fits
    fast_fits = fast.final.stats.fits + fast.evaluation.stats.fits
    assert fast_fits < grid_fits


@pytest.mark.slow
def test_fits_are_counted_and_quiet_and_the_same_in_worker_processes(capfd):
    rng = np.random.default_rng(5)
    y = rng.normal(0, 1, 48)
    with Fitter(1) as serial, Fitter(2) as parallel:
        one = select_grid(y, 8, serial, max_order=2)
        two = select_grid(y, 8, parallel, max_order=2)
    assert one.ranking == two.ranking and one.order == two.order
    stats = one.stats
    assert stats.fits + stats.too_short == 27
    assert 0 <= stats.not_converged + stats.failed < stats.fits
    out, err = capfd.readouterr()
    assert out == "" and err == ""


@pytest.mark.slow
def test_an_order_with_too_few_observations_is_not_fitted():
    scored = score_order((np.arange(6, dtype=float), 2, (2, 1, 2)))
    assert scored.status == "too-short" and scored.score is None
    assert score_order((np.sin(np.arange(30.0)), 5, (1, 0, 0))).status == OK


@pytest.mark.parametrize("selection", ["grid", "fast"])
def test_a_series_too_short_for_any_order_falls_back_to_its_mean(selection):
    from iez.predict.series import PRequest, make_run

    runs = [make_run(str(k), [PRequest("/s/f", size, 1, -1)]) for k, size in enumerate((100, 104))]
    prediction = predict(runs, selection, workers=1)
    assert prediction.final.models["write_bytes"].method == "mean"
    assert prediction.final.requests == [PRequest("/s/f", 102, 1, -1)]
