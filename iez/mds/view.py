"""The MDS's live view of the cluster: the latest report of every OSS, which
OSSs are stale, each OST's free space, and its read+write bandwidth.

An OSS is stale after ``stale_intervals`` (3) of its own report intervals
without a message; its OSTs are left out of allocation until it reports again.
I/O congestion comes from the agents' cumulative ``read_bytes``/``write_bytes``
counters: their rise over the last few reports (:mod:`iez.traffic`: a window of
three intervals, resets left out) is the load other jobs drive on the OST now
(bandwidth a new job cannot have); the highest rate an OST has shown raises its
bandwidth above the configured default (a target proved faster than configured
is taken at its word). A job's own traffic never steers its own placement: its
files are allocated before it runs (from its predicted requests), and when it
is placed again while it runs, the load its own Lustre job id drives is taken
off (:mod:`iez.mds.jobs`); other jobs' load stays, for three intervals.

Lustre's policy for each OST comes from two places: its OSS reports the OST's
own state (message version 2: degraded, readonly, nocreate), and the MDS's
parameters (:mod:`iez.mds.lustre_params`) give its pools, the MDS's state for it
(inactive, nocreate) and Lustre's reserved space. The allocator sees the most
restrictive of the two states, the pools, and the free space less both iez's
reservations and Lustre's reserved space.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone

from sqlalchemy import Engine, select

from agents.lctl import most_restrictive
from iez.db.engine import read
from iez.db.models import OssRow, OstRow
from iez.db.stats import OssReport, allocatable_kbytes, join_pools, split_pools
from iez.freshness import StaleRule
from iez.mds.lustre_params import LustreParams, OstPolicy
from iez.traffic import WINDOW_REPORTS, load, peak, traffic
from iez.model import DEFAULT_OSS_BANDWIDTH, DEFAULT_OST_BANDWIDTH, OSS, OST, ClusterState

#: Free space moving by this share of an OST's size makes a "material" change.
MATERIAL_FRACTION = 0.01


def _shown(value) -> str:
    if value is None or value == ():
        return "-"
    return " ".join(value) if isinstance(value, tuple) else str(value)


def epoch(dt: datetime) -> float:
    return dt.replace(tzinfo=timezone.utc).timestamp()


@dataclass
class OssState:
    oss_id: str
    seq: int
    sample_time: float  # epoch seconds
    received: float  # epoch seconds, MDS clock
    interval_s: float
    cpu_pct: float
    mem_pct: float
    osts: tuple[int, ...] = ()
    stale: bool = False
    stale_since: float | None = None  # when refresh() found it stale (MDS clock)


@dataclass
class OstState:
    index: int
    name: str
    oss_id: str
    kbytes_total: int
    kbytes_avail: int
    counters: int | None = None  # read + write bytes, cumulative
    counter_time: float | None = None
    rate: float = 0.0  # bytes/s, smoothed over the last reports (iez.traffic)
    peak_rate: float = 0.0  # the highest rate seen: what the OST has proved it sustains
    samples: deque = field(default_factory=lambda: deque(maxlen=WINDOW_REPORTS))  # (time, counters)
    avail_at_alloc: int | None = field(default=None)  # kbytes_avail at the last allocation pass
    oss_state: str = "active"  # what its OSS reports
    lustre: OstPolicy = field(default_factory=OstPolicy)  # what the MDS's parameters say

    @property
    def state(self) -> str:
        return most_restrictive((self.oss_state, self.lustre.state))

    def policy(self) -> tuple[str, str | None, int | None]:
        """The ``osts`` row's ``state``, ``pools`` and ``reserved_kbytes``."""
        return self.state, join_pools(self.lustre.pools), self.lustre.reserved_kbytes


class ClusterView:
    def __init__(self, default_interval_s: float = 60.0, stale_intervals: int = 3):
        self.default_interval_s = default_interval_s
        self.stale_intervals = stale_intervals
        self.rule = StaleRule(stale_intervals, default_interval_s)  # shared with the API and iez status
        self.osses: dict[str, OssState] = {}
        self.osts: dict[int, OstState] = {}
        self.lustre: LustreParams | None = None  # the MDS's parameters, last reading
        self.changed = True  # something an allocation should see happened since the last pass

    # -- reports ---------------------------------------------------------------
    def last_seq(self, oss_id: str) -> int | None:
        state = self.osses.get(oss_id)
        return state.seq if state else None

    def last_position(self, oss_id: str) -> tuple[float, int] | None:
        """``(sample time, seq)`` of the OSS's last accepted report: messages are ordered by time, then seq,
        so a huge forged ``seq`` cannot outrank a later sample, and an agent's restart (seq anew) is newer."""
        state = self.osses.get(oss_id)
        return (state.sample_time, state.seq) if state else None

    def fsname(self) -> str | None:
        """The file system of the OSTs in the view (the first by index), from their ``FS-OSTxxxx`` names."""
        for o in sorted(self.osts.values(), key=lambda o: o.index):
            fs, sep, _ = o.name.rpartition("-OST")
            if sep and fs:
                return fs
        return None

    def apply(self, report: OssReport, received: float | None = None) -> None:
        received = time.time() if received is None else received
        sample = epoch(report.time)
        old = self.osses.get(report.oss_id)
        if old is None or old.stale:
            self.changed = True
        self.osses[report.oss_id] = OssState(
            report.oss_id, report.seq, sample, received, report.interval_s or self.default_interval_s,
            report.cpu_pct, report.mem_pct, tuple(o.index for o in report.osts),
            stale=old.stale if old else False)  # refresh() reports it fresh again
        for o in report.osts:
            state = self.osts.get(o.index)
            counters = traffic(o.read_bytes, o.write_bytes)
            if state is None or state.oss_id != report.oss_id:
                state = self.osts[o.index] = OstState(o.index, o.name, report.oss_id, o.kbytes_total, o.kbytes_avail,
                                                      lustre=self._lustre_policy(o.index, state))
                self.changed = True
            else:
                moved = abs(o.kbytes_avail - (state.avail_at_alloc if state.avail_at_alloc is not None else state.kbytes_avail))
                if moved >= MATERIAL_FRACTION * o.kbytes_total:
                    self.changed = True
                state.name, state.kbytes_total, state.kbytes_avail = o.name, o.kbytes_total, o.kbytes_avail
            reported = o.state or "active"
            if reported != state.oss_state:
                state.oss_state = reported
                self.changed = True
            if counters is not None and (state.counter_time is None or sample > state.counter_time):
                state.samples.append((sample, counters))
                state.rate = load(state.samples)
                state.peak_rate = max(state.peak_rate, peak(list(state.samples)[-2:]))
                state.counters, state.counter_time = counters, sample

    def _lustre_policy(self, index: int, previous: OstState | None) -> OstPolicy:
        if self.lustre is not None:
            return self.lustre.osts.get(index, OstPolicy())
        return previous.lustre if previous is not None else OstPolicy()

    def apply_lustre(self, params: LustreParams) -> list[str]:
        """Take a reading of the MDS's parameters; returns what changed for known OSTs, one line each."""
        self.lustre = params
        changes = []
        for o in self.osts.values():
            policy = params.osts.get(o.index, OstPolicy())
            if policy != o.lustre:
                before = (o.state, o.lustre.pools, o.lustre.reserved_kbytes)
                o.lustre = policy
                after = (o.state, policy.pools, policy.reserved_kbytes)
                changes.append(f"OST {o.index}: " + ", ".join(
                    f"{what} {_shown(old)} -> {_shown(new)}"
                    for what, old, new in zip(("state", "pools", "reserved_kbytes"), before, after) if old != new))
        if changes:
            self.changed = True
        return [c for c in changes if not c.endswith(": ")]

    def policies(self, indices=None) -> dict[int, tuple[str, str | None, int | None]]:
        """Each OST's ``(state, pools, reserved_kbytes)`` as the ``osts`` rows store them."""
        chosen = self.osts.values() if indices is None else (self.osts[i] for i in indices if i in self.osts)
        return {o.index: o.policy() for o in chosen}

    # -- staleness -------------------------------------------------------------
    def refresh(self, now: float | None = None) -> tuple[list[str], list[str]]:
        """Mark OSSs stale or fresh; returns (newly stale, newly fresh)."""
        now = time.time() if now is None else now
        went_stale, came_back = [], []
        for state in self.osses.values():
            stale = not self.rule.fresh(now - state.received, state.interval_s)
            if stale and not state.stale:
                went_stale.append(state.oss_id)
                state.stale_since = now
            elif state.stale and not stale:
                came_back.append(state.oss_id)
            state.stale = stale
        if went_stale or came_back:
            self.changed = True
        return went_stale, came_back

    def stale(self) -> list[str]:
        return sorted(s.oss_id for s in self.osses.values() if s.stale)

    def fresh(self) -> list[str]:
        return sorted(s.oss_id for s in self.osses.values() if not s.stale)

    # -- what the allocator sees -------------------------------------------------
    def loads(self) -> dict[int, float]:
        """Read+write bytes/s each fresh OSS's OSTs serve now."""
        return {o.index: o.rate for o in self.osts.values() if not self.osses[o.oss_id].stale}

    def cluster(self, reserved: dict[int, int], ost_bandwidth: float = DEFAULT_OST_BANDWIDTH,
                oss_bandwidth: float = DEFAULT_OSS_BANDWIDTH, ost_bandwidths: dict[int, float] | None = None,
                oss_bandwidths: dict[str, float] | None = None, own_load: dict[int, float] | None = None
                ) -> ClusterState:
        """Fresh OSSs' OSTs with their state and pools, their free space less ``reserved`` bytes and Lustre's
        reserved space, bandwidth (per server where the site described it, else the default; raised to
        what the counters showed) and live load, less ``own_load`` (bytes/s the job being placed drives
        there itself: :mod:`iez.mds.jobs`)."""
        ost_bandwidths, oss_bandwidths, own_load = ost_bandwidths or {}, oss_bandwidths or {}, own_load or {}
        osts, osses = [], {}
        for o in sorted(self.osts.values(), key=lambda o: o.index):
            oss = self.osses.get(o.oss_id)
            if oss is None or oss.stale:
                continue
            avail = allocatable_kbytes(o.kbytes_avail, o.kbytes_total, reserved.get(o.index, 0),
                                       o.lustre.reserved_kbytes)
            osts.append(OST(o.index, o.oss_id, o.kbytes_total, avail,
                            bandwidth=max(ost_bandwidths.get(o.index, ost_bandwidth), o.peak_rate),
                            load=max(0.0, o.rate - own_load.get(o.index, 0.0)), state=o.state,
                            pools=o.lustre.pools))
            osses[oss.oss_id] = OSS(oss.oss_id, min(100.0, oss.cpu_pct), min(100.0, oss.mem_pct),
                                    bandwidth=oss_bandwidths.get(oss.oss_id, oss_bandwidth))
        return ClusterState.build(osts, list(osses.values()))

    def allocated(self) -> None:
        """An allocation pass saw the view as it is now."""
        for o in self.osts.values():
            o.avail_at_alloc = o.kbytes_avail
        self.changed = False

    # -- restart -----------------------------------------------------------------
    @classmethod
    def from_db(cls, engine: Engine, default_interval_s: float, stale_intervals: int = 3) -> "ClusterView":
        """The view as the DB last recorded it (``received`` times keep their staleness).

        The stored state stands for the OSS's until its next report (the stricter reading
        until then), and the stored pools and reserved space until the MDS's parameters are read.
        """
        view = cls(default_interval_s, stale_intervals)

        def load(conn):
            return conn.execute(select(OssRow)).all(), conn.execute(select(OstRow)).all()

        oss_rows, ost_rows = read(engine, load)
        members: dict[str, list[int]] = {}
        for o in ost_rows:  # Core rows: columns by name
            counters = traffic(o.read_bytes, o.write_bytes)
            view.osts[o.ost_index] = OstState(o.ost_index, o.name, o.oss_id, o.kbytes_total, o.kbytes_avail,
                                              counters, epoch(o.sample_time) if counters is not None else None,
                                              oss_state=o.state or "active",
                                              lustre=OstPolicy(pools=split_pools(o.pools),
                                                               reserved_kbytes=o.reserved_kbytes))
            if counters is not None:
                view.osts[o.ost_index].samples.append((epoch(o.sample_time), counters))
            members.setdefault(o.oss_id, []).append(o.ost_index)
        for s in oss_rows:
            view.osses[s.oss_id] = OssState(s.oss_id, s.seq, epoch(s.sample_time), epoch(s.received),
                                            s.interval_s or default_interval_s, s.cpu_pct, s.mem_pct,
                                            tuple(sorted(members.get(s.oss_id, []))))
        view.refresh()
        return view
