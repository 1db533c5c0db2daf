"""How the MDS's DB is doing, known without asking it: for ``/metrics`` and a log that says an outage once.

Every DB operation of the control loop and of the report writer runs inside :meth:`DbHealth.attempt`,
which records when it started, when the DB last answered and the last error. A DB that stalls (a lock
held elsewhere, a stopped server) does not raise: the operation just waits. A watchdog thread therefore
judges the DB *down* when an operation has waited longer than ``stall_s`` or the last one failed, logs
that once per episode (ERROR, with the operation and the error), and logs one summary when the DB
answers again (how long, how many failed attempts). ``/metrics`` reads only this object and the
in-memory view, so a scrape answers while the DB does not (issue 30 item 4).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time

log = logging.getLogger("iez.mds")

#: An operation waiting this long means the DB is not answering.
DEFAULT_STALL_S = 10.0


class DbHealth:
    def __init__(self, stall_s: float = DEFAULT_STALL_S, clock=time.time):
        self.stall_s = stall_s
        self.clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._inflight: dict[int, tuple[str, float]] = {}
        self.last_ok: float | None = None  # when the DB last answered (Unix time)
        self.last_error: str | None = None  # the last failure, while the DB is failing
        self.failures = 0  # failed operations in the current episode
        self.down_since: float | None = None  # start of the current outage episode (logged)
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None

    @contextlib.contextmanager
    def attempt(self, what: str):
        """Wrap one DB operation named ``what`` (e.g. "storing reports"); exceptions pass through."""
        key = next(self._ids)
        with self._lock:
            self._inflight[key] = (what, self.clock())
        try:
            yield
        except BaseException as err:
            with self._lock:
                self._inflight.pop(key, None)
                self.failures += 1
                self.last_error = f"{what}: {str(err).splitlines()[0][:200] if str(err) else type(err).__name__}"
            self.check()
            raise
        with self._lock:
            self._inflight.pop(key, None)
            self.last_ok = self.clock()
            self.last_error = None
        self.check()

    def stalled(self, now: float | None = None) -> tuple[str, float] | None:
        """The oldest operation waiting longer than ``stall_s`` (what, since), or None."""
        now = self.clock() if now is None else now
        with self._lock:
            waiting = sorted(self._inflight.values(), key=lambda item: item[1])
        if waiting and now - waiting[0][1] >= self.stall_s:
            return waiting[0]
        return None

    def up(self, now: float | None = None) -> bool:
        return self.last_error is None and self.stalled(now) is None

    def seconds_since_success(self, now: float | None = None) -> float | None:
        now = self.clock() if now is None else now
        return None if self.last_ok is None else max(0.0, now - self.last_ok)

    def check(self) -> None:
        """Log the start of an outage once and its end once (called by the watchdog and after each operation)."""
        now = self.clock()
        if not self.up(now):
            if self.down_since is None:
                self.down_since = now
                stall = self.stalled(now)
                why = self.last_error or (f"{stall[0]} has waited {now - stall[1]:.0f} s" if stall else "?")
                log.error("the DB is not answering (%s); further errors are counted, not logged, until it answers "
                          "again (iez_mds_db_up 0)", why)
        elif self.down_since is not None:
            log.warning("the DB answers again after %.0f s (%d failed operation(s) meanwhile)",
                        now - self.down_since, self.failures)
            self.down_since = None
            self.failures = 0

    def start(self, every_s: float = 1.0) -> None:
        def watch():
            while not self._stop.wait(every_s):
                try:
                    self.check()
                except Exception:  # noqa: BLE001 - the watchdog never dies
                    log.exception("DB watchdog")

        self._watchdog = threading.Thread(target=watch, name="iez-mds-db-watchdog", daemon=True)
        self._watchdog.start()

    def stop(self) -> None:
        self._stop.set()

    def status(self) -> dict:
        now = self.clock()
        stall = self.stalled(now)
        return {"up": self.up(now), "seconds_since_success": None if self.last_ok is None
                else round(now - self.last_ok, 1), "error": self.last_error,
                "waiting": None if stall is None else {"what": stall[0], "seconds": round(now - stall[1], 1)},
                "down_since": self.down_since}
