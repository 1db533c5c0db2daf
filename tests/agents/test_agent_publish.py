"""Real agents publishing to real ZeroMQ SUB sockets on 127.0.0.1 (no mocks)."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import pytest
import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from agents.keys import create_keypair
from iez.api.schemas import OssStats

from agent_support import DATA, TREE_OSTS, proc_tree, run_agent, spawn_agent  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow



@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def sub_socket(ctx: zmq.Context, **options) -> zmq.Socket:
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    for name, value in options.items():
        setattr(sock, name, value)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    return sock


def receive(sock: zmq.Socket, until: float, want: int | None = None) -> list[dict]:
    """Messages arriving before the monotonic deadline ``until`` (or once ``want`` arrived)."""
    got: list[dict] = []
    while (want is None or len(got) < want) and time.monotonic() < until:
        if sock.poll(max(1, int((until - time.monotonic()) * 1000))):
            frames = sock.recv_multipart()
            assert len(frames) == 1  # single-frame JSON
            got.append(json.loads(frames[0].decode("utf-8")))
    return got


def receive_while_running(sock: zmq.Socket, procs, timeout: float = 15) -> list[dict]:
    """Messages received until every process has exited (read as they come: a SUB socket
    discards what it queued from a peer once that peer disconnects)."""
    got: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sock.poll(100):
            got.extend(receive(sock, time.monotonic() + 0.05, want=1))
        elif all(proc.poll() is not None for proc in procs):
            break
    return got


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_three_messages_with_increasing_seq(ctx, proc_tree: Path, spawn_agent):
    sub = sub_socket(ctx)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    agent = spawn_agent("--mds", f"tcp://127.0.0.1:{port}", "--interval", "1", "--count", "3",
                        "--root", str(proc_tree), "--oss-id", "oss1")
    msgs = receive_while_running(sub, [agent])
    out, err = agent.communicate(timeout=10)
    assert agent.returncode == 0, err
    assert len(msgs) == 3, err
    seqs = [m["seq"] for m in msgs]
    assert seqs == [seqs[0], seqs[0] + 1, seqs[0] + 2]
    times = [m["time"] for m in msgs]
    assert times == sorted(times) and 0.5 < times[2] - times[0] < 4  # one interval apart
    for msg in msgs:
        assert msg["oss_id"] == "oss1" and msg["interval_s"] == 1 and msg["source"] == "procfs"
        assert msg["osts"] == TREE_OSTS
        OssStats.model_validate(msg)
    assert f"connected to the MDS at tcp://127.0.0.1:{port}" in err


def test_agent_started_before_the_mds_binds(ctx, proc_tree: Path, spawn_agent):
    port = free_port()
    agent = spawn_agent("--mds", f"tcp://127.0.0.1:{port}", "--interval", "1", "--count", "4",
                        "--root", str(proc_tree), "--oss-id", "early", "--json")
    time.sleep(1.0)  # the agent is already running and connecting to nobody
    sub = sub_socket(ctx)
    sub.bind(f"tcp://127.0.0.1:{port}")
    msgs = receive_while_running(sub, [agent])
    out, err = agent.communicate(timeout=10)
    assert agent.returncode == 0, err
    printed = [json.loads(line)["seq"] for line in out.splitlines()]
    assert len(printed) == 4
    got = [m["seq"] for m in msgs]
    assert len(got) >= 2, err  # at least the later messages arrive
    assert got == printed[len(printed) - len(got):]  # the newest ones, in order, none lost after connecting
    assert all(m["oss_id"] == "early" for m in msgs)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_the_daemon_cleanly(ctx, proc_tree: Path, spawn_agent, signum):
    sub = sub_socket(ctx)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    agent = spawn_agent("--mds", f"tcp://127.0.0.1:{port}", "--interval", "60", "--root", str(proc_tree))
    assert len(receive(sub, time.monotonic() + 10, want=1)) == 1
    sent = time.monotonic()
    agent.send_signal(signum)
    out, err = agent.communicate(timeout=10)
    assert agent.returncode == 0, err
    assert time.monotonic() - sent < 3
    assert "error" not in err and "Traceback" not in err


def test_once_publishes_exactly_one_message(ctx, spawn_agent):
    sub = sub_socket(ctx)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    agent = spawn_agent("--once", "--mds", f"tcp://127.0.0.1:{port}", "--oss-id", "ddn",
                        "--lctl-output", str(DATA / "lustre-2.14.0-ddn133.txt"))
    msgs = receive_while_running(sub, [agent])
    out, err = agent.communicate(timeout=15)
    assert agent.returncode == 0, err
    assert len(msgs) == 1 and out == ""
    assert msgs[0]["osts"][0]["write_bytes"] == 47288584560640
    OssStats.model_validate(msgs[0])


def test_curve_accepts_only_authorised_agents(ctx, tmp_path: Path, proc_tree: Path, spawn_agent, run_agent):
    keys, allowed = tmp_path / "keys", tmp_path / "allowed"
    mds_public, mds_secret = create_keypair(keys, "mds")
    assert run_agent("keys", str(keys), "good").returncode == 0  # the CLI helper
    create_keypair(keys, "rogue")
    allowed.mkdir()
    (allowed / "good.key").write_bytes((keys / "good.key").read_bytes())  # only this agent is authorised

    auth = ThreadAuthenticator(ctx)
    auth.start()
    try:
        auth.configure_curve(domain="*", location=str(allowed))
        server_public, server_secret = zmq.auth.load_certificate(mds_secret)
        sub = sub_socket(ctx, curve_server=True, curve_publickey=server_public, curve_secretkey=server_secret)
        port = sub.bind_to_random_port("tcp://127.0.0.1")
        endpoint = f"tcp://127.0.0.1:{port}"
        common = ("--mds", endpoint, "--interval", "1", "--count", "3", "--root", str(proc_tree),
                  "--curve-server-key", str(mds_public))
        good = spawn_agent(*common, "--oss-id", "good", "--curve-secret-key", str(keys / "good.key_secret"))
        rogue = spawn_agent(*common, "--oss-id", "rogue", "--curve-secret-key", str(keys / "rogue.key_secret"))
        plain = spawn_agent("--mds", endpoint, "--interval", "1", "--count", "3", "--root", str(proc_tree),
                            "--oss-id", "plain")
        msgs = receive_while_running(sub, [good, rogue, plain])
        results = {name: proc.communicate(timeout=10) + (proc.returncode,)
                   for name, proc in (("good", good), ("rogue", rogue), ("plain", plain))}
    finally:
        auth.stop()
    senders = [m["oss_id"] for m in msgs]
    assert senders == ["good"] * 3, results
    seqs = [m["seq"] for m in msgs]
    assert seqs == list(range(seqs[0], seqs[0] + 3))
    for msg in msgs:
        OssStats.model_validate(msg)
    assert results["good"][2] == 0
    # --count: an agent that never got through says so and fails, rather than exit 0 having published nothing
    assert results["rogue"][2] == 2 and results["plain"][2] == 2
    assert "nothing was published" in results["rogue"][1] and "nothing was published" in results["plain"][1]
    assert "connected to the MDS" in results["good"][1]
    assert "refused this agent's key" in results["rogue"][1]
    assert "connected to the MDS" not in results["rogue"][1]
    assert "connected to the MDS" not in results["plain"][1]


def test_curve_key_file_errors(tmp_path: Path, proc_tree: Path, run_agent):
    pub, sec = create_keypair(tmp_path, "a")
    args = ("--mds", "tcp://127.0.0.1:9", "--once", "--root", str(proc_tree))
    done = run_agent(*args, "--curve-server-key", str(pub), "--curve-secret-key", str(pub))
    assert done.returncode == 2 and "no secret-key in it" in done.stderr
    done = run_agent(*args, "--curve-server-key", str(tmp_path / "none.key"), "--curve-secret-key", str(sec))
    assert done.returncode == 2 and f"CURVE server key {tmp_path / 'none.key'}: no such file" in done.stderr


def test_a_bad_interval_is_skipped_and_the_daemon_goes_on(ctx, tmp_path: Path, spawn_agent):
    saved = tmp_path / "saved.txt"
    good_text = (DATA / "lustre-2.15-ex8761-lctl.txt").read_text()
    saved.write_text(good_text)
    sub = sub_socket(ctx)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    agent = spawn_agent("--mds", f"tcp://127.0.0.1:{port}", "--interval", "1", "--count", "2", "--json",
                        "--lctl-output", str(saved), "--oss-id", "oss1")
    first = json.loads(agent.stdout.readline())
    saved.write_text("obdfilter.fs-OST0000.kbytestotal=oops\n")  # the next read fails
    while "skipped a message" not in (line := agent.stderr.readline()):
        assert line, "the agent ended without reporting the bad read"
    assert f"{saved}:1: " in line and "'oops'" in line
    saved.write_text(good_text)
    second = json.loads(agent.stdout.readline())
    agent.communicate(timeout=10)
    assert agent.returncode == 0
    assert second["seq"] == first["seq"] + 1 and second["time"] - first["time"] > 1.5


def test_seq_keeps_increasing_across_restarts(run_agent):
    args = ("--once", "--json", "--lctl-output", str(DATA / "osd-active.txt"))
    seqs = [json.loads(run_agent(*args).stdout)["seq"] for _ in range(2)]
    assert seqs[1] > seqs[0]
