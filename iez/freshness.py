"""When an OSS counts as fresh: the one rule the MDS, the REST API and ``iez status`` share.

An OSS is fresh while the age of its last report is at most ``stale_intervals``
(default 3) of its own report intervals (what its messages say, or
``default_interval_s``, 60 s, when they do not) plus ``margin_s`` (default 10 s):
a report in flight is not stale. The margin covers what lies between an agent's
send and the report being readable in the DB: the MDS batches its writes up to
5 s (``MdsConfig.flush_s``), plus up to 5 s of transit, queueing and store on a
busy node. Without it,
services that read the DB (``iez status``, the REST API, ``iez copy``) flipped an
OSS reporting every second to stale while the MDS said fresh (issue 30 item 2). A stale OSS's OSTs are left
out of allocation until it reports again. Services that read the interval from
the DB use the same rule as the MDS, which reads it from the messages, so the
three never disagree about an OSS whose agent reports every 10 s or every 5 min.

``IEZ_OSS_STALE_S`` (default 180) keeps its meaning: the limit for an OSS whose
reports give no interval (``default_interval_s`` = that / ``stale_intervals``).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_INTERVAL_S = 60.0
DEFAULT_STALE_INTERVALS = 3
#: Seconds added to every limit: the MDS's write batching (5 s) and up to 5 s of transit, queueing and store.
DEFAULT_MARGIN_S = 10.0


@dataclass(frozen=True)
class StaleRule:
    stale_intervals: int = DEFAULT_STALE_INTERVALS
    default_interval_s: float = DEFAULT_INTERVAL_S
    margin_s: float = DEFAULT_MARGIN_S

    def __post_init__(self):
        if self.stale_intervals < 1:
            raise ValueError(f"stale intervals {self.stale_intervals} must be at least 1")
        if not self.default_interval_s > 0:
            raise ValueError(f"default report interval {self.default_interval_s} s must be positive")
        if self.margin_s < 0:
            raise ValueError(f"staleness margin {self.margin_s} s must not be negative")

    def limit_s(self, interval_s: float | None) -> float:
        """Seconds after its last report an OSS with this report interval becomes stale."""
        own = interval_s if interval_s is not None and interval_s > 0 else self.default_interval_s
        return self.stale_intervals * own + self.margin_s

    def fresh(self, age_s: float, interval_s: float | None) -> bool:
        return age_s <= self.limit_s(interval_s)

    def describe(self, oss_id: str, age_s: float, interval_s: float | None) -> str:
        """Why an OSS is left out, for refusals and logs: 'OSS oss1: no report for 42 s (stale after 9 s)'."""
        return f"OSS {oss_id}: no report for {age_s:.0f} s (stale after {self.limit_s(interval_s):.0f} s)"

    @classmethod
    def from_settings(cls, settings, stale_intervals: int = DEFAULT_STALE_INTERVALS) -> "StaleRule":
        """The rule of a service configured by :class:`iez.config.Settings` (``IEZ_OSS_STALE_S``)."""
        return cls(stale_intervals, settings.oss_stale_s / stale_intervals)


#: The MDS rewrites its status file every 2 s; an allocation pass holds the loop up to this long.
MDS_HEARTBEAT_STALE_S = 60.0


def mds_running(status: dict, now: float, max_age_s: float = MDS_HEARTBEAT_STALE_S) -> bool:
    """Whether the MDS that wrote ``status`` (its ``pid`` and heartbeat ``time``) still runs: the process
    exists on this node and the heartbeat is recent (a stopped MDS leaves its last status behind, and its
    pid may be reused)."""
    import os

    heartbeat, pid = status.get("time"), status.get("pid")
    if not isinstance(heartbeat, (int, float)) or now - heartbeat > max_age_s:
        return False
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True
