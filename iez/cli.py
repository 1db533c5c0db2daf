"""The ``iez`` command: one sub-command module per concern under :mod:`iez.commands`."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from iez import __version__

#: Modules that contribute sub-commands; each has ``register(subparsers)``.
COMMAND_MODULES = (
    "iez.commands.simulate",
    "iez.commands.bench",
    "iez.commands.db",
    "iez.commands.alloc",
    "iez.commands.api",
    "iez.commands.mds",
    "iez.commands.cluster",
    "iez.commands.status",
    "iez.commands.demo",
    "iez.commands.layout",
    "iez.commands.trace",
    "iez.commands.predict",
    "iez.commands.map",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iez", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"iez {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        import_module(name).register(subparsers)
    return parser


def check_bind(host: str, port: int, scheme: str = "http") -> None:
    """Bind ``host:port`` as a server would, then let go: a busy or unresolvable address is one line
    (OSError "cannot bind SCHEME://HOST:PORT: why", exit 2) before the server's own start, which would
    print a traceback or a log record and exit 1."""
    import socket

    shown = f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn and ZeroMQ bind
            sock.bind(address)
    except OSError as err:  # socket.gaierror included
        raise OSError(f"cannot bind {shown}: {err.strerror or err}") from None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except BrokenPipeError:
        return 0
    except (ValueError, OSError) as err:  # bad input: one clear line, no traceback
        print(f"iez {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("iez: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
