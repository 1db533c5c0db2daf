"""Issue 30 item 5: silent agents and a keyless MDS speak up.

The tester's agent pointed at a dead MDS printed "publishing to ..." and nothing more; an agent using
another OSS's key said "connected" and exited 0 while the MDS dropped every message; an MDS whose
authorised-keys directory held no usable key (or *.key_secret files) started with an INFO line. Each is
met here with real processes: the installed ``iez-agent`` and a real ``iez mds``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_support import agent_command, proc_tree  # noqa: F401 (proc_tree is a fixture)
from agents.keys import create_keypair
from conftest import fresh_db
from waiting import scaled

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def procs(request):
    """Start processes with output to files; every one is stopped at the end, even when the test fails."""
    started: list[subprocess.Popen] = []

    def start(argv: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
        env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k != "IEZ_AGENT_CONFIG"}
        with log.open("w") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _wait_text(path: Path, text: str, proc: subprocess.Popen, timeout: float = 60) -> str:
    deadline = time.monotonic() + scaled(timeout)
    while True:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not in {path.name} within the deadline (exit {proc.poll()}):\n{content}")
        time.sleep(0.2)


def _mds(db: str, tmp_path: Path, *extra: str) -> tuple[list[str], Path]:
    status = tmp_path / "mds-status.json"
    return ([sys.executable, "-m", "iez.cli", "mds", "--db", db, "--bind", f"tcp://127.0.0.1:{_free_port()}",
             "--interval", "1", "--cpu-max", "100", "--mem-max", "100", "--status-file", str(status), *extra], status)


def test_agent_warns_when_no_mds_answers(tmp_path, proc_tree, procs):  # noqa: F811
    log = tmp_path / "agent.log"
    agent = procs([*agent_command(), "--mds", f"tcp://127.0.0.1:{_free_port()}", "--interval", "1",
                   "--root", str(proc_tree), "--oss-id", "oss1"], log)
    text = _wait_text(log, "no handshake with the MDS", agent)
    assert "is iez mds running there" in text and "dropped" in text
    time.sleep(3)
    assert log.read_text().count("no handshake with the MDS") == 1  # once, not every interval
    assert agent.poll() is None


def test_agent_with_another_oss_key_warns_and_the_mds_drops_its_messages(tmp_path, proc_tree, procs):  # noqa: F811
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    mds_public, mds_secret = create_keypair(keys, "mds")
    allowed.mkdir()
    for oss in ("oss1", "oss2"):
        create_keypair(keys, oss)
        (allowed / f"{oss}.key").write_bytes((keys / f"{oss}.key").read_bytes())
    db = fresh_db("sqlite", tmp_path, "wrongkey")
    argv, status_file = _mds(db, tmp_path, "--curve-secret-key", str(mds_secret), "--curve-authorized", str(allowed))
    mds_log = tmp_path / "mds.log"
    mds = procs(argv, mds_log, env={"IEZ_STATE_DIR": str(tmp_path / "state")})
    endpoint = argv[argv.index("--bind") + 1]
    deadline = time.monotonic() + scaled(60)
    while not status_file.exists():
        assert mds.poll() is None, mds_log.read_text()
        assert time.monotonic() < deadline, "iez mds did not come up"
        time.sleep(0.1)
    log = tmp_path / "agent.log"
    agent = procs([*agent_command(), "--mds", endpoint, "--interval", "1", "--root", str(proc_tree),
                   "--oss-id", "oss1", "--curve-server-key", str(mds_public),
                   "--curve-secret-key", str(keys / "oss2.key_secret")], log)
    text = _wait_text(log, "is named for OSS 'oss2' but this agent reports as 'oss1'", agent)
    assert "every message would be dropped" in text
    deadline = time.monotonic() + scaled(60)
    while True:  # the MDS does drop them: the warning is about a real failure
        status = json.loads(status_file.read_text())
        if status["messages"]["dropped"].get("wrong_key", 0) >= 1:
            break
        assert time.monotonic() < deadline, f"no wrong_key drop: {status['messages']}"
        time.sleep(0.3)
    assert status["messages"]["accepted"] == 0


def test_mds_refuses_secret_keys_in_the_authorised_directory(tmp_path):
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    _, mds_secret = create_keypair(keys, "mds")
    create_keypair(allowed, "oss1")  # writes oss1.key and oss1.key_secret: the secret does not belong here
    db = fresh_db("sqlite", tmp_path, "secrets")
    argv, _ = _mds(db, tmp_path, "--curve-secret-key", str(mds_secret), "--curve-authorized", str(allowed))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=scaled(120),
                          env={**os.environ, "IEZ_STATE_DIR": str(tmp_path / "state")})
    assert done.returncode == 2, done.stderr
    assert "holds secret keys (oss1.key_secret)" in done.stderr
    assert "Traceback" not in done.stderr


def test_mds_with_no_oss_key_warns_loudly(tmp_path, procs):
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    _, mds_secret = create_keypair(keys, "mds")
    allowed.mkdir()
    db = fresh_db("sqlite", tmp_path, "nokeys")
    argv, _ = _mds(db, tmp_path, "--curve-secret-key", str(mds_secret), "--curve-authorized", str(allowed))
    log = tmp_path / "mds.log"
    mds = procs(argv, log, env={"IEZ_STATE_DIR": str(tmp_path / "state")})
    text = _wait_text(log, "NO OSS KEY in", mds)
    assert "WARNING" in text and "every agent's handshake is refused" in text
