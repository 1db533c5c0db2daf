"""Congestion detection per OST, after seed 000 (section IV.B): a threshold on the mean chunk time.

Each OST keeps the times of its last ``window`` chunks (W). Once the window is full, a mean above
``threshold`` seconds (T) (and a last chunk above T too) marks the OST congested, and the next
``skip`` picks of that OST's queue (M) pass it by. The chunk served after the skips is a probe: slower
than T and the OST is passed by for M more picks, within T and it is taken up again at once. (The
paper judges the window mean only; but a skipped OST serves few chunks, so its window would keep the
slow times long after the congestion moved on.) The paper used W = 40, T = 0.05 s (the time of a
1 MB I/O on an idle OST) and M = 16.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

WINDOW = 40
THRESHOLD_S = 0.05
SKIP = 16


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
        self._times: dict[int, deque[tuple[float, int]]] = {}
        self._sums: dict[int, float] = {}
        self._bytes: dict[int, int] = {}
        self._skip_left: dict[int, int] = {}
        self._congested: set[int] = set()
        self.events: list[dict] = []  # when an OST became congested or recovered
        self._lock = threading.Lock()

    def record(self, ost: int, seconds: float, length: int) -> None:
        s = self.settings
        with self._lock:
            times = self._times.setdefault(ost, deque())
            times.append((seconds, length))
            self._sums[ost] = self._sums.get(ost, 0.0) + seconds
            self._bytes[ost] = self._bytes.get(ost, 0) + length
            if len(times) > s.window:
                old, old_bytes = times.popleft()
                self._sums[ost] -= old
                self._bytes[ost] -= old_bytes
            if ost in self._congested:
                # a probe after the skips: served within T, the OST is taken up again; else skipped M more
                if seconds <= s.threshold_s:
                    self._congested.discard(ost)
                    self._skip_left.pop(ost, None)
                    self.events.append({"ost": ost, "side": self.side, "congested": False,
                                        "at_s": round(time.monotonic() - self.started, 3),
                                        "mean_chunk_s": round(seconds, 4)})
                else:
                    self._skip_left[ost] = s.skip
                return
            if len(times) < s.window:
                return
            mean = self._sums[ost] / len(times)
            if mean > s.threshold_s and seconds > s.threshold_s:
                self._skip_left[ost] = s.skip
                self._congested.add(ost)
                self.events.append({"ost": ost, "side": self.side, "congested": True,
                                    "at_s": round(time.monotonic() - self.started, 3),
                                    "mean_chunk_s": round(mean, 4)})

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
        """Bytes/s each congested OST served over its window (what placement may count on there)."""
        with self._lock:
            return {ost: self._bytes[ost] / max(self._sums[ost], 1e-9) for ost in self._congested}
