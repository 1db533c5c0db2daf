"""``iez mds --status`` tells a stopped MDS from a running one; a busy or unresolvable bind address for
``iez mds`` (agents' endpoint and --metrics-bind) and ``iez api`` is one line and exit code 2."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from ops_helpers import Mds, free_port

from conftest import fresh_db

pytestmark = pytest.mark.slow


def iez(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "iez.cli", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "IEZ_API_TOKEN": "t" * 32})


def test_status_of_a_running_then_stopped_mds(tmp_path):
    db = fresh_db("sqlite", tmp_path, "live")
    mds = Mds(db, tmp_path).start()
    try:
        live = iez("mds", "--status", "--status-file", str(mds.status_file))
        assert live.returncode == 0, live.stderr
        assert f"MDS pid {mds.proc.pid}" in live.stdout
    finally:
        assert mds.stop() == 0
    stopped = iez("mds", "--status", "--status-file", str(mds.status_file))
    assert stopped.returncode == 1 and stopped.stdout == ""
    assert stopped.stderr.startswith("iez mds: MDS not running (last status from ")
    assert stopped.stderr.count("\n") == 1
    as_json = iez("mds", "--status", "--json", "--status-file", str(mds.status_file))
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["running"] is False


def test_status_with_a_live_pid_but_an_old_heartbeat_is_not_running(tmp_path):
    """The pid of a stopped MDS may be reused by another process: the heartbeat decides then."""
    path = tmp_path / "mds-status.json"
    path.write_text(json.dumps({"pid": os.getpid(), "time": time.time() - 600, "endpoint": "tcp://*:5555"}))
    done = iez("mds", "--status", "--status-file", str(path))
    assert done.returncode == 1 and "MDS not running (last status from" in done.stderr


def assert_one_line(done: subprocess.CompletedProcess, *parts: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if "cannot bind" in line]
    assert len(lines) == 1 and all(p in lines[0] for p in parts), done.stderr[-2000:]


@pytest.fixture
def busy_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_mds_on_a_busy_endpoint(tmp_path, busy_port):
    db = fresh_db("sqlite", tmp_path, "bind")
    done = iez("mds", "--insecure", "--db", db, "--bind", f"tcp://127.0.0.1:{busy_port}",
               "--status-file", str(tmp_path / "s.json"))
    assert_one_line(done, f"cannot bind tcp://127.0.0.1:{busy_port}: Address already in use")


def test_mds_on_an_unresolvable_endpoint(tmp_path):
    db = fresh_db("sqlite", tmp_path, "bind")
    done = iez("mds", "--insecure", "--db", db, "--bind", "tcp://no-such-host.invalid:5555",
               "--status-file", str(tmp_path / "s.json"))
    assert_one_line(done, "cannot bind tcp://no-such-host.invalid:5555: ")


def test_mds_metrics_on_a_busy_port(tmp_path, busy_port):
    db = fresh_db("sqlite", tmp_path, "bind")
    done = iez("mds", "--insecure", "--db", db, "--bind", f"tcp://127.0.0.1:{free_port()}",
               "--metrics-bind", f"127.0.0.1:{busy_port}", "--status-file", str(tmp_path / "s.json"))
    assert_one_line(done, f"cannot bind http://127.0.0.1:{busy_port}", "Address already in use")


def test_api_on_a_busy_port(tmp_path, busy_port):
    db = fresh_db("sqlite", tmp_path, "bind")
    done = iez("api", "--db", db, "--host", "127.0.0.1", "--port", str(busy_port))
    assert_one_line(done, f"cannot bind http://127.0.0.1:{busy_port}: Address already in use")


def test_api_on_an_unresolvable_host(tmp_path):
    db = fresh_db("sqlite", tmp_path, "bind")
    done = iez("api", "--db", db, "--host", "no-such-host.invalid", "--port", str(free_port()))
    assert_one_line(done, "cannot bind http://no-such-host.invalid:")
