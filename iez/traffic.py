"""An OST's load from its server's traffic counters: the one rule the MDS's live view, ``iez status``
and the mover's placement share.

An OSS reports each OST's cumulative ``read_bytes`` and ``write_bytes`` (obdfilter ``stats``). The load
is their rise over time, smoothed over a window of the last :data:`WINDOW_REPORTS` reports (so over
``WINDOW_REPORTS - 1`` of the OSS's intervals): bytes over seconds across the window, not a mean of
per-interval rates, so a burst that fills one interval counts for a third of its rate, and a sustained
load is seen in full after three intervals (3 min at the agents' default 60 s; Lustre jobs' I/O
phases last minutes, so placement neither flaps on one checkpoint nor lags a job by more than a few
samples). A window rather than an EWMA: it forgets a finished job after exactly three intervals, and
``iez status`` recomputes it from the stored time series to the same figure the MDS used.

Counters that go down were reset (the OST remounted, the OSS restarted, the emulator started again):
that step is left out, neither a negative rate nor the whole new count as one interval's traffic.
A step faster than any OST serves (:data:`MAX_PLAUSIBLE_RATE`) is a reset too (a counter from
another target, a restart between two samples that reads as a jump); it is left out the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Reports in the smoothing window (the latest included): the load is the traffic over the last three intervals.
WINDOW_REPORTS = 4
#: 1 TiB/s: more than any single OST serves; a step above it is read as a reset, not as traffic.
MAX_PLAUSIBLE_RATE = float(1 << 40)


def traffic(read_bytes: int | None, write_bytes: int | None) -> int | None:
    """Read plus write bytes of one report (None when the OSS printed neither counter)."""
    if read_bytes is None and write_bytes is None:
        return None
    return (read_bytes or 0) + (write_bytes or 0)


def steps(samples: Iterable[tuple[float, int | None]]) -> list[tuple[float, int]]:
    """``(seconds, bytes)`` of each step between consecutive samples ``(time, counter)`` sorted by time;
    steps across a reset, a missing counter or an impossible rate are left out."""
    out, previous = [], None
    for when, counter in samples:
        if counter is None:
            previous = None
            continue
        if previous is not None:
            seconds, grew = when - previous[0], counter - previous[1]
            if seconds > 0 and 0 <= grew <= MAX_PLAUSIBLE_RATE * seconds:
                out.append((seconds, grew))
        previous = (when, counter)
    return out


def load(samples: Iterable[tuple[float, int | None]], window: int = WINDOW_REPORTS) -> float:
    """Bytes/s an OST served over the last ``window`` of ``samples`` (``(time, read+write counter)``, oldest
    first); 0 with fewer than two usable samples."""
    recent = list(samples)[-window:]
    kept = steps(recent)
    seconds = sum(s for s, _ in kept)
    return sum(b for _, b in kept) / seconds if seconds > 0 else 0.0


def peak(samples: Iterable[tuple[float, int | None]]) -> float:
    """The highest rate of any one step: what the OST has proved it can serve."""
    return max((b / s for s, b in steps(samples)), default=0.0)
