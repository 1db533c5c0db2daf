"""Keys, saved ``lctl get_param`` text and real ``iez-agent`` processes for the ingest tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import zmq.auth

from agents.keys import create_keypair

GiB_KB = 1024 * 1024


class Keys:
    """An MDS key pair and one pair per OSS; ``authorized`` holds the OSS public keys the MDS accepts."""

    def __init__(self, root: Path, oss_ids=(), unauthorised=()):
        self.root = root
        self.authorized = root / "authorized"
        self.authorized.mkdir(parents=True)
        create_keypair(root, "mds")
        for oss in oss_ids:
            self.add(oss)
        for name in unauthorised:
            create_keypair(root / "agents", name)

    def add(self, oss: str) -> None:
        public, _ = create_keypair(self.root / "agents", oss)
        (self.authorized / f"{oss}.key").write_bytes(public.read_bytes())

    def mds_options(self) -> list[str]:
        return ["--curve-secret-key", str(self.root / "mds.key_secret"), "--curve-authorized", str(self.authorized)]

    def agent_options(self, key_of: str) -> list[str]:
        return ["--curve-server-key", str(self.root / "mds.key"),
                "--curve-secret-key", str(self.root / "agents" / f"{key_of}.key_secret")]

    def curve(self, key_of: str) -> tuple[bytes, bytes, bytes]:
        """(public, secret, server public) for :class:`mds_helpers.Publisher`."""
        public, secret = zmq.auth.load_certificate(str(self.root / "agents" / f"{key_of}.key_secret"))
        server, _ = zmq.auth.load_certificate(str(self.root / "mds.key"))
        return public, secret, server


def lctl_text(osts: list[str], avail_kb: int = 6 * GiB_KB) -> str:
    """``lctl get_param obdfilter.*.kbytes*`` output for these OST names."""
    return "".join(f"obdfilter.{name}.kbytestotal={10 * GiB_KB}\nobdfilter.{name}.kbytesavail={avail_kb}\n"
                   for name in osts)


def start_agent(tmp: Path, oss: str, endpoint: str, osts: list[str], *extra: str) -> subprocess.Popen:
    """A real agent reporting ``osts`` (from saved lctl text) every second."""
    saved = tmp / f"{oss}-lctl.txt"
    saved.write_text(lctl_text(osts))
    log = (tmp / f"agent-{oss}.log").open("ab")
    return subprocess.Popen([sys.executable, "-m", "agents.cli", "--oss-id", oss, "--mds", endpoint, "--interval", "1",
                             "--lctl-output", str(saved), *extra], stdout=subprocess.DEVNULL, stderr=log)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
