"""Where a movement's destination files go: chosen by iez's allocator with the live loads, away from
the OSTs the mover itself found congested, and applied before the first byte is written.

The OSTs, their sizes and bandwidths are the emulated cluster's description (``ROOT/cluster.json``)
when ``IEZ_EMULATE=ROOT`` is set and the destination lies in one of that cluster's data directories;
on Lustre they are the interaction DB's view of the OSTs. Either way each OST's load is what its
server measured: the live load the MDS computes from the agents' traffic counters, read from the
interaction DB (:func:`iez.db.stats.ost_loads`); never a configured figure. An OST the mover
measured as congested counts with the rate it measured (its load is raised to bandwidth less that
rate), so the allocator sends it fewer bytes or none. Files placed earlier in the same movement count
as used space, so ties between equally fast OSTs spread files over them. ``--naive`` places
round-robin (Lustre's ``rr`` allocator) on the same view, ignoring load.

A layout is applied as the placement library does: the ``user.iez.layout`` attribute in emulation,
``lfs setstripe -S SIZE -o OSTS`` on Lustre (which creates the file with those objects).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from iez.allocate import make_policy
from iez.allocate.base import Refused
from iez.layout import emulated, lustre
from iez.layout.model import Layout
from iez.model import ClusterState, WriteRequest
from iez.runtime import emulated_root

MiB = 1024 * 1024


class Placer:
    """Chooses and applies destination layouts for one movement (thread-safe only under the caller's lock)."""

    def __init__(self, where: str, cluster_file: Path | None, policy: str = "iez"):
        self.where = where  # "emulated", "lustre" or "none"
        self.cluster_file = cluster_file
        self.policy = make_policy(policy)
        self.policy_name = policy
        self.assigned: dict[int, int] = {}  # bytes this movement put on each OST
        self.reason = ""

    @classmethod
    def for_destination(cls, dest: str, policy: str = "iez", env: Mapping[str, str] | None = None) -> "Placer":
        """Emulated placement when ``dest`` is in the emulated cluster's data, Lustre placement on Lustre, else none."""
        probe = _existing_parent(dest)
        root = emulated_root(env)
        if root:
            cluster_file = Path(root) / "cluster.json"
            try:
                data = json.loads(cluster_file.read_text()).get("emulation", {}).get("data", [])
            except (OSError, ValueError) as err:
                raise ValueError(f"IEZ_EMULATE={root}: cannot read its cluster.json ({err})") from None
            real = os.path.realpath(probe)
            if any(real == os.path.realpath(d) or real.startswith(os.path.realpath(d).rstrip("/") + "/")
                   for d in data):
                return cls("emulated", cluster_file, policy)
            placer = cls("none", None, policy)
            placer.reason = f"{dest} is not in the emulated cluster's data ({', '.join(data)})"
            return placer
        if lustre.is_lustre(probe):
            return cls("lustre", None, policy)
        placer = cls("none", None, policy)
        placer.reason = f"{dest} is neither on Lustre nor in an emulated cluster (IEZ_EMULATE unset)"
        return placer

    @property
    def active(self) -> bool:
        return self.where != "none"

    def cluster(self) -> ClusterState:
        from iez.config import Settings
        from iez.db import DatabaseMissing, open_db
        from iez.db.models import utcnow
        from iez.db.stats import ost_loads, usable_cluster
        from sqlalchemy.orm import Session

        settings = Settings.from_env()
        if self.where == "emulated":
            try:
                engine = open_db(settings)
            except DatabaseMissing:
                engine = None  # no MDS has recorded this cluster: no live load; the mover's own measurements only
        else:
            engine = open_db(settings)
        loads: dict[int, float] = {}
        try:
            if engine is not None:
                with Session(engine) as session:
                    if self.where != "emulated":
                        # the one freshness rule (iez.freshness): per OSS interval, a report in flight not stale
                        from iez.freshness import StaleRule

                        return usable_cluster(session, utcnow(), StaleRule.from_settings(settings), with_load=True)
                    loads = ost_loads(session)
        finally:
            if engine is not None:
                engine.dispose()
        from iez.sim.description import load_cluster

        assert self.cluster_file is not None  # emulated: for_destination gave it (Lustre returned above)
        described = load_cluster(self.cluster_file)
        osts = [replace(o, load=loads.get(o.index, 0.0)) for o in described.osts]
        return ClusterState.build(osts, list(described.osses.values()), described.fill_cap)

    def place(self, items: list[tuple[str, int, int, int]], measured: dict[int, float]) -> list[Layout | None]:
        """Layouts for ``(path, bytes, stripe count, stripe size)`` items; ``measured``: bytes/s of OSTs found
        congested. A file the allocator refuses gets None (written without a layout)."""
        if not self.active or not items:
            return [None] * len(items)
        view = self.cluster()
        osts = []
        for o in view.osts:
            load = o.load
            if self.policy_name != "rr" and o.index in measured:
                load = max(load, o.bandwidth - measured[o.index])
            avail = max(0, o.kbytes_avail - self.assigned.get(o.index, 0) // 1024)
            osts.append(replace(o, load=load, kbytes_avail=avail))
        view = ClusterState.build(osts, list(view.osses.values()), view.fill_cap)
        usable = sum(1 for o in view.osts if o.takes_stripes)
        requests = [WriteRequest("iez-copy", path, size, max(1, min(count, usable or 1)), stripe_size=stripe)
                    for path, size, count, stripe in items]
        placement = self.policy.place(view, requests)
        out: list[Layout | None] = []
        for request, outcome in zip(requests, placement.outcomes):
            if type(outcome) is Refused or not outcome.osts:
                out.append(None)
                continue
            for ost, nbytes in outcome.stripe_bytes(request.write_bytes):
                self.assigned[ost] = self.assigned.get(ost, 0) + nbytes
            out.append(outcome.layout())
        return out

    def apply(self, path: str, layout: Layout) -> None:
        """Create ``path`` with ``layout``."""
        if self.where == "lustre":
            lfs = shutil.which("lfs") or "lfs"
            argv = [lfs, "setstripe", "-S", str(layout.stripe_size), "-c", str(layout.stripe_count),
                    "-o", ",".join(map(str, layout.osts)), path]
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                raise OSError(f"{' '.join(argv[1:])} failed: {(done.stderr or done.stdout).strip()[-200:]}")
            return
        apply_emulated(path, layout)


def apply_emulated(path: str, layout: Layout) -> None:
    """Create ``path`` carrying ``layout`` as the placement library records it (its attribute)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.setxattr(fd, emulated.xattr_name(), emulated.format_attr(layout).encode("ascii"))
    finally:
        os.close(fd)


def _existing_parent(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path
