"""``iez alloc``: pin a layout for one file by hand, and show the layout stored for a file.

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

from iez.commands.db import add_db_option, db_errors, settings_from
from iez.db import open_db
from iez.db.allocations import check_path, lookup, pin
from iez.db.engine import read


def register(subparsers) -> None:
    parser = subparsers.add_parser("alloc", help="pin or show the OST layout stored for a file")
    actions = parser.add_subparsers(dest="alloc_action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="pin a layout for one file (replaces its live allocation)")
    add_db_option(add)
    add.add_argument("--file", required=True, help="absolute path of the file")
    add.add_argument("--stripe-size", required=True, type=_stripe_size, metavar="BYTES",
                     help="stripe size in bytes, a multiple of 65536")
    add.add_argument("--osts", required=True, type=_ost_list, metavar="LIST",
                     help="ordered OST indices, comma separated, e.g. 3,7,11")
    add.add_argument("--json", action="store_true", help="print the stored layout as JSON")
    add.set_defaults(handler=_add)
    show = actions.add_parser("show", help="print the live layout stored for a file")
    add_db_option(show)
    show.add_argument("--file", required=True, help="absolute path of the file")
    show.add_argument("--json", action="store_true", help="print {file, stripe_size, stripe_count, osts}")
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
        osts = " ".join(str(o) for o in layout["osts"])
        print(f"{layout['file']}: stripe_size {layout['stripe_size']} stripe_count {layout['stripe_count']} osts {osts}")


@db_errors
def _add(args: argparse.Namespace) -> int:
    engine = open_db(settings_from(args), create_if_empty=True)
    allocation = pin(engine, args.file, args.stripe_size, args.osts)
    _print({"file": allocation.file, "stripe_size": allocation.stripe_size,
            "stripe_count": allocation.stripe_count, "osts": list(allocation.osts)}, args.json)
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
