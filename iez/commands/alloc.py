"""``iez alloc``: pin a layout for one file by hand, and show the layout stored for a file.

A pinned layout is plain (``--stripe-size``, ``--osts``), in an OST pool
(``--pool``), or composite (``--layout``, PFL components each with its OSTs);
it is checked against Lustre's rules (:mod:`iez.layout.rules`) and, where the
DB knows the OSTs' pools, against pool membership, so the placement library
never applies a layout Lustre would refuse. A mirrored layout (``--layout``
with ``mirrors``: 2 to 4 copies, each a composite layout, no OST in two) is
stored as the library's version-3 text.

``iez alloc add`` on a database that holds no tables yet (a new SQLite file, a
new MariaDB database) creates the schema first, so an administrator or a test
can start from nothing; a database at an older iez schema is refused with the
``iez db upgrade`` command to run, because upgrading a shared database is a
deliberate act.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from sqlalchemy import Engine, select

from iez.commands.db import add_db_option, db_errors, settings_from
from iez.commands.layout import describe_text
from iez.db import open_db
from iez.db.allocations import check_layout, check_path, lookup, pin, pin_layout
from iez.db.engine import read
from iez.db.models import OstRow
from iez.errors import NotFound
from iez.layout.rules import loads, ost_pool, tools_layout
from iez.model import Component, Layout, check_pool_name


def register(subparsers) -> None:
    parser = subparsers.add_parser("alloc", help="pin or show the OST layout stored for a file")
    actions = parser.add_subparsers(dest="alloc_action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="pin a layout for one file (replaces its live allocation)")
    add_db_option(add)
    add.add_argument("--file", required=True, help="absolute path of the file")
    add.add_argument("--stripe-size", type=_stripe_size, metavar="BYTES",
                     help="stripe size in bytes, a multiple of 65536")
    add.add_argument("--osts", type=_ost_list, metavar="LIST",
                     help="ordered OST indices, comma separated, e.g. 3,7,11")
    add.add_argument("--pool", metavar="NAME", help="the OST pool the layout is in (lfs setstripe -p)")
    add.add_argument("--layout", metavar="JSON",
                     help='a composite layout instead of --stripe-size/--osts: {"components": [{"start", "end", '
                     '"stripe_size", "osts"}, ...], "pool": P} (end -1: the end of the file; a component the '
                     'file will not reach may give stripe_count instead of osts; pattern "mdt": Data-on-MDT), or '
                     '{"mirrors": [[components], ...]} for a mirrored (FLR) file, the first mirror first')
    add.add_argument("--json", action="store_true", help="print the stored layout as JSON")
    add.set_defaults(handler=_add)
    show = actions.add_parser("show", help="print the live layout stored for a file")
    add_db_option(show)
    show.add_argument("--file", required=True, help="absolute path of the file")
    show.add_argument("--json", action="store_true",
                      help="print {file, stripe_size, stripe_count, osts} and pool, components, mirrors when set")
    show.set_defaults(handler=_show)


def _stripe_size(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"stripe size {text!r} is not a whole number of bytes") from None


def _ost_list(text: str) -> list[int]:
    try:
        osts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"OST list {text!r} must be comma-separated indices, e.g. 3,7,11") from None
    if not osts:
        raise argparse.ArgumentTypeError("OST list is empty")
    return osts


def _print(layout: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(layout))
    else:
        print("\n".join(describe_text(layout) + ([f"  note: {layout['note']}"] if layout.get("note") else [])))


def requested_layout(args: argparse.Namespace) -> Layout | None:
    """The pooled or composite layout ``alloc add`` was given, checked against Lustre's rules; None for a
    plain one (``--stripe-size``/``--osts`` without ``--pool``)."""
    if args.layout is not None:
        if args.stripe_size is not None or args.osts is not None:
            raise ValueError("--layout gives the whole layout: leave out --stripe-size and --osts")
        data = loads(args.layout, "--layout")
        if args.pool is not None and isinstance(data, dict):
            check_pool_name(args.pool, "--pool")
            if data.get("pool", args.pool) != args.pool:
                raise ValueError(f"--pool {args.pool} but --layout says pool {data['pool']!r}")
            data = {**data, "pool": args.pool}
        return tools_layout(data, "--layout", template=False)
    if args.stripe_size is None or args.osts is None:
        raise ValueError("give --stripe-size and --osts, or --layout")
    check_layout(args.file, args.stripe_size, args.osts)
    if args.pool is None:
        return None
    return Layout(args.stripe_size, tuple(args.osts), check_pool_name(args.pool, "--pool"))


def check_pools(engine: Engine, components: Sequence[Component]) -> None:
    """Refuse OSTs the DB knows to be outside their component's pool (Lustre would refuse the layout).

    An OST the DB has not heard of, or whose pools are unknown (NULL), is left to the administrator.
    """
    wanted = {o for c in components if c.pool for o in c.osts}
    if not wanted:
        return
    known = dict(read(engine, lambda conn: conn.execute(
        select(OstRow.ost_index, OstRow.pools).where(OstRow.ost_index.in_(sorted(wanted)))).all()))
    for c in components:
        for ost in c.osts if c.pool else ():
            pools = known.get(ost)
            if pools is not None and c.pool not in pools.split():
                member = f"pools {', '.join(pools.split())}" if pools.split() else "no pool"
                raise ValueError(f"OST {ost} is not in pool {c.pool} (the DB has it in {member}); "
                                 "Lustre would refuse this layout")


@db_errors
def _add(args: argparse.Namespace) -> int:
    check_path(args.file)
    layout = requested_layout(args)
    engine = open_db(settings_from(args), create_if_empty=True)
    if layout is None:
        pin(engine, args.file, args.stripe_size, args.osts)
    else:
        components = [c for copy in layout.copies() for c in copy]
        check_pools(engine, components)
        pin_layout(engine, args.file, layout, ost_pool(components))
    stored = read(engine, lambda conn: lookup(conn, args.file))
    if stored is None:  # only another writer's pin or placement, between the two transactions, retires it
        raise NotFound(f"{args.file}: the layout pinned was replaced before it could be shown")
    _print(stored, args.json)
    return 0


@db_errors
def _show(args: argparse.Namespace) -> int:
    check_path(args.file)
    engine = open_db(settings_from(args))
    layout = read(engine, lambda conn: lookup(conn, args.file))
    if layout is None:
        print(f"iez alloc: no allocation for {args.file}", file=sys.stderr)
        return 1
    _print(layout, args.json)
    return 0
