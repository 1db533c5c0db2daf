"""Create a CURVE key pair for an agent or the MDS.

    python -m agents.keys DIR [NAME]
    iez-agent keys DIR [NAME]

writes ``DIR/NAME.key`` (public: copy it to the MDS's allowed-keys directory, or,
for the MDS's own pair, to every agent) and ``DIR/NAME.key_secret`` (secret,
mode 0600: stays on this host). NAME defaults to the short host name. Existing
files are kept unless ``--force`` is given.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
from pathlib import Path

import zmq.auth

from agents import AgentError

__all__ = ["create_keypair", "main"]

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")


def create_keypair(directory: str | Path, name: str, *, force: bool = False) -> tuple[Path, Path]:
    """Write NAME.key and NAME.key_secret in ``directory``; return their paths."""
    if not _NAME.match(name) or name.startswith("."):
        raise AgentError(f"key name {name!r}: use letters, digits, '.', '_' or '-'")
    directory = Path(directory)
    public, secret = directory / f"{name}.key", directory / f"{name}.key_secret"
    if not force:
        for path in (public, secret):
            if path.exists():
                raise AgentError(f"{path} exists; use --force to replace it")
    old = os.umask(0o077)  # the secret file is never readable by others, not even briefly
    try:
        directory.mkdir(parents=True, exist_ok=True)
        made_public, made_secret = zmq.auth.create_certificates(str(directory), name)
    except OSError as err:
        raise AgentError(f"cannot write keys in {directory}: {err.strerror or err}") from None
    finally:
        os.umask(old)
    os.chmod(made_public, 0o644)
    os.chmod(made_secret, 0o600)
    return Path(made_public), Path(made_secret)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise AgentError(f"{self.prog}: {message}")


def main(argv: list[str] | None = None, prog: str = "python -m agents.keys") -> int:
    parser = _Parser(prog=prog, description="Create a CURVE key pair (zmq.auth certificate files).")
    parser.add_argument("directory", help="where to write NAME.key and NAME.key_secret")
    parser.add_argument("name", nargs="?", default=None, help="key name (default: the short host name)")
    parser.add_argument("--force", action="store_true", help="replace existing files")
    try:
        args = parser.parse_args(argv)
        name = args.name or (socket.gethostname().split(".")[0] or "agent")
        public, secret = create_keypair(args.directory, name, force=args.force)
    except AgentError as err:
        print(f"iez-agent: error: {err}", file=sys.stderr)
        return 2
    print(f"public key: {public}")
    print(f"secret key: {secret}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
