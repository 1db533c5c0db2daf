"""The accuracy definition: 100 x (1 - MAPE) per quantity, exact share for ranks, on the held-out run."""

from __future__ import annotations

import pytest

from iez.predict.accuracy import mape_accuracy, match_accuracy, name_accuracy, run_accuracy
from iez.predict.series import PRequest


def test_mape_accuracy_is_one_minus_the_mean_relative_error():
    assert mape_accuracy([100, 200], [100, 200]) == 100.0
    assert mape_accuracy([100, 200], [110, 180]) == pytest.approx(90.0)  # errors 10 % and 10 %
    assert mape_accuracy([100], [50]) == pytest.approx(50.0)


def test_mape_accuracy_is_clipped_at_zero_and_handles_zero_actuals():
    assert mape_accuracy([100], [500]) == 0.0
    assert mape_accuracy([0, 100], [0, 100]) == 100.0
    assert mape_accuracy([0, 100], [5, 100]) == pytest.approx(50.0)


def test_missing_or_extra_predictions_count_as_wrong():
    assert mape_accuracy([100, 100], [100]) == pytest.approx(50.0)
    assert mape_accuracy([100], [100, 100]) == pytest.approx(50.0)
    assert match_accuracy([0, 1, 2, 3], [0, 1, 2]) == pytest.approx(75.0)


def test_rank_accuracy_is_the_exact_match_share_and_works_for_shared_files():
    actual = [PRequest("/a", 10, 4, -1), PRequest("/b", 10, 4, 0)]
    predicted = [PRequest("/a", 10, 4, -1), PRequest("/b", 10, 4, 1)]
    assert run_accuracy(actual, predicted) == {"write_bytes": 100.0, "stripe_count": 100.0, "rank": 50.0}


def test_name_accuracy_counts_exact_names():
    assert name_accuracy(["/a", "/b"], ["/a", None]) == 50.0
    assert name_accuracy(["/a", "/b"], ["/b", "/a"]) == 100.0
