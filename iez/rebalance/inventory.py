"""What the rebalancer plans from: every OST's size, fill, state and pools, and the files with their layouts.

Two sources. An emulated cluster (``--cluster ROOT`` or its ``cluster.json``):
sizes, pools and the pre-existing fill (``base_used_kb``) from the
description, each OST's state from its switches now (as ``iez cluster set``
left them), and the files below its data directories (or ``--root DIR``), whose
bytes per OST (RAID-0 over their layouts, :mod:`iez.layout.usage`) add to the
fill as the emulator counts them. Or the interaction DB's live view (``--db``,
what ``iez status`` prints) for sizes, fills, states and pools, and the files
below ``--root DIR``.

Every layout kind can move (:func:`entry`): plain, composite (PFL: only the
objects of placed components; Data-on-MDT and uninstantiated components carry
none and stay as they are), overstriped and mirrored (FLR). A file with more
than one link, or with objects on OSTs the source does not know, stays where
it is (:func:`why_fixed` says why) and is counted as ``files_fixed``, as are
files without a layout. The rebalancer's own temporary files are left out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

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
    #: Each OST's failure domain (its OSS's ``domain``, else the OSS): the mirrors of a file keep apart.
    domains: dict[int, str] = field(default_factory=dict)


def why_fixed(nlink: int, layout, known: set[int]) -> str | None:
    """Why a file with ``layout`` cannot move (None: it can).

    A file with several links is left (in emulation a move is a copy renamed over one name, which would split
    the others off; on Lustre ``lfs migrate`` keeps the inode, but the same rule holds so a plan means the same
    everywhere); so is one with objects on OSTs the source does not know.
    """
    if nlink > 1:
        return f"hard links ({nlink} names): a move would give only one name the new copy"
    osts = {o for mirror in layout.copies() for c in mirror for o in c.osts}
    unknown = sorted(osts - known)
    if unknown:
        return f"objects on OST{'s' if len(unknown) > 1 else ''} {', '.join(map(str, unknown))}, unknown here"
    return None


def entry(path: str, size: int, ino: int, mtime_ns: int, nlink: int, layout, known: set[int]
          ) -> tuple[File | None, list[tuple[int, int]]]:
    """One file as the planner sees it (``None``: it cannot move) and its bytes per OST, from its layout.

    The one place that decides what can move: a tree walk and the file inventory both call it. A plain
    layout is a plain :class:`File`; a composite, overstriped or mirrored one lists the objects of every
    placed component (mirror by mirror, component by component, as :func:`iez.layout.usage.ost_bytes`) with
    their component, mirror and pool, and carries the whole layout (Data-on-MDT and uninstantiated
    components included), which a move keeps but for the objects' OSTs.
    """
    if layout.components and not getattr(layout, "mirrors", ()):
        layout = as_stored(layout.components)  # one RAID-0 component over the file (a pool) is plain
    pairs = list(ost_bytes(layout, size))
    if why_fixed(nlink, layout, known) or not pairs:
        return None, pairs
    objects = tuple(n for _, n in pairs)
    if not layout.components and not layout.mirrors:
        return File(path, size, layout.stripe_size, layout.osts, objects, layout.pool, ino, mtime_ns), pairs
    groups, mirrors, pools, over = [], [], [], set()
    group = 0
    for m, copy in enumerate(layout.copies()):
        for c in copy:
            if not c.osts:
                continue
            if c.overstriping:
                over.add(group)
            groups += [group] * len(c.osts)
            mirrors += [m] * len(c.osts)
            pools += [c.pool] * len(c.osts)
            group += 1
    return File(path, size, layout.stripe_size, tuple(o for o, _ in pairs), objects, layout.pool, ino, mtime_ns,
                tuple(groups), frozenset(over), tuple(mirrors) if layout.mirrors else (), tuple(pools),
                layout), pairs


def layouts_below(roots: list[str], unreadable: Callable[[str, Exception], None], problems: list[str]):
    """``(absolute path, stat, layout or None)`` of every regular file below ``roots`` but the movers'
    temporaries; a file whose layout cannot be read goes to ``unreadable``, one gone meanwhile is passed over.
    A plan's walk and a drain's both read the tree through this."""
    reader = LayoutReader()
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
                unreadable(path, err)
                continue
            yield os.path.abspath(path), st, None if found is None else found[0]


def walk(roots: list[str], known: set[int]) -> tuple[list[File], dict[int, int], int, list[str]]:
    """The movable files below ``roots``, every file's bytes per OST, the files that cannot move, problems."""
    files: list[File] = []
    per_ost: dict[int, int] = {}
    problems: list[str] = []
    unreadable: list[str] = []
    fixed = 0
    for path, st, layout in layouts_below(roots, lambda _, err: unreadable.append(str(err)), problems):
        if layout is None:
            fixed += 1
            continue
        file, pairs = entry(path, st.st_size, st.st_ino, st.st_mtime_ns, st.st_nlink, layout, known)
        for ost, nbytes in pairs:
            per_ost[ost] = per_ost.get(ost, 0) + nbytes
        if file is None:
            fixed += 1
        else:
            files.append(file)
    return files, per_ost, fixed + len(unreadable), problems + unreadable


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
    from iez.inventory.source import files_or_walk  # the file inventory when seeded for these roots, else a walk

    (files, per_ost, fixed, problems), how = files_or_walk(
        roots, {o.index for o in layout.osts}, cluster=str(root),
        capacity={o.index: o.kbytes_total * 1024 for o in layout.osts},
        used=lambda per: {o.index: o.base_used_kb * 1024 + per.get(o.index, 0) for o in layout.osts},
        pools=layout.pools, usable={o.index for o in layout.osts if states.get(o.index, o.state) == "active"})
    osts = [Ost(o.index, o.kbytes_total * 1024, o.base_used_kb * 1024 + per_ost.get(o.index, 0),
                states.get(o.index, o.state), tuple(sorted(o.pools)))
            for o in layout.osts]
    inv = Inventory(osts, files, {k: sorted(v) for k, v in layout.pools.items()}, layout.fill_cap, fixed,
                    problems, {"cluster": str(root), "data": list(roots), **how})
    inv.domains = cluster_domains(layout)
    return inv


def cluster_domains(layout) -> dict[int, str]:
    """Each OST's failure domain in an emulated cluster: its OSS's ``domain``, else the OSS's id."""
    domain = {oss["id"]: oss.get("domain") or oss["id"] for oss in layout.osses}
    return {o.index: domain.get(o.oss, o.oss) for o in layout.osts}


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
    from iez.inventory.source import files_or_walk  # the file inventory when seeded for these roots, else a walk

    (files, _, fixed, problems), how = files_or_walk(
        roots, {o.index for o in osts}, settings, capacity={o.index: o.capacity for o in osts},
        used={o.index: o.used for o in osts}, pools=pools, usable={o.index for o in osts if o.takes_stripes})
    inv = Inventory(osts, files, pools, DEFAULT_FILL_CAP, fixed, problems,
                    {"db": str(settings.db), "data": roots, **how})
    inv.domains = {o["index"]: o.get("oss") or str(o["index"]) for o in view["osts"]}
    return inv
