"""Progress on stderr when it is a terminal (rich), never on stdout and never into a pipe: iez simulate,
the start of iez cluster emulate, and a line per step from the benchmarks."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys

import pytest

from ops_helpers import REPO

pytestmark = pytest.mark.slow

SIM = ["simulate", "--scenario", "paper-ior-fpp-sc8-8,paper-ior-fpp-sc8-16", "--policy", "rr,iez", "--json"]


def run_with_terminal_stderr(argv: list[str], timeout: float = 120) -> tuple[int, bytes, bytes]:
    """argv with stderr on a pseudo-terminal, stdout on a pipe: (exit code, stdout, what the terminal got)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL,
                            env={**os.environ, "COLUMNS": "120"})
    os.close(follower)
    terminal = b""
    try:
        out = proc.stdout.read()
        code = proc.wait(timeout)
        while select.select([leader], [], [], 0.5)[0]:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the other end is closed: all read
                break
            if not chunk:
                break
            terminal += chunk
    finally:
        os.close(leader)
    return code, out, terminal


def test_simulate_shows_progress_on_a_terminal_and_keeps_stdout_json():
    code, out, terminal = run_with_terminal_stderr([sys.executable, "-m", "iez.cli", *SIM])
    assert code == 0
    assert len(json.loads(out)) == 4  # stdout is the JSON alone
    assert b"simulating" in terminal and b"paper-ior-fpp-sc8" in terminal
    assert b"\x1b[" in terminal  # drawn by rich


def test_simulate_is_quiet_in_a_pipe():
    done = subprocess.run([sys.executable, "-m", "iez.cli", *SIM], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == ""
    assert len(json.loads(done.stdout)) == 4


def test_cluster_emulate_start_shows_its_steps(tmp_path):
    argv = [sys.executable, "-m", "iez.cli", "cluster", "emulate", "--root", str(tmp_path / "c"), "--no-agents"]
    code, out, terminal = run_with_terminal_stderr(argv)
    assert code == 0 and out.startswith(b"emulated cluster: 3 OSS, 15 OSTs")
    assert b"emulated cluster" in terminal and b"CURVE keys for the MDS and 3 OSS" in terminal  # its last step
    quiet = subprocess.run([*argv[:-2], str(tmp_path / "d"), "--no-agents"], capture_output=True, text=True)
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_benchmark_prints_a_line_per_step():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "aipa_bench.py"), "--no-grid", "--ranks", "8",
                           "--noise", "0", "--runs", "4"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    steps = [line for line in done.stderr.splitlines() if "] aipa: " in line]
    assert len(steps) == 4 and "ior-fpp, 8 ranks" in steps[0]  # one per workload
    assert "] aipa: " not in done.stdout  # the table stays alone on stdout
