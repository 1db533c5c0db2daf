"""Placement: the live view -> the policy -> reservations -> stored allocations, for the MDS and the API alike.

The services decide here; the DB layer (:mod:`iez.db.allocations`) only loads
and saves. One pass places an application's pending requests in one write
transaction: the policy sees the OSTs of fresh OSSs with their free space less
active reservations; files it cannot place are refused one by one, with the
reason stored on the request (they stay pending and a later pass may place
them); the rest are stored with reservations of the bytes each stripe object
will hold.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Callable, Sequence

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from iez.allocate import AllocationError, Policy, Refused, make_policy
from iez.db.allocations import NOTHING_TO_PLACE, pending_requests, store_placement
from iez.db.engine import write_transaction
from iez.freshness import StaleRule
from iez.db.models import utcnow
from iez.db.requests import application, row_policy
from iez.db.stats import usable_cluster, with_writers, writers
from iez.model import (
    DEFAULT_FILL_CAP,
    DEFAULT_OSS_BANDWIDTH,
    DEFAULT_OST_BANDWIDTH,
    Allocation,
    ClusterState,
    WriteRequest,
)


@dataclass(frozen=True)
class PlacementSettings:
    """What a site tunes about placement (MDS options, the API's allocate request, the simulator)."""

    policy: str = "iez"
    seed: int = 0
    fill_cap: float = DEFAULT_FILL_CAP
    fill_weight: float = 0.0
    ost_bandwidth: float = DEFAULT_OST_BANDWIDTH  # bytes/s, where the cluster does not say
    oss_bandwidth: float = DEFAULT_OSS_BANDWIDTH
    # per server, from the site's hardware description (iez mds --bandwidths): OST index / OSS id -> bytes/s
    ost_bandwidths: dict = field(default_factory=dict)
    oss_bandwidths: dict = field(default_factory=dict)
    oss_load_weight: float = 0.5
    # the qos baseline's Lustre settings (lod.*.qos_threshold_rr, qos_prio_free as fractions; the MDS reads them)
    threshold_rr: float = 0.17
    prio_free: float = 0.90
    # Other applications' unexpired reservations count as expected load (CEFT's fair share, seed 003): the
    # other jobs holding live reservations on each OST and OSS are writers there, so a new job expects at
    # most bandwidth / (writers + 1) of it. On by default (issue 30 item 6): jobs allocated seconds apart
    # otherwise all land on the same OSTs, since none of them writes yet when the next is placed. The
    # trade-off: a reservation lasts until the reports show its file written or until it expires
    # (IEZ_RESERVATION_TTL, 24 h by default), so an application that was allocated and then wrote less than
    # it asked, or never ran, still counts as a writer there until then; new jobs avoid those OSTs for no
    # benefit. iez mds --ignore-reservations (fair_share=False) places against measured load only.
    fair_share: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.fill_cap <= 1:
            raise ValueError(f"fill_cap={self.fill_cap} is outside (0, 1]")
        if self.fill_weight < 0:
            raise ValueError(f"fill_weight={self.fill_weight} must not be negative")
        if self.ost_bandwidth <= 0 or self.oss_bandwidth <= 0 or \
                any(b <= 0 for b in (*self.ost_bandwidths.values(), *self.oss_bandwidths.values())):
            raise ValueError("bandwidths must be positive")

    def make_policy(self) -> Policy:
        options = {}
        if self.policy == "iez":
            options = {"fill_weight": self.fill_weight, "fill_cap": self.fill_cap,
                       "oss_load_weight": self.oss_load_weight}
        elif self.policy == "qos":
            options = {"threshold_rr": self.threshold_rr, "prio_free": self.prio_free}
        return make_policy(self.policy, seed=self.seed, **options)


@dataclass
class AppPlacement:
    """One application's pass: what was placed and what was refused (file, reason)."""

    app: str
    placed: list[Allocation] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)


ClusterSource = Callable[[Session, datetime], ClusterState]


def place_app(engine: Engine, app_name: str, settings: PlacementSettings, stale_s: float | StaleRule,
              reservation_ttl_s: float, cluster_of: ClusterSource | None = None,
              fence: Callable[[Session], None] | None = None) -> AppPlacement:
    """Place ``app_name``'s pending requests and store the outcome in one transaction.

    The transaction holds the write lock (:func:`iez.db.engine.write_transaction`: serialised with every other
    writer, on a Galera cluster too) and is run again, whole, when the database refuses it for a conflict.
    ``fence`` (the MDS's lease, :meth:`iez.mds.lease.MdsLease.fence`) runs first in the same transaction and
    raises to refuse the pass when this MDS's lease generation is no longer the current one.

    ``cluster_of`` gives the live view (the MDS passes its own, with congestion
    and staleness per OSS); without it the DB's latest statistics are used, with the live load the MDS
    stored for each OST (:func:`iez.db.stats.ost_loads`).
    Raises :class:`~iez.db.requests.NotFound` for an unknown application.
    """
    def attempt(session: Session) -> AppPlacement:
        # everything made afresh on each attempt (write_transaction may run this again): a policy with state
        # (round-robin's start, a seeded generator) places a retried pass exactly as it would a first one
        if fence is not None:
            fence(session)
        policy = settings.make_policy()
        app = application(session, app_name)
        pending = pending_requests(session, app.id)
        if not pending:
            return AppPlacement(app_name)
        now = utcnow()
        cluster = cluster_of(session, now) if cluster_of else usable_cluster(
            session, now, stale_s, settings.ost_bandwidth, settings.oss_bandwidth, with_load=True)
        cluster = replace(cluster, fill_cap=settings.fill_cap)
        if settings.fair_share:  # CEFT's available throughput: the other jobs writing on each OST and OSS now
            cluster = with_writers(cluster, *writers(session, now, exclude_app=app.id))
        requests, unreadable = readable_requests(app_name, pending)
        placement = policy.place(cluster, requests)
        # an allocation without OSTs (all bytes on the MDT) has nothing for the library to apply
        outcomes = [o.reason if isinstance(o, Refused) else NOTHING_TO_PLACE if not o.osts else o
                    for o in placement.outcomes]
        if policy.size_aware:
            check_capacity(cluster, requests, outcomes)
        placed_or_not = iter(outcomes)  # the readable ones' outcomes, and each unreadable one refused alone
        outcomes = [unreadable[r.id] if r.id in unreadable else next(placed_or_not) for r in pending]
        placed = store_placement(session, pending, outcomes, policy.name, now, reservation_ttl_s)
        return AppPlacement(app_name, placed, [(r.path, o) for r, o in zip(pending, outcomes) if isinstance(o, str)])

    return write_transaction(engine, attempt)


def readable_requests(app_name: str, pending: Sequence) -> tuple[list[WriteRequest], dict[int, str]]:
    """The stored rows as requests, and the refusal of each row that no longer reads as one (a template or
    pool stored by an older release, a hand-edited row), by row id: such a row is refused alone, with its
    reason, and the application's other files are placed."""
    requests, unreadable = [], {}
    for r in pending:
        try:
            requests.append(WriteRequest(app_name, r.path, r.write_bytes, r.stripe_count, r.rank, *row_policy(r),
                                         mirror_count=r.mirror_count or 1))
        except (ValueError, TypeError) as err:
            unreadable[r.id] = f"its stored request cannot be read ({err}): post it again"
    return requests, unreadable


def check_capacity(cluster: ClusterState, requests: Sequence[WriteRequest], outcomes: Sequence[Allocation | str]
                   ) -> None:
    """Refuse (never store) a placement that puts more on an OST than it has free: a policy bug guard."""
    wanted: dict[int, int] = defaultdict(int)
    for request, allocation in zip(requests, outcomes):
        if isinstance(allocation, Allocation):
            for ost, b in allocation.stripe_bytes(request.write_bytes):
                wanted[ost] += b
    free = {ost.index: ost.bytes_avail for ost in cluster.osts}
    for ost, size in wanted.items():
        if ost not in free:
            raise AllocationError(None, f"policy chose OST {ost}, which is not usable")
        if size > free[ost]:
            raise AllocationError(None, f"policy put {size} bytes on OST {ost}, which has {free[ost]} free")
