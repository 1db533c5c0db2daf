"""What the rebalancer plans from when the inventory holds the tree: the walk's answer, from SQL.

:func:`files_from_store` returns what :func:`iez.rebalance.inventory.walk` returns (movable files, bytes
per OST, files that cannot move, problems), deciding what can move with the same
:func:`iez.rebalance.inventory.entry` on each file's stored layout.

Small inventories (at most :data:`FULL_LOAD_FILES` files below the roots) are loaded whole, so a plan from
them is the walk's plan. Larger ones never become one ``File`` object per file: bytes per OST come from
one aggregate over ``inv_objects`` (its ``(ost, bytes)`` index), and only *candidates* are loaded: on each
OST above its pool's mean fill (``excess`` bytes above it), its largest objects that fit the excess until
they add up to :data:`CANDIDATE_FACTOR` times the excess, plus the :data:`COVERING` smallest objects larger
than the excess (the planner's "cheapest file that covers the rest"), at most :data:`MAX_CANDIDATES` in
all (shared among those OSTs by their excess). Files on OSTs at or under the mean are never moved by the
planner (it moves bytes off the full OSTs), so it is not shown them. ``files_fixed`` is then the files
without a layout, with more than one link or mirrored (SQL) plus the candidates that cannot move.

:func:`files_or_walk` is the seam the rebalancer calls: the store when every root was seeded by a scan
(``iez inventory scan``) and the DB can be read (``IEZ_INVENTORY=off`` forces the walk), else the walk.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from sqlalchemy import Connection, Engine

from iez.db import inventory as sql
from iez.inventory.store import Paths

if TYPE_CHECKING:
    from iez.layout.model import Layout

#: A file as a plan reads it: path, size, ino, mtime_ns, nlink, layout (None: none, or unreadable).
Found = tuple[str, int, int, int, int, "Layout | None"]

#: Up to this many files below the roots every file is loaded (a plan identical to a walk's).
FULL_LOAD_FILES = 500_000
#: Candidates per OST above its pool's mean: objects adding up to this multiple of its excess.
CANDIDATE_FACTOR = 3.0
#: Objects larger than the excess also loaded per such OST (the smallest of them).
COVERING = 32
#: Candidate objects loaded at most, over all OSTs: the planner's time grows with them (250,000: about 40 s
#: for a 10 M-file inventory, benchmarks/inventory_bench.py). An imbalance that needs more files moved than this
#: is brought down in rounds: each plan goes as far as its candidates allow, the next starts from there.
MAX_CANDIDATES = 250_000


def _engine(db) -> tuple[Engine, bool]:
    if isinstance(db, Engine):
        return db, False
    from iez.db import open_db

    return open_db(db), True


def root_ids(conn, roots: list[str]) -> tuple[list[int], bool] | None:
    """The inventory's ids of ``roots`` and whether they are all it holds; None unless every one was seeded."""
    seeded = sql.seeded_roots(conn)
    ids = []
    for root in roots:
        found = seeded.get(os.path.abspath(root))
        if found is None:
            return None
        ids.append(found["id"])
    return sorted(set(ids)), set(ids) == {r["id"] for r in seeded.values()}


def files_from_store(db, known: set[int], roots: list[str], *, capacity: dict[int, int] | None = None,
                     used: dict[int, int] | Callable[[dict[int, int]], dict[int, int]] | None = None,
                     pools: dict[str, list[int]] | None = None, usable: set[int] | None = None,
                     full_load: int | None = None):
    """``(files, per_ost, fixed, problems)`` as :func:`iez.rebalance.inventory.walk` gives them, from the
    inventory of ``roots`` (``db``: an engine or settings). ``capacity``/``used`` (bytes per OST; ``used`` may be
    a function of the per-OST bytes found), ``pools`` and ``usable`` choose the candidates of a large
    inventory; without them every file is loaded."""
    engine, own = _engine(db)
    try:
        with engine.connect() as conn:
            sql.tune_for_reads(conn)  # SQLite: index range scans over a large file, mapped as a read cache
            found = root_ids(conn, roots)
            if found is None:
                raise ValueError(f"the inventory has not been seeded for {', '.join(roots)} "
                                 "(run iez inventory scan --root DIR)")
            ids, everything = found
            scope = None if everything else ids
            count = sql.file_count(conn, scope)
            paths = Paths.load(conn)
            if count <= (FULL_LOAD_FILES if full_load is None else full_load) or capacity is None or used is None:
                return _load_all(conn, paths, known, scope)
            return _load_candidates(conn, paths, known, scope, capacity, used, pools or {}, usable)
    finally:
        if own:
            engine.dispose()


def _rows(paths: Paths, rows: Iterable[sql.PlanRow], problems: list[str]) -> Iterator[Found]:
    """``(path, size, ino, mtime_ns, nlink, layout)`` for each of ``rows`` (:data:`iez.db.inventory.PlanRow`);
    ``layout`` None for a file without one or whose stored text does not parse (said in ``problems``)."""
    from iez.layout.emulated import parse_attr

    parsed: dict[str, Layout] = {}
    for fid, parent, name, size, text, nlink, ino, mtime_ns in rows:
        directory = paths.path(parent)
        if directory is None:
            continue  # below a directory the inventory lost: a rescan brings it back
        path = f"{directory}/{name}"
        layout = None if text is None else parsed.get(text)
        if text is not None and layout is None:
            try:
                layout = parsed[text] = parse_attr(text, path)
            except ValueError as err:
                problems.append(str(err))
        yield path, size, ino, mtime_ns, nlink, layout


def _files(paths: Paths, known: set[int], rows: Iterable[sql.PlanRow], problems: list[str]):
    """``(file or None, pairs)`` for each of ``rows`` (as :func:`_rows`)."""
    from iez.rebalance.inventory import entry

    for path, size, ino, mtime_ns, nlink, layout in _rows(paths, rows, problems):
        if layout is None:
            yield None, None
        else:
            yield entry(path, size, ino, mtime_ns, nlink, layout, known)


def _load_all(conn: Connection, paths: Paths, known: set[int], scope: list[int] | None):
    files, fixed = [], 0
    per_ost: dict[int, int] = {}
    problems: list[str] = []
    for file, pairs in _files(paths, known, sql.file_rows(conn, scope), problems):
        for ost, nbytes in pairs or ():
            per_ost[ost] = per_ost.get(ost, 0) + nbytes
        if file is None:
            fixed += 1
        else:
            files.append(file)
    return files, per_ost, fixed, problems


def _load_candidates(conn: Connection, paths: Paths, known: set[int], scope: list[int] | None,
                     capacity: dict[int, int], used, pools: dict[str, list[int]], usable: set[int] | None):
    problems: list[str] = []
    per_ost = sql.ost_totals(conn, scope)
    now = used(per_ost) if callable(used) else dict(used)
    excess = _excess(now, capacity, pools, usable if usable is not None else set(capacity))
    budget = sum(excess.values()) or 1
    wanted: set[str] = set()
    for ost, over in sorted(excess.items(), key=lambda kv: -kv[1]):
        limit = max(COVERING, int(MAX_CANDIDATES * over / budget))
        got = 0
        for fid, nbytes in sql.largest_within(conn, ost, over, limit, scope):
            wanted.add(fid)
            got += nbytes
            if got >= CANDIDATE_FACTOR * over:
                break
        wanted.update(sql.smallest_above(conn, ost, over, COVERING, scope))
    files, refused = [], 0
    for file, _ in _files(paths, known, sql.files_of(conn, sorted(wanted)), problems):
        if file is None:
            refused += 1
        else:
            files.append(file)
    fixed = sql.unmovable_count(conn, scope) + refused
    return files, per_ost, fixed, problems


def _excess(used: dict[int, int], capacity: dict[int, int], pools: dict[str, list[int]], usable: set[int]
            ) -> dict[int, float]:
    """Bytes above its pool's mean fill, per OST above it (a pool's usable OSTs; the OSTs in no pool together)."""
    members = [set(m) & usable for m in pools.values()]
    pooled = set().union(*members) if members else set()
    rest = (set(capacity) & usable) - pooled
    out: dict[int, float] = {}
    for osts in members + ([rest] if rest else []):
        group = [j for j in osts if capacity.get(j)]
        if len(group) < 2:
            continue
        mean = sum(used.get(j, 0) for j in group) / sum(capacity[j] for j in group)
        for j in group:
            over = used.get(j, 0) - mean * capacity[j]
            if over > 0:
                out[j] = max(out.get(j, 0.0), over)
    return out


def files_or_walk(roots: list[str], known: set[int], settings=None, cluster: str | None = None, **options):
    """``((files, per_ost, fixed, problems), how)``: from the inventory when it holds every root (after applying
    the emulated MDT's pending records for ``cluster``), else from a walk; ``how`` says which and why."""
    from iez.rebalance.inventory import walk

    why = _store_refused(roots, settings)
    if why is None:
        from iez.db.engine import engine_for

        engine = engine_for((settings or _settings()).db_url)
        try:
            caught_up = _catch_up(engine, cluster) if cluster else None
            found = files_from_store(engine, known, roots, **options)
            return found, {"inventory": "store", "inventory_age_s": _age(engine, roots),
                           **({"changelog_records": caught_up} if caught_up else {})}
        except (OSError, ValueError) as err:
            why = str(err)
    return walk(roots, known), {"inventory": "walk", **({"inventory_reason": why} if why else {})}


def stored_on(roots: list[str], osts: set[int], settings=None, cluster: str | None = None):
    """The files below ``roots`` with an object on ``osts``, as ``(path, size, ino, mtime_ns, nlink, layout)``,
    from the inventory through its ``(ost, bytes)`` index (after the emulated MDT's pending records for
    ``cluster``), and the problems met; None when the inventory cannot answer for ``roots`` (the caller walks).

    A drain reads this, and a drain must miss no file: unlike a plan (which at worst balances less), it is
    answered from the inventory only while a changelog consumer keeps it current (``iez inventory follow``),
    not from a scan alone."""
    if _store_refused(roots, settings) is not None:
        return None
    from iez.db.engine import engine_for

    engine = engine_for((settings or _settings()).db_url)
    with engine.connect() as conn:
        if not sql.is_followed(conn):
            return None
    if cluster:
        _catch_up(engine, cluster)
    problems: list[str] = []
    with engine.connect() as conn:
        found = root_ids(conn, roots)
        if found is None:
            return None
        ids, everything = found
        rows = sql.files_on(conn, osts, None if everything else ids)
        return list(_rows(Paths.load(conn), rows, problems)), problems


def _age(engine: Engine, roots: list[str]) -> float | None:
    """Seconds since the inventory of ``roots`` was last brought up to date (its scan or a changelog batch)."""
    from iez.db.models import utcnow

    with engine.connect() as conn:
        seeded = sql.seeded_roots(conn)
        times = [seeded[os.path.abspath(r)]["scanned"] for r in roots if os.path.abspath(r) in seeded]
        times += sql.changelog_times(conn)
    return round((utcnow() - max(times)).total_seconds(), 1) if times else None


def _settings():
    from iez.config import Settings

    return Settings.from_env()


def _store_refused(roots: list[str], settings) -> str | None:
    """Why the inventory cannot answer for ``roots`` (None: it can)."""
    if not _settings().inventory:
        return "IEZ_INVENTORY=off"
    from sqlalchemy.exc import SQLAlchemyError

    from iez.db.engine import engine_for, read
    from iez.db.schema import check_schema

    try:
        engine = engine_for((settings or _settings()).db_url)
        check_schema(engine)
        if read(engine, lambda conn: root_ids(conn, roots)) is None:
            return "not seeded for these roots (iez inventory scan)"
    except (OSError, ValueError, RuntimeError, SQLAlchemyError) as err:
        return str(err).splitlines()[0]
    return None


def _catch_up(engine: Engine, cluster: str) -> int:
    """Apply the emulated MDT's pending records when a consumer follows it (a plan sees the tree as it is)."""
    from iez.commands.inventory import consumer_for

    consumer = consumer_for(engine, cluster=cluster)
    with engine.connect() as conn:
        followed = sql.is_followed(conn, consumer.mdt, consumer.user)
    if not followed or not consumer.reader.path.exists():
        return 0
    return consumer.run_once().records
