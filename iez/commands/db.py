"""``iez db``: create or upgrade the interaction database, and show its schema revision."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from typing import Callable

from sqlalchemy.exc import SQLAlchemyError

from iez.config import Settings, describe
from iez.db import DatabaseUnavailable, SchemaOutOfDate
from iez.db.engine import engine_for
from iez.db.schema import current_revision, downgrade, ensure_database, head_revision, upgrade


def add_db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        metavar="DB",
        help="interaction DB: a SQLite file path or mysql://user[:password]@host[:port]/db "
        "(default: $IEZ_DB, else $IEZ_STATE_DIR/iez.db)",
    )


def settings_from(args: argparse.Namespace) -> Settings:
    return Settings.from_env(db=getattr(args, "db", None))


def db_errors(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Print a database problem as one line (exit 1), never as a traceback."""

    @functools.wraps(handler)
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (DatabaseUnavailable, SchemaOutOfDate) as err:
            print(f"iez {args.command}: error: {err}", file=sys.stderr)
            return 1
        except SQLAlchemyError as err:
            reason = str(getattr(err, "orig", None) or err).splitlines()[0]
            print(f"iez {args.command}: error: database error: {reason}", file=sys.stderr)
            return 1

    return wrapped


def register(subparsers) -> None:
    parser = subparsers.add_parser("db", help="create, upgrade or inspect the interaction database")
    actions = parser.add_subparsers(dest="db_action", metavar="ACTION", required=True)
    up = actions.add_parser("upgrade", help="create the database or bring it to the current schema")
    add_db_option(up)
    up.add_argument("--revision", default="head", help="target revision (default: head)")
    up.set_defaults(handler=_upgrade)
    down = actions.add_parser("downgrade", help="go back to an older schema revision (drops data of newer tables)")
    add_db_option(down)
    down.add_argument("revision", help="target revision, e.g. base")
    down.set_defaults(handler=_downgrade)
    cur = actions.add_parser("current", help="print the schema revision of the database and the one iez needs")
    add_db_option(cur)
    cur.add_argument("--json", action="store_true", help="print one JSON object")
    cur.set_defaults(handler=_current)


@db_errors
def _upgrade(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    engine = engine_for(settings.db_url)
    ensure_database(settings.db_url)
    before = current_revision(engine)
    after = upgrade(engine, args.revision)
    print(f"interaction DB {describe(settings.db_url)} is at schema revision {after}"
          + (f" (was {before or 'empty'})" if before != after else ""))
    return 0


@db_errors
def _downgrade(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    after = downgrade(engine_for(settings.db_url), args.revision)
    print(f"interaction DB {describe(settings.db_url)} is at schema revision {after}")
    return 0


@db_errors
def _current(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    current, head = current_revision(engine_for(settings.db_url)), head_revision()
    if args.json:
        print(json.dumps({"db": describe(settings.db_url), "current": current, "head": head,
                          "up_to_date": current == head}))
    else:
        print(f"{describe(settings.db_url)}: revision {current or 'none'}, iez needs {head}"
              + ("" if current == head else f" (run `iez db upgrade --db {settings.db}`)"))
    return 0 if current == head else 1
