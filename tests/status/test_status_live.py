"""``iez status`` on a terminal (a rich table) and ``--watch`` (a view per period until interrupted)."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time

import pytest

from test_status import fill_db

pytestmark = pytest.mark.slow


def read_until(fd: int, needle: bytes, timeout: float = 30.0) -> bytes:
    data, deadline = b"", time.monotonic() + timeout
    while needle not in data and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
    return data


def test_status_on_a_terminal_is_a_rich_table(db: str):
    fill_db(db)
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "iez.cli", "status", "--db", db], stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "160"})
    os.close(follower)
    try:
        out = read_until(leader, b"scratch").decode()
        assert proc.wait(30) == 0
    finally:
        os.close(leader)
    assert "┃" in out or "│" in out  # box drawing: rich, not the plain columns
    for word in ("oss0", "oss1", "degraded", "inactive", "flash", "scratch", "NO"):
        assert word in out


def test_status_watch_prints_a_view_per_period_until_interrupted(db: str):
    fill_db(db)
    proc = subprocess.Popen([sys.executable, "-m", "iez.cli", "status", "--db", db, "--json", "--watch", "0.3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        views = [json.loads(proc.stdout.readline()) for _ in range(3)]
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
    assert code == 0, proc.stderr.read()
    assert [len(v["osts"]) for v in views] == [3, 3, 3]
    assert views[0]["time"] < views[1]["time"] < views[2]["time"]
    assert "Traceback" not in proc.stderr.read()
