"""Progress for work that takes more than a couple of seconds: a rich bar on stderr when stderr is a terminal,
nothing otherwise (stdout stays clean for ``--json`` and pipes; a log file gets no control characters).

    with Progress("simulating", total=len(scenarios)) as progress:
        for scenario in scenarios:
            progress.step(scenario.name)   # what runs now
            ...
            progress.advance()

:func:`note` prints one line on stderr (a benchmark's step, say) only on a terminal, or always with
``always=True``.
"""

from __future__ import annotations

import sys
import time
from typing import Any


def on_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    def __init__(self, description: str, total: float | None = None, enabled: bool | None = None):
        self.description = description
        self.total = total
        self.enabled = on_terminal() if enabled is None else enabled
        self._bar: Any = None  # rich.progress.Progress once entered on a terminal (rich imported only then)
        self._task: Any = None

    def __enter__(self) -> "Progress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, SpinnerColumn, TextColumn,
                                       TimeElapsedColumn)

            columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn()]
            if self.total is not None:
                columns.append(MofNCompleteColumn())
            columns += [TimeElapsedColumn(), TextColumn("{task.fields[now]}")]
            self._bar = Bar(*columns, console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=self.total, now="")
        return self

    def step(self, now: str) -> None:
        """Say what runs now."""
        if self._bar is not None:
            self._bar.update(self._task, now=now)

    def advance(self, amount: float = 1) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, amount)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def note(message: str, always: bool = False) -> None:
    """One timestamped line on stderr: on a terminal, or always when asked (benchmarks' steps)."""
    if always or on_terminal():
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
