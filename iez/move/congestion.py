"""Congestion detection per OST, after seed 000 (section IV.B): a threshold on the mean chunk time.

The paper averages "the chunk read times during a pre-set time window (W)". Here the window is the
side's last W chunks, whatever their OSTs (a clock that ticks in the mover's own work), and an OST's
mean is that of its chunks among them. A mean above T seconds (and a last chunk above T too) marks
the OST congested, and the next M picks of its queue pass it by. The chunk served after the skips is
a probe: within T and the OST is taken up again at once; slower, and it is passed by again, for twice
as many picks each time (up to ``BACKOFF`` x M), since an OST that stays congested costs a slow chunk
per probe. The paper used W = 40, T = 0.05 s (the time of a 1 MB I/O on an idle OST) and M = 16; so a
chunk larger than 1 MiB (a wider stripe) is judged by its time per MiB, or every OST of a file striped
at 4 MiB would look congested.

Why a window over every OST and not the OST's own last W chunks: a per-OST window of 40 chunks needs
about 10 slow chunks to move its mean past T when a competing job arrives (and 40 before a first
verdict), and every one of them holds a worker 5 times longer than a chunk elsewhere; measured on
Table I's workload that lag was most of the layout-aware mover's loss. Over the side's last 40 chunks an
OST holds W / (number of OSTs) of them, so two slow chunks mark it, and old verdicts age out with time
rather than with the OST's own (skipped, hence rare) chunks.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

WINDOW = 40
THRESHOLD_S = 0.05
SKIP = 16
#: Consecutive slow probes double an OST's skips, up to this many times M.
BACKOFF = 8
MiB = 1 << 20


@dataclass(frozen=True)
class Settings:
    window: int = WINDOW
    threshold_s: float = THRESHOLD_S
    skip: int = SKIP

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"--window {self.window} must be at least 1 chunk")
        if not self.threshold_s > 0:
            raise ValueError(f"--threshold {self.threshold_s} must be a positive number of seconds")
        if self.skip < 0:
            raise ValueError(f"--skip {self.skip} must not be negative")


class Detector:
    """Chunk times per OST for one side (reads of the source, or writes of the destination); thread-safe."""

    def __init__(self, settings: Settings, side: str, started: float | None = None):
        self.settings = settings
        self.side = side
        self.started = time.monotonic() if started is None else started
        # (OST, seconds, seconds judged, bytes) of the last W chunks
        self._window: deque[tuple[int, float, float, int]] = deque()
        self._sums: dict[int, float] = {}
        self._judged: dict[int, float] = {}
        self._counts: dict[int, int] = {}
        self._bytes: dict[int, int] = {}
        self._rate: dict[int, float] = {}  # bytes/s a congested OST served when last judged
        self._skip_left: dict[int, int] = {}
        self._backoff: dict[int, int] = {}
        self._congested: set[int] = set()
        self.events: list[dict] = []  # when an OST became congested or recovered
        self._lock = threading.Lock()

    def record(self, ost: int, seconds: float, length: int) -> None:
        s = self.settings
        real = seconds
        if length > MiB:  # T is the time of 1 MiB: a larger chunk (a wider stripe) is judged per MiB
            seconds = seconds * MiB / length
        with self._lock:
            self._window.append((ost, real, seconds, length))
            self._sums[ost] = self._sums.get(ost, 0.0) + real
            self._judged[ost] = self._judged.get(ost, 0.0) + seconds
            self._counts[ost] = self._counts.get(ost, 0) + 1
            self._bytes[ost] = self._bytes.get(ost, 0) + length
            if len(self._window) > s.window:
                old, old_s, old_judged, old_bytes = self._window.popleft()
                self._sums[old] -= old_s
                self._judged[old] -= old_judged
                self._counts[old] -= 1
                self._bytes[old] -= old_bytes
            mean = self._judged[ost] / self._counts[ost]
            if ost in self._congested:
                # a probe after the skips: served within T, the OST is taken up again; else skipped longer
                if seconds <= s.threshold_s:
                    self._congested.discard(ost)
                    self._skip_left.pop(ost, None)
                    self._backoff.pop(ost, None)
                    self._event(ost, False, seconds)
                else:
                    self._backoff[ost] = min(self._backoff.get(ost, 1) * 2, BACKOFF)
                    self._skip_left[ost] = s.skip * self._backoff[ost]
                    self._rate[ost] = self._bytes[ost] / max(self._sums[ost], 1e-9)
                return
            if mean > s.threshold_s and seconds > s.threshold_s:
                self._skip_left[ost] = s.skip
                self._congested.add(ost)
                self._rate[ost] = self._bytes[ost] / max(self._sums[ost], 1e-9)
                self._event(ost, True, mean)

    def _event(self, ost: int, congested: bool, seconds: float) -> None:
        self.events.append({"ost": ost, "side": self.side, "congested": congested,
                            "at_s": round(time.monotonic() - self.started, 3), "mean_chunk_s": round(seconds, 4)})

    def passes_by(self, ost: int) -> bool:
        """One pick of ``ost``'s queue: True (and one skip used) while it is to be skipped."""
        with self._lock:
            left = self._skip_left.get(ost, 0)
            if left <= 0:
                return False
            self._skip_left[ost] = left - 1
            return True

    def congested(self) -> set[int]:
        with self._lock:
            return set(self._congested)

    def measured(self) -> dict[int, float]:
        """Bytes/s each congested OST served when last judged (what placement may count on there)."""
        with self._lock:
            return {ost: self._rate[ost] for ost in self._congested}
