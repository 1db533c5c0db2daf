"""How good a forecast of one run is, per variable (the paper reports 99.1 % for IOR and 98.3 % for HACC-IO).

The models are fitted on every run but the last; the last run is held out
and compared, request by request in series order (rank, then file name),
with the forecast:

- ``write_bytes`` and ``stripe_count``: ``100 × (1 − MAPE)``, the mean
  absolute percentage error ``|predicted − actual| / |actual|`` over the
  held-out run's requests, clipped to [0, 100] (an actual 0 counts as no
  error when 0 was predicted, else as 100 % error);
- ``rank``: the share of requests whose predicted rank equals the actual one,
  in percent. Ranks are identities, not quantities (rank 7 for rank 8 is as
  wrong as rank 0), and a shared file's rank is -1, so a percentage error
  of the rank means nothing;
- names (reported apart as ``name_accuracy``): the share of the held-out
  run's files whose name was predicted exactly.

When the forecast and the run differ in length, the missing or extra
requests count as fully wrong: the denominator is the longer of the two.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

DEFINITION = ("per variable on the held-out last run (fit on the runs before it): write_bytes and stripe_count "
              "100 x (1 - MAPE) clipped to [0, 100]; rank: percent of requests whose predicted rank is exact")


def mape_accuracy(actual: Sequence[float], predicted: Sequence[float]) -> float:
    """``100 × (1 − MAPE)`` clipped to [0, 100]; unmatched positions count as 100 % error."""
    a, p = np.asarray(actual, dtype=float), np.asarray(predicted, dtype=float)
    n = max(len(a), len(p))
    if n == 0:
        return 100.0
    m = min(len(a), len(p))
    a, p = a[:m], p[:m]
    with np.errstate(divide="ignore", invalid="ignore"):
        errors = np.where(a == 0, np.where(p == 0, 0.0, 1.0), np.abs(p - a) / np.abs(a))
    mape = (errors.sum() + (n - m)) / n
    return float(min(100.0, max(0.0, 100.0 * (1.0 - mape))))


def match_accuracy(actual: Sequence, predicted: Sequence) -> float:
    """Percent of positions where the prediction equals the actual value (unmatched positions are wrong)."""
    n = max(len(actual), len(predicted))
    if n == 0:
        return 100.0
    return 100.0 * sum(1 for a, p in zip(actual, predicted) if a == p) / n


def name_accuracy(actual: Sequence[str | None], predicted: Sequence[str | None]) -> float:
    """Percent of the files (the longer list's count) whose name was predicted exactly."""
    n = max(len(actual), len(predicted))
    if n == 0:
        return 100.0
    return 100.0 * len(set(actual) & {p for p in predicted if p is not None}) / n


def run_accuracy(actual: Sequence, predicted: Sequence) -> dict[str, float]:
    """Accuracy per variable of a predicted run against the actual one (both sequences of requests)."""
    return {
        "write_bytes": round(mape_accuracy([r.write_bytes for r in actual], [r.write_bytes for r in predicted]), 3),
        "stripe_count": round(mape_accuracy([r.stripe_count for r in actual], [r.stripe_count for r in predicted]), 3),
        "rank": round(match_accuracy([r.rank for r in actual], [r.rank for r in predicted]), 3),
    }
