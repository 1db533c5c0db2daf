"""``iez api``: serve the REST API with uvicorn.

It refuses to start on a database whose schema is not current, naming the
``iez db upgrade`` command that fixes it, and exits 1 with one line when the
database cannot be reached.
"""

from __future__ import annotations

import argparse
import logging
import os

from iez.commands.db import add_db_option, db_errors, settings_from


def register(subparsers) -> None:
    parser = subparsers.add_parser("api", help="serve the REST API (FastAPI on uvicorn)")
    add_db_option(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8177, help="TCP port (default 8177)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--access-log", action="store_true", help="log one line per request")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.set_defaults(handler=_serve)


@db_errors
def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from iez.api import create_app

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port} is outside 0..65535")
    if args.workers < 1:
        raise ValueError(f"--workers {args.workers} must be at least 1")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_from(args)
    app = create_app(settings)  # checks the schema before binding the port
    options = dict(host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log)
    if args.workers == 1:
        uvicorn.run(app, **options)
    else:
        os.environ["IEZ_DB"] = settings.db  # the workers read their settings from the environment
        uvicorn.run("iez.api.app:app_from_env", factory=True, workers=args.workers, **options)
    return 0
