"""One way for the tests to wait on a process or a service: poll until a deadline that grows with the machine's
load, and say what was awaited when it passes (issue 32).

A fixed 30 s start-up deadline held on an idle machine and failed under load (a tester measured 37 of 41
failures on a loaded machine pass again at low load). :func:`scaled` stretches a deadline by the 1-minute load
per core, at least 1x and at most 8x: a deadline is a bound on a hang, not a timing assertion.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Callable, TypeVar

T = TypeVar("T")
#: The most a deadline is stretched (a hang must still end the test).
MAX_STRETCH = 8.0


def scaled(seconds: float) -> float:
    """``seconds`` stretched by the machine's load per core (1x idle, up to :data:`MAX_STRETCH`)."""
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        load = 1.0
    return seconds * min(MAX_STRETCH, max(1.0, load))


def wait_for(check: Callable[[], T], timeout: float, what: str, *, proc: subprocess.Popen | None = None,
             interval: float = 0.1) -> T:
    """``check()``'s first truthy value, polled every ``interval`` s until :func:`scaled` (``timeout``) passes;
    AssertionError naming ``what`` (and the process's exit, when ``proc`` ended first)."""
    limit = scaled(timeout)
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"waiting for {what}: the process exited with {proc.returncode} first")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:.0f} s waiting for {what}")
        time.sleep(interval)
