"""The MDS node's own CPU and memory use: the paper (III-B2) runs the allocator
only while the MDS has room (CPU < 70 %, memory < 50 % by default), because the
metadata server's first job is serving metadata.

The gate is bounded: while the node stays over a limit, pending requests wait at most
``DEFAULT_DEFER_MAX_S`` (``iez mds --defer-max``) and are then allocated anyway. A Lustre MDS node is
busy exactly when jobs start; an unbounded gate left them all on Lustre's default layout."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: How long the CPU/memory gate may hold back pending requests before they are allocated anyway (seconds).
DEFAULT_DEFER_MAX_S = 5.0


@dataclass
class Usage:
    cpu_pct: float
    mem_pct: float


class NodeSampler:
    """CPU % over the time since the previous sample (``/proc/stat``), memory % now (``/proc/meminfo``)."""

    def __init__(self, proc: Path = Path("/proc")):
        self.stat = proc / "stat"
        self.meminfo = proc / "meminfo"
        self._last: tuple[int, int] | None = self._cpu_times()

    def _cpu_times(self) -> tuple[int, int] | None:
        try:
            line = self.stat.read_text().splitlines()[0]
        except (OSError, IndexError):
            return None
        fields = [int(v) for v in line.split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]), idle

    def sample(self) -> Usage:
        now = self._cpu_times()
        cpu = 0.0
        if now and self._last and now[0] > self._last[0]:
            total, idle = now[0] - self._last[0], now[1] - self._last[1]
            cpu = max(0.0, min(100.0, 100.0 * (total - idle) / total))
        if now:
            self._last = now
        return Usage(cpu, self._mem_pct())

    def _mem_pct(self) -> float:
        values = {}
        try:
            for line in self.meminfo.read_text().splitlines():
                key, _, rest = line.partition(":")
                values[key] = int(rest.split()[0])
        except (OSError, ValueError, IndexError):
            return 0.0
        total, avail = values.get("MemTotal", 0), values.get("MemAvailable", values.get("MemFree", 0))
        return 100.0 * (total - avail) / total if total else 0.0
