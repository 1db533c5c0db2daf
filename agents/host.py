"""CPU and memory utilisation of the OSS, from /proc/stat and /proc/meminfo.

CPU: the first line of /proc/stat (``cpu user nice system idle iowait irq softirq
steal guest guest_nice``, in clock ticks) is sampled twice; utilisation is the share
of the elapsed ticks that were not idle or iowait. ``guest`` and ``guest_nice`` are
already counted in ``user`` and ``nice`` and are left out of the total.

Memory: ``100 * (MemTotal - MemAvailable) / MemTotal``. Kernels older than 3.14 have
no MemAvailable; there ``MemFree + Buffers + Cached + SReclaimable`` stands in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from agents import AgentError

__all__ = ["CpuMeter", "CpuTimes", "cpu_percent", "mem_percent", "read_cpu_times", "read_meminfo"]

PROC_STAT = "/proc/stat"
PROC_MEMINFO = "/proc/meminfo"
FIRST_WINDOW_S = 0.1


@dataclass(frozen=True)
class CpuTimes:
    busy: int
    total: int


def _read(path: str | Path, what: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii", errors="replace")
    except OSError as err:
        raise AgentError(f"cannot read {what} {path}: {err.strerror or err}") from None


def read_cpu_times(path: str | Path = PROC_STAT) -> CpuTimes:
    """Busy and total ticks of all CPUs together (the ``cpu`` line)."""
    for number, line in enumerate(_read(path, "CPU statistics").splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0] != "cpu":
            continue
        try:
            ticks = [int(f) for f in fields[1:]]
        except ValueError:
            raise AgentError(f"{path}:{number}: the cpu line holds a non-integer field") from None
        if len(ticks) < 4 or any(t < 0 for t in ticks):
            raise AgentError(f"{path}:{number}: the cpu line needs at least 4 non-negative tick counts")
        counted = ticks[:8]  # user nice system idle iowait irq softirq steal
        idle = counted[3] + (counted[4] if len(counted) > 4 else 0)
        total = sum(counted)
        return CpuTimes(busy=total - idle, total=total)
    raise AgentError(f"{path}: no 'cpu' line (is this /proc/stat?)")


def cpu_percent(before: CpuTimes, after: CpuTimes) -> float:
    """Utilisation between two samples, 0..100 (0 when no ticks elapsed)."""
    total = after.total - before.total
    busy = after.busy - before.busy
    if total <= 0:
        return 0.0
    return round(min(100.0, max(0.0, 100.0 * busy / total)), 2)


class CpuMeter:
    """CPU utilisation since the previous call; the first call samples ``first_window`` s."""

    def __init__(self, path: str | Path = PROC_STAT, first_window: float = FIRST_WINDOW_S) -> None:
        self.path = path
        self.first_window = first_window
        self._last: CpuTimes | None = None

    def sample(self) -> float:
        if self._last is None:
            self._last = read_cpu_times(self.path)
            time.sleep(self.first_window)
        now = read_cpu_times(self.path)
        pct = cpu_percent(self._last, now)
        self._last = now
        return pct


def read_meminfo(path: str | Path = PROC_MEMINFO) -> dict[str, int]:
    """``{"MemTotal": kB, …}`` from a /proc/meminfo file."""
    info: dict[str, int] = {}
    for line in _read(path, "memory statistics").splitlines():
        key, sep, rest = line.partition(":")
        if not sep:
            continue
        fields = rest.split()
        if fields and fields[0].isdigit():
            info[key.strip()] = int(fields[0])
    return info


def mem_percent(path: str | Path = PROC_MEMINFO) -> float:
    """Memory in use, percent of MemTotal, 0..100."""
    info = read_meminfo(path)
    total = info.get("MemTotal", 0)
    if total <= 0:
        raise AgentError(f"{path}: no MemTotal (is this /proc/meminfo?)")
    if "MemAvailable" in info:
        avail = info["MemAvailable"]
    else:
        avail = sum(info.get(k, 0) for k in ("MemFree", "Buffers", "Cached", "SReclaimable"))
    return round(min(100.0, max(0.0, 100.0 * (total - avail) / total)), 2)
