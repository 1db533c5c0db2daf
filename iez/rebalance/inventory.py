"""What the rebalancer plans from: every OST's size, fill, state and pools, and the files with their layouts.

Two sources. An emulated cluster (``--cluster ROOT`` or its ``cluster.json``):
sizes, pools and the pre-existing fill (``base_used_kb``) from the
description, each OST's state from its switches now (as ``iez cluster set``
left them), and the files below its data directories (or ``--root DIR``), whose
bytes per OST (RAID-0 over their layouts, :mod:`iez.layout.usage`) add to the
fill as the emulator counts them. Or the interaction DB's live view (``--db``,
what ``iez status`` prints) for sizes, fills, states and pools, and the files
below ``--root DIR``.

Only files with a plain layout (no mirrors), one link and wholly on known OSTs can move;
the others (composite layouts, hard links, no layout) stay where they are and
are counted as ``files_fixed``. The rebalancer's own temporary files are left
out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from iez.layout.read import LayoutReader
from iez.layout.rules import as_stored
from iez.layout.usage import ost_bytes, regular_files
from iez.model import DEFAULT_FILL_CAP
from iez.move.temps import is_temporary
from iez.rebalance.plan import File, Ost


@dataclass
class Inventory:
    osts: list[Ost]
    files: list[File]
    pools: dict[str, list[int]]
    fill_cap: float = DEFAULT_FILL_CAP
    files_fixed: int = 0
    problems: list[str] = field(default_factory=list)
    source: dict = field(default_factory=dict)


def entry(path: str, size: int, ino: int, mtime_ns: int, nlink: int, layout, known: set[int]
          ) -> tuple[File | None, list[tuple[int, int]]]:
    """One file as the planner sees it (``None``: it cannot move) and its bytes per OST, from its layout.

    The one place that decides what can move: a tree walk and the file inventory both call it.
    """
    if getattr(layout, "mirrors", ()):  # a mirrored (FLR) layout: its copies are the resync's business
        return None, list(ost_bytes(layout, size))
    if layout.components:
        layout = as_stored(layout.components)  # one RAID-0 component over the file (a pool) is plain
    pairs = list(ost_bytes(layout, size))
    if layout.composite or nlink > 1 or not set(layout.osts) <= known:
        return None, pairs
    return File(path, size, layout.stripe_size, layout.osts, tuple(n for _, n in pairs), layout.pool, ino,
                mtime_ns), pairs


def walk(roots: list[str], known: set[int]) -> tuple[list[File], dict[int, int], int, list[str]]:
    """The movable files below ``roots``, every file's bytes per OST, the files that cannot move, problems."""
    reader = LayoutReader()
    files: list[File] = []
    per_ost: dict[int, int] = {}
    fixed = 0
    problems: list[str] = []
    for root in roots:
        if not Path(root).is_dir():
            continue
        for path, st in regular_files(root, problems):
            if is_temporary(os.path.basename(path)):
                continue
            try:
                found = reader.layout(path, st)
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as err:
                problems.append(str(err))
                fixed += 1
                continue
            if found is None:
                fixed += 1
                continue
            layout, _ = found
            file, pairs = entry(os.path.abspath(path), st.st_size, st.st_ino, st.st_mtime_ns, st.st_nlink, layout,
                                known)
            for ost, nbytes in pairs:
                per_ost[ost] = per_ost.get(ost, 0) + nbytes
            if file is None:
                fixed += 1
            else:
                files.append(file)
    return files, per_ost, fixed, problems


def from_cluster(where: str, roots: list[str] | None = None) -> Inventory:
    """An emulated cluster: ``where`` is its root or its ``cluster.json``."""
    from iez.emulate.cluster import ClusterLayout, tree_states

    path = Path(where)
    root = path if path.is_dir() else path.parent
    layout = ClusterLayout.load(root)
    try:
        states = tree_states(layout)
    except (OSError, ValueError, KeyError):
        states = {o.index: o.state for o in layout.osts}  # trees not made yet: the description's states
    roots = roots or layout.data
    files, per_ost, fixed, problems = walk(roots, {o.index for o in layout.osts})
    osts = [Ost(o.index, o.kbytes_total * 1024, o.base_used_kb * 1024 + per_ost.get(o.index, 0),
                states.get(o.index, o.state), tuple(sorted(o.pools)))
            for o in layout.osts]
    return Inventory(osts, files, {k: sorted(v) for k, v in layout.pools.items()}, layout.fill_cap, fixed,
                     problems, {"cluster": str(root), "data": list(roots)})


def from_db(settings, roots: list[str]) -> Inventory:
    """The DB's live view for the OSTs, the files below ``roots``."""
    from iez.db import open_db
    from iez.db.engine import read
    from iez.db.models import utcnow
    from iez.db.stats import live_view

    engine = open_db(settings)
    try:
        view = read(engine, lambda conn: live_view(conn, utcnow(), settings.oss_stale_s))
    finally:
        engine.dispose()
    if not view["osts"]:
        raise ValueError(f"{settings.db}: no OST has reported yet (run the agents and iez mds)")
    osts = [Ost(o["index"], o["kbytes_total"] * 1024,
                (o["kbytes_total"] - min(o["kbytes_avail"], o["kbytes_total"])) * 1024, o["state"],
                tuple(sorted(o["pools"]))) for o in view["osts"]]
    pools: dict[str, list[int]] = {}
    for o in osts:
        for name in o.pools:
            pools.setdefault(name, []).append(o.index)
    files, _, fixed, problems = walk(roots, {o.index for o in osts})
    return Inventory(osts, files, pools, DEFAULT_FILL_CAP, fixed, problems, {"db": str(settings.db), "data": roots})
