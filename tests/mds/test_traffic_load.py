"""The one rule for an OST's load from its server's counters (iez.traffic): a window of the last reports,
resets and impossible steps left out; the MDS's view and `iez status` give the same figure."""

from __future__ import annotations

import pytest

from iez.traffic import MAX_PLAUSIBLE_RATE, WINDOW_REPORTS, load, peak, steps, traffic

MiB = 1 << 20


def test_a_sustained_rate_is_seen_in_full_and_a_one_interval_burst_as_a_third():
    steady = [(t * 10.0, t * 10 * 50 * MiB) for t in range(6)]
    assert load(steady) == pytest.approx(50 * MiB)
    burst = [(0.0, 0), (10.0, 0), (20.0, 300 * MiB * 10), (30.0, 300 * MiB * 10)]
    assert WINDOW_REPORTS == 4
    assert load(burst) == pytest.approx(100 * MiB)  # 300 MiB/s for one of three intervals
    later = burst + [(40.0, 300 * MiB * 10), (50.0, 300 * MiB * 10)]
    assert load(later) == 0.0  # forgotten after three quiet intervals


def test_uneven_intervals_weigh_by_time_not_by_report():
    samples = [(0.0, 0), (1.0, 100 * MiB), (10.0, 100 * MiB)]
    assert load(samples) == pytest.approx(10 * MiB)


def test_a_reset_is_left_out_and_never_negative_or_a_jump():
    samples = [(0.0, 10_000 * MiB), (10.0, 10_500 * MiB), (20.0, 3 * MiB), (30.0, 503 * MiB)]
    assert steps(samples) == [(10.0, 500 * MiB), (10.0, 500 * MiB)]
    assert load(samples) == pytest.approx(50 * MiB)
    only_reset = [(0.0, 10_000 * MiB), (10.0, 7 * MiB)]
    assert load(only_reset) == 0.0


def test_an_impossible_step_is_a_reset_and_does_not_raise_the_peak():
    samples = [(0.0, 0), (1.0, int(MAX_PLAUSIBLE_RATE * 2)), (2.0, int(MAX_PLAUSIBLE_RATE * 2) + 200 * MiB)]
    assert load(samples) == pytest.approx(200 * MiB)
    assert peak(samples) == pytest.approx(200 * MiB)


def test_missing_counters_break_the_series():
    assert traffic(None, None) is None and traffic(5, None) == 5 and traffic(None, 7) == 7 and traffic(2, 3) == 5
    samples = [(0.0, 0), (10.0, None), (20.0, 100 * MiB), (30.0, 200 * MiB)]
    assert steps(samples) == [(10.0, 100 * MiB)]
    assert load([(0.0, 0)]) == 0.0 and load([]) == 0.0
