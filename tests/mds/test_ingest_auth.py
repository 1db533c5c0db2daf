"""Authenticated ingest (issue 15): real ``iez mds`` processes, real agents and hostile senders in subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy import select

from agents.keys import create_keypair
from conftest import fresh_db
from iez.config import database_url
from iez.db.engine import make_engine, read
from iez.db.models import OstRow
from ingest_helpers import Keys, start_agent, stop
from mds_helpers import Mds, Publisher, free_port, mds_factory, stats  # noqa: F401 (mds_factory is a fixture)

pytestmark = pytest.mark.slow

INT64_MAX = 2**63 - 1


def holders(db: str) -> dict[int, str]:
    """OST index -> the OSS the DB says holds it."""
    engine = make_engine(database_url(db))
    try:
        return read(engine, lambda c: {r.ost_index: r.oss_id for r in c.execute(select(OstRow)).all()})
    finally:
        engine.dispose()


def accepted(mds: Mds) -> int:
    return mds.status()["messages"]["accepted"]


def test_without_keys_the_mds_refuses_to_start_in_one_line(tmp_path):
    db = fresh_db("sqlite", tmp_path, "nokeys")
    done = subprocess.run([sys.executable, "-m", "iez.cli", "mds", "--db", db, "--bind",
                           f"tcp://127.0.0.1:{free_port()}", "--status-file", str(tmp_path / "s.json")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "--curve-secret-key" in lines[0] and "--insecure" in lines[0]
    assert not (tmp_path / "s.json").exists()


def test_insecure_is_said_at_start_and_in_the_status(tmp_path, mds_factory):
    db = fresh_db("sqlite", tmp_path, "insecure")
    mds = mds_factory(db).start()  # the helper passes --insecure when no keys are given
    assert mds.status()["ingest"] == "insecure"
    assert "ingest is INSECURE (--insecure)" in mds.log.read_text()
    shown = subprocess.run([sys.executable, "-m", "iez.cli", "mds", "--status", "--status-file",
                            str(mds.status_file)], capture_output=True, text=True, timeout=60)
    assert ", ingest insecure" in shown.stdout.splitlines()[0]


def test_insecure_given_with_keys_wins_and_says_so(tmp_path, mds_factory):
    keys = Keys(tmp_path / "keys", ["oss0"])
    db = fresh_db("sqlite", tmp_path, "insecurekeys")
    mds = mds_factory(db, "--insecure", *keys.mds_options()).start()  # e.g. IEZ_MDS_ARGS=--insecure on the unit
    assert mds.status()["ingest"] == "insecure"
    log = mds.log.read_text()
    assert "--insecure: ignoring --curve-secret-key and --curve-authorized" in log and "ingest is INSECURE" in log


def test_keyless_and_unknown_key_agents_are_refused_and_refusals_logged_once(tmp_path, mds_factory):
    keys = Keys(tmp_path / "keys", ["oss0"], unauthorised=["rogue"])
    db = fresh_db("sqlite", tmp_path, "curve")
    metrics_port = free_port()
    mds = mds_factory(db, *keys.mds_options(), "--metrics-bind", f"127.0.0.1:{metrics_port}").start()
    assert mds.status()["ingest"] == "curve"
    real = start_agent(tmp_path, "oss0", mds.endpoint, ["fs-OST0000"], *keys.agent_options("oss0"))
    keyless = start_agent(tmp_path, "plain", mds.endpoint, ["fs-OST0001"])
    rogue = start_agent(tmp_path, "rogue", mds.endpoint, ["fs-OST0002"], *keys.agent_options("rogue"))
    try:
        mds.wait(lambda s: s["messages"]["handshakes_refused"] >= 1 and "oss0" in s["osses"]["fresh"],
                 what="the real agent in, the rogue key refused")
        time.sleep(2)  # the others keep publishing every interval, unheard
        status = mds.status()
        assert status["osses"]["fresh"] == ["oss0"] and status["osses"]["stale"] == []
        assert status["osts"] == 1
        log = mds.log.read_text()
        assert log.count("refused a CURVE handshake") == 1  # once a minute per key, then counted
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as answer:
            scraped = answer.read().decode()
        assert f"iez_mds_handshakes_refused_total {float(status['messages']['handshakes_refused'])}" in scraped
        assert rogue.poll() is None and keyless.poll() is None  # they keep trying; they are just not heard
    finally:
        for agent in (real, keyless, rogue):
            stop(agent)
    assert "refused this agent's key" in (tmp_path / "agent-rogue.log").read_text()
    assert "do the agent and the MDS agree on CURVE" in (tmp_path / "agent-plain.log").read_text()


def test_an_authorised_key_cannot_speak_for_another_oss(tmp_path, mds_factory):
    keys = Keys(tmp_path / "keys", ["oss0", "oss1"])
    db = fresh_db("sqlite", tmp_path, "wrongkey")
    mds = mds_factory(db, *keys.mds_options()).start()
    real = start_agent(tmp_path, "oss0", mds.endpoint, ["fs-OST0000", "fs-OST0001"], *keys.agent_options("oss0"))
    # oss1's key, claiming to be oss0 (and its OSTs with 2^50 KiB free)
    liar = start_agent(tmp_path, "oss0-liar", mds.endpoint, ["fs-OST0000", "fs-OST0001"], "--oss-id", "oss0",
                       *keys.agent_options("oss1"))
    try:
        status = mds.wait(lambda s: s["messages"]["dropped"]["wrong_key"] >= 3 and s["osses"]["fresh"] == ["oss0"],
                          what="the impostor's messages dropped")
        assert status["osses"]["stale"] == []
        log = mds.log.read_text()
        assert "dropping message (wrong_key: message for OSS 'oss0' sent with the key of 'oss1')" in log
        assert log.count("wrong_key") == 1  # once a minute per key
    finally:
        stop(real)
        stop(liar)


def test_a_forged_huge_seq_locks_no_oss_out_not_even_after_a_restart(tmp_path):
    keys = Keys(tmp_path / "keys", ["oss0"])
    db = fresh_db("sqlite", tmp_path, "seq")
    mds = Mds(db, tmp_path, *keys.mds_options()).start()
    pub = Publisher(mds.endpoint, curve=keys.curve("oss0"))  # oss0's own key (stolen, or a confused agent)
    agent = None
    try:
        for _ in range(50):
            pub.send(stats("oss0", INT64_MAX, 0, count=1))
            if "oss0" in mds.status()["osses"]["fresh"]:
                break
            time.sleep(0.1)
        mds.wait(lambda s: s["messages"]["accepted"] >= 1, what="the forged message")
        # a message from the future (beyond --max-skew) is refused outright
        pub.send({**stats("oss0", INT64_MAX, 0, count=1), "time": time.time() + 3600})
        mds.wait(lambda s: s["messages"]["dropped"]["future"] == 1, what="the future message dropped")
        agent = start_agent(tmp_path, "oss0", mds.endpoint, ["fs-OST0000"], *keys.agent_options("oss0"))
        before = accepted(mds)
        mds.wait(lambda s: s["messages"]["accepted"] >= before + 3, what="the real agent's messages accepted")
        assert mds.status()["messages"]["dropped"]["replayed"] == 0
        mds.stop()

        # what the MDS stored (a seq of 2^63-1 at some point) does not lock the agent out after a restart
        mds.start()
        mds.wait(lambda s: s["messages"]["accepted"] >= 3 and s["osses"]["fresh"] == ["oss0"], timeout=20,
                 what="the real agent accepted by the restarted MDS")
        time.sleep(3.5)  # three more intervals: still fresh
        status = mds.status()
        assert status["osses"]["fresh"] == ["oss0"] and status["messages"]["dropped"]["replayed"] <= 1
        # an agent restart (its seq starting again from its clock) is accepted too
        stop(agent)
        agent = start_agent(tmp_path, "oss0", mds.endpoint, ["fs-OST0000"], *keys.agent_options("oss0"))
        before = accepted(mds)
        mds.wait(lambda s: s["messages"]["accepted"] >= before + 2, what="the restarted agent accepted")
    finally:
        pub.close()
        if agent is not None:
            stop(agent)
        mds.stop()


SENDER = r"""
import sys, zmq, zmq.auth
from zmq.utils.monitor import recv_monitor_message
endpoint, secret, server = sys.argv[1:4]
ctx = zmq.Context()
sock = ctx.socket(zmq.PUB)
public, secret = zmq.auth.load_certificate(secret)
sock.curve_publickey, sock.curve_secretkey = public, secret
sock.curve_serverkey = zmq.auth.load_certificate(server)[0]
sock.setsockopt(zmq.SNDHWM, 1)
monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
sock.connect(endpoint)
frame = b"{" + b"x" * (200 * 1024 * 1024)
dropped = 0
def wait_for(kind, ms=30000):
    while monitor.poll(ms):
        if recv_monitor_message(monitor)["event"] == kind:
            return True
    return False
for n in range(5):
    if not wait_for(zmq.EVENT_HANDSHAKE_SUCCEEDED):
        break
    sock.send(frame)
    if wait_for(zmq.EVENT_DISCONNECTED):  # the MDS closed the connection: the frame was too big
        dropped += 1
print(dropped, flush=True)
"""


def vm(pid: int, field: str) -> int:
    """``VmRSS``/``VmHWM`` of a process in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def test_five_200_mb_frames_leave_the_mds_small_and_the_real_oss_fresh(tmp_path):
    keys = Keys(tmp_path / "keys", ["oss0", "oss1"])
    db = fresh_db("sqlite", tmp_path, "big")
    mds = Mds(db, tmp_path, *keys.mds_options()).start()
    agent = start_agent(tmp_path, "oss0", mds.endpoint, ["fs-OST0000"], *keys.agent_options("oss0"))
    try:
        mds.wait(lambda s: s["osses"]["fresh"] == ["oss0"], what="the real agent")
        hwm_before = vm(mds.proc.pid, "VmHWM")
        # an authorised key (oss1) sends five 200 MB frames: libzmq drops the connection at each frame's header
        sender = subprocess.run([sys.executable, "-c", SENDER, mds.endpoint,
                                 str(keys.root / "agents" / "oss1.key_secret"), str(keys.root / "mds.key")],
                                capture_output=True, text=True, timeout=300)
        assert sender.returncode == 0, sender.stderr
        assert sender.stdout.strip() == "5", sender.stdout  # each frame ended its connection
        grown_kb = vm(mds.proc.pid, "VmHWM") - hwm_before
        print(f"MDS peak RSS {hwm_before} KiB before, grown by {grown_kb} KiB after five 200 MB frames")
        assert grown_kb < 100 * 1024, f"the MDS's peak RSS grew by {grown_kb} KiB"
        before = accepted(mds)
        status = mds.wait(lambda s: s["messages"]["accepted"] >= before + 2, what="the real agent still heard")
        assert status["osses"]["fresh"] == ["oss0"]
    finally:
        stop(agent)
        mds.stop()


def test_ost_claims_by_file_system_and_index_and_failover(tmp_path, mds_factory):
    keys = Keys(tmp_path / "keys", ["oss0", "oss1"])
    db = fresh_db("sqlite", tmp_path, "claims")
    mds = mds_factory(db, *keys.mds_options(), "--fsname", "fs").start()
    first = start_agent(tmp_path, "oss0", mds.endpoint, ["fs-OST0000", "fs-OST0001"], *keys.agent_options("oss0"))
    second = None
    try:
        mds.wait(lambda s: s["osses"]["fresh"] == ["oss0"] and s["osts"] == 2, what="oss0 and its OSTs")
        # oss1 claims OST 1 (held by fresh oss0), its own OST 2, and OST 3 of another file system
        second = start_agent(tmp_path, "oss1", mds.endpoint, ["fs-OST0001", "fs-OST0002", "other-OST0003"],
                             *keys.agent_options("oss1"))
        status = mds.wait(lambda s: s["messages"]["osts_refused"]["conflict"] >= 2
                          and s["messages"]["osts_refused"]["other_fs"] >= 2, what="the conflicting claims refused")
        assert status["osts"] == 3 and status["fsname"] == "fs"
        log = mds.log.read_text()
        assert "refusing OST 1 of OSS oss1 (conflict): OST 1 (fs-OST0001) is held by OSS oss0, which is fresh" in log
        assert "refusing OST 3 of OSS oss1 (other_fs): other-OST0003 is of file system other, this MDS serves fs" \
            in log
        deadline = time.monotonic() + 15
        while holders(db) != {0: "oss0", 1: "oss0", 2: "oss1"}:
            assert time.monotonic() < deadline, holders(db)
            time.sleep(0.25)

        # oss0 fails: once it is stale, its partner takes OST 1 over (Lustre's failover), and says so
        stop(first)
        # stale 3 intervals + the 10 s margin after its last report (iez.freshness): give it well past that
        mds.wait(lambda s: "oss0" in s["osses"]["stale"], timeout=45, what="oss0 stale")
        deadline = time.monotonic() + 20
        while holders(db).get(1) != "oss1":
            assert time.monotonic() < deadline, holders(db)
            time.sleep(0.25)
        assert "OST 1 (fs-OST0001) moves from OSS oss0 (stale) to OSS oss1: failover" in mds.log.read_text()
        # and oss0, back, cannot take it back while oss1 is fresh
        first = start_agent(tmp_path, "oss0", mds.endpoint, ["fs-OST0000", "fs-OST0001"],
                            *keys.agent_options("oss0"))
        mds.wait(lambda s: s["osses"]["fresh"] == ["oss0", "oss1"], what="oss0 back")
        time.sleep(2)
        assert holders(db) == {0: "oss0", 1: "oss1", 2: "oss1"}
    finally:
        stop(first)
        if second is not None:
            stop(second)


def test_a_new_key_in_the_directory_is_an_oss_without_a_restart(tmp_path, mds_factory):
    keys = Keys(tmp_path / "keys", ["oss0"])
    db = fresh_db("sqlite", tmp_path, "newkey")
    mds = mds_factory(db, *keys.mds_options()).start()
    keys.add("oss7")
    agent = start_agent(tmp_path, "oss7", mds.endpoint, ["fs-OST0007"], *keys.agent_options("oss7"))
    try:
        mds.wait(lambda s: s["osses"]["fresh"] == ["oss7"], what="the new OSS")
    finally:
        stop(agent)


def test_a_refused_agent_is_heard_once_its_key_is_added(tmp_path, mds_factory):
    """libzmq gives up after a refused handshake; the agent connects again every 30 s by itself."""
    keys = Keys(tmp_path / "keys", ["oss0"])
    db = fresh_db("sqlite", tmp_path, "latekey")
    mds = mds_factory(db, *keys.mds_options()).start()
    public, _ = create_keypair(keys.root / "agents", "oss5")  # not yet in the authorised directory
    agent = start_agent(tmp_path, "oss5", mds.endpoint, ["fs-OST0005"], *keys.agent_options("oss5"))
    try:
        mds.wait(lambda s: s["messages"]["handshakes_refused"] == 1, what="the unknown key refused")
        (keys.authorized / "oss5.key").write_bytes(public.read_bytes())  # the administrator adds it
        mds.wait(lambda s: s["osses"]["fresh"] == ["oss5"], timeout=60, what="the agent heard without a restart")
        assert agent.poll() is None
    finally:
        stop(agent)
    assert "trying again every 30 s" in (tmp_path / "agent-oss5.log").read_text()


@pytest.mark.parametrize("bad, message", [
    ("--curve-authorized", "no such directory"),
    ("--curve-secret-key", "not a zmq certificate file"),
])
def test_bad_key_options_are_one_line(tmp_path, bad, message):
    keys = Keys(tmp_path / "keys", ["oss0"])
    options = keys.mds_options()
    options[options.index(bad) + 1] = str(tmp_path / "missing")
    db = fresh_db("sqlite", tmp_path, "badkeys")
    done = subprocess.run([sys.executable, "-m", "iez.cli", "mds", "--db", db, "--bind",
                           f"tcp://127.0.0.1:{free_port()}", *options], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_an_ost_its_holder_no_longer_reports_moves_without_waiting_for_staleness(tmp_path, caplog):
    from iez.mds.service import MdsConfig, MdsService

    db = fresh_db("sqlite", tmp_path, "planned")
    svc = MdsService(make_engine(database_url(db)), MdsConfig(insecure=True))
    try:
        def frame(oss: str, seq: int, osts: list[int]) -> list[bytes]:
            message = stats(oss, seq, 0, count=0)
            message["osts"] = [stats(oss, seq, i, count=1)["osts"][0] for i in osts]
            return [json.dumps(message).encode()]

        assert svc.receive(frame("oss0", 1, [0, 1]))
        assert svc.receive(frame("oss1", 1, [1, 2]))
        assert svc.view.osts[1].oss_id == "oss0" and svc.counters.ost_dropped["conflict"] == 1
        assert svc.receive(frame("oss0", 2, [0]))  # oss0, fresh, hands OST 1 over (a planned failover)
        assert svc.receive(frame("oss1", 2, [1, 2]))
        assert svc.view.osts[1].oss_id == "oss1" and svc.counters.ost_dropped["conflict"] == 1
        assert "OST 1 (fs-OST0001) moves from OSS oss0 (no longer reports it) to OSS oss1: failover" in caplog.text
        from prometheus_client import generate_latest

        from iez.mds.metrics import MdsMetrics

        scraped = generate_latest(MdsMetrics(svc).registry).decode()
        assert 'iez_mds_ost_reports_dropped_total{cause="conflict"} 1.0' in scraped
        assert "iez_mds_handshakes_refused_total 0.0" in scraped
    finally:
        svc._stop_writer()
        svc.engine.dispose()


def test_cluster_emulate_makes_keys_once_and_insecure_makes_none(tmp_path):
    root = tmp_path / "cluster"
    argv = [sys.executable, "-m", "iez.cli", "cluster", "emulate", "--oss", "2", "--osts-per-oss", "1",
            "--ost-size", "1G", "--root", str(root), "--no-agents"]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    keys = root / "keys"
    assert f"CURVE keys: iez mds --curve-secret-key {keys / 'mds.key_secret'} --curve-authorized " \
           f"{keys / 'authorized'}" in first.stdout
    assert sorted(p.name for p in (keys / "authorized").iterdir()) == ["oss0.key", "oss1.key"]
    assert (keys / "mds.key_secret").stat().st_mode & 0o077 == 0
    assert (keys / "agents" / "oss1.key_secret").stat().st_mode & 0o077 == 0
    before = {p: p.read_bytes() for p in keys.rglob("*") if p.is_file()}
    again = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert {p: p.read_bytes() for p in keys.rglob("*") if p.is_file()} == before  # kept: a running MDS keeps them
    plain = tmp_path / "plain"
    done = subprocess.run(argv[:-3] + ["--root", str(plain), "--no-agents", "--insecure"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not (plain / "keys").exists() and "CURVE keys" not in done.stdout


def test_the_service_itself_refuses_to_listen_without_keys(tmp_path):
    from iez.mds.service import IngestConfigError, MdsConfig, MdsService

    db = fresh_db("sqlite", tmp_path, "service")
    svc = MdsService(make_engine(database_url(db)), MdsConfig(bind=f"tcp://127.0.0.1:{free_port()}"))
    with pytest.raises(IngestConfigError, match="--insecure"):
        svc.run(install_signals=False)
    assert svc.endpoint is None  # nothing was bound
    assert not svc._writer_thread.is_alive()
    svc.engine.dispose()
