"""``iez map``: layout maps, the file a job's ranks read their layouts from (``IEZ_MAP``; :mod:`iez.maps`).

- ``iez map export --db DB --app APP --out FILE``: APP's live layouts, written atomically, mode 0600;
- ``iez map fetch --api URL --app APP --out FILE``: the same map from the REST API, as the user the
  environment authenticates (MUNGE, or a token), for users who cannot read the DB;
- ``iez map show FILE [--path PATH]``: a map's header, or the layout it holds for one path.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import urllib.parse
from pathlib import Path

from iez.commands.db import add_db_option, db_errors, settings_from
from iez.db import open_db
from iez.maps import LayoutMap, MapError, app_exists, export_map


def register(subparsers) -> None:
    parser = subparsers.add_parser("map", help="export an application's layouts as a layout map (IEZ_MAP)")
    actions = parser.add_subparsers(dest="map_action", metavar="ACTION", required=True)
    export = actions.add_parser(
        "export", help="write APP's live layouts to a layout map for the library (IEZ_MAP=FILE)",
        description="Write APP's live allocations to FILE, a constant database the preload library maps "
        "read-only (IEZ_MAP=FILE). The file is written under a temporary name and renamed, mode 0600.")
    add_db_option(export)
    export.add_argument("--app", required=True, help="application name (as the library records it: IEZ_APP)")
    export.add_argument("--out", required=True, metavar="FILE", help="the map to write (replaced atomically)")
    export.add_argument("--pinned", action="store_true",
                        help="also every layout pinned by hand (iez alloc add), which belongs to no application")
    export.add_argument("--json", action="store_true", help="print {path, app, entries, bytes, seconds}")
    export.set_defaults(handler=_export)
    fetch = actions.add_parser(
        "fetch", help="download APP's layout map from the REST API, as the user you are (IEZ_MAP=FILE)",
        description="GET /v1/apps/APP/map from the iez API and write it to FILE (mode 0600, replaced "
        "atomically), checked to be a layout map of APP first. The API knows who asks from "
        "IEZ_API_TOKEN (the service token), IEZ_API_USER_TOKEN (a per-user token) or a MUNGE "
        "credential from the local munged (IEZ_MUNGE_SOCKET, else libmunge's default socket), in that "
        "order; a user gets only the maps of applications they own.")
    fetch.add_argument("--api", default=None, metavar="URL",
                       help="the API's base URL, e.g. http://mds:8000 (default: $IEZ_API_URL)")
    fetch.add_argument("--app", required=True, help="application name")
    fetch.add_argument("--out", required=True, metavar="FILE", help="the map to write (replaced atomically)")
    fetch.add_argument("--timeout", type=float, default=60.0, metavar="S",
                       help="give up after this many seconds (default 60)")
    fetch.add_argument("--json", action="store_true", help="print {path, app, entries, bytes, seconds}")
    fetch.set_defaults(handler=_fetch)
    show = actions.add_parser("show", help="print a layout map's header, or the layout it holds for a path")
    show.add_argument("file", metavar="FILE", help="a layout map (.cdb) written by iez map export or the MDS")
    show.add_argument("--path", help="print the entry of this absolute path (exit 1 when the map has none)")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(handler=_show)


@db_errors
def _export(args: argparse.Namespace) -> int:
    engine = open_db(settings_from(args))
    from iez.db.engine import read

    if not read(engine, lambda conn: app_exists(conn, args.app)):
        raise ValueError(f"no application named {args.app!r} in the DB (its requests create it)")
    info = export_map(engine, args.app, args.out, pinned=args.pinned)
    if args.json:
        print(json.dumps(info))
    else:
        print(f"wrote {info['entries']} layouts of {args.app!r} to {info['path']} ({info['bytes']} bytes, "
              f"{info['seconds']:.2f} s); run the job with IEZ_MAP={info['path']}")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from iez.api.client import base_url, call
    from iez.config import Settings

    base = base_url(args.api or Settings.from_env().api_url)
    url = f"{base}/v1/apps/{urllib.parse.quote(args.app, safe='')}/map"
    started = time.monotonic()
    data = call(base, "GET", url[len(base):], timeout=args.timeout)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            got = LayoutMap(tmp)
        except MapError as err:
            raise ValueError(f"{url} did not answer a layout map: {err}") from None
        if got.app != args.app:
            raise ValueError(f"{url} answered the map of {got.app!r}, not {args.app!r}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    info = {"path": str(out.resolve()), "app": got.app, "entries": got.entries, "bytes": len(data),
            "seconds": round(time.monotonic() - started, 3)}
    if args.json:
        print(json.dumps(info))
    else:
        print(f"wrote {info['entries']} layouts of {args.app!r} to {info['path']} ({info['bytes']} bytes); "
              f"run the job with IEZ_MAP={info['path']}")
    return 0


def _show(args: argparse.Namespace) -> int:
    m = LayoutMap(args.file)
    if args.path:
        entry = m.lookup(args.path)
        if entry is None:
            print(json.dumps(None) if args.json else f"{args.path}: not in the map of {m.app!r}")
            return 1
        out = {"file": entry.path, "stripe_size": entry.stripe_size, "stripe_count": entry.stripe_count,
               "osts": [int(o) for o in (entry.osts or "").split()], "layout": entry.layout,
               "default_layout": entry.default_layout}
        print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
        return 0
    out = {"path": m.path, "version": int(m.header["version"]), "app": m.app, "entries": m.entries,
           "created": float(m.header.get("created", 0)), "bytes": len(m.data)}
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0
