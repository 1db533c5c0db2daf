"""The ``iez`` command: one sub-command module per concern under :mod:`iez.commands`."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from iez import __version__
from iez.errors import IezError, exit_code

DESCRIPTION = """\
iez balances Lustre stripe placement across OSTs and OSSs: OSS agents report OST
space, load and state to the MDS control loop, which allocates the layouts of
the files an application will write; the preload library creates each file with
its layout. Compare policies on the simulator, run the MDS and the REST API,
watch the cluster, learn applications' requests from traces."""

EPILOG = """\
Start with: iez demo (the whole pipeline on an emulated cluster), iez simulate --list,
iez status. Every command has --help. The interaction DB is IEZ_DB or --db (default
$IEZ_STATE_DIR/iez.db). Operations: deploy/README.md."""

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
    "iez.commands.copy",
    "iez.commands.shares",
    "iez.commands.stage",
    "iez.commands.rebalance",
    "iez.commands.mirror",
    "iez.commands.inventory",
    "iez.commands.drain",
    "iez.commands.balance",
)


class DefaultsShown:
    """Mixed into a parser's own formatter: an option with a default its help does not state gets
    "(default: X)" appended, so every default shows in --help."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (action.option_strings and "default" not in text and default not in (None, False, argparse.SUPPRESS)
                and not (isinstance(default, (list, tuple)) and not default)
                and not isinstance(action, (argparse._HelpAction, argparse._VersionAction))):
            text += " (default: %(default)s)"
        return text


def _walk(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                yield from _walk(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iez", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"iez {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                       help="one of these; iez COMMAND --help says more")
    for name in COMMAND_MODULES:
        import_module(name).register(subparsers)
    for each in _walk(parser):
        for action in each._actions:  # a command's --help opens with what the list of commands says of it
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    sub = action.choices[choice.dest]
                    if sub.description is None and choice.help:
                        sub.description = choice.help[0].upper() + choice.help[1:] + "."
        if not issubclass(each.formatter_class, DefaultsShown):
            each.formatter_class = type(f"Defaults{each.formatter_class.__name__}",
                                        (DefaultsShown, each.formatter_class), {})
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
    except IezError as err:  # one clear line, no traceback; the code is the error tree's (iez/errors.py)
        print(f"iez {args.command}: error: {err}", file=sys.stderr)
        return exit_code(err)
    except (ValueError, OSError) as err:  # bad input: one clear line, no traceback
        print(f"iez {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("iez: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
