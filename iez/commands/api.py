"""``iez api``: serve the REST API with uvicorn.

It refuses to start on a database whose schema is not current, naming the
``iez db upgrade`` command that fixes it, and exits 1 with one line when the
database cannot be reached.

Users authenticate with MUNGE (``--munge-socket``, ``IEZ_API_MUNGE_SOCKET``) or
their own tokens (``--user-tokens``, ``IEZ_API_USER_TOKENS``); with either, reads
go to owners only unless ``IEZ_API_READS`` says otherwise (:mod:`iez.api.auth`).
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
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                        help="least severe log records printed (default info)")
    parser.add_argument("--munge-socket", metavar="PATH", help="accept MUNGE credentials, checked by the munged "
                        "on this socket (default $IEZ_API_MUNGE_SOCKET; Debian's is /run/munge/munge.socket.2)")
    parser.add_argument("--user-tokens", metavar="FILE", help="accept the per-user tokens of FILE ('USER TOKEN' "
                        "lines, no access for others; default $IEZ_API_USER_TOKENS)")
    parser.add_argument("--max-body", metavar="SIZE", help="refuse request bodies larger than SIZE with 413, before "
                        "reading them (bytes, or with k, M or G; default $IEZ_API_MAX_BODY, else 64M: room for "
                        "100,000 requests in one POST /v1/requests)")
    parser.set_defaults(handler=_serve)


@db_errors
def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from iez.api import create_app
    from iez.api.limits import ENV_MAX_BODY, max_body_from_env, parse_size

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port} is outside 0..65535")
    if args.workers < 1:
        raise ValueError(f"--workers {args.workers} must be at least 1")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_from(args)
    users = {k: v for k, v in (("munge_socket", args.munge_socket), ("user_tokens", args.user_tokens)) if v}
    if users:
        settings = settings.model_copy(update=users)
        if "reads" not in settings.model_fields_set:  # IEZ_API_READS unset: users can authenticate now
            settings = settings.model_copy(update={"reads": "owner"})
    max_body = parse_size(args.max_body, "--max-body") if args.max_body else max_body_from_env()
    app = create_app(settings, max_body=max_body)  # checks the schema and the user credentials before binding the port
    from iez.cli import check_bind

    check_bind(args.host, args.port)  # a busy or unresolvable address: one line, exit 2
    options = dict(host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log)
    if args.workers == 1:
        uvicorn.run(app, **options)
    else:
        os.environ["IEZ_DB"] = settings.db  # the workers read their settings from the environment
        os.environ[ENV_MAX_BODY] = str(max_body)
        for name, value in (("IEZ_API_MUNGE_SOCKET", settings.munge_socket),
                            ("IEZ_API_USER_TOKENS", settings.user_tokens), ("IEZ_API_READS", settings.reads)):
            if value:
                os.environ[name] = value
        uvicorn.run("iez.api.app:app_from_env", factory=True, workers=args.workers, **options)
    return 0
