"""``iez mds`` as a real process on loopback: statistics in, allocations out, bad input counted."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
from sqlalchemy import func, select

from conftest import BACKENDS, fresh_db
from iez.config import database_url
from iez.db.allocations import lookup
from iez.db.engine import make_engine, read, write_session
from iez.db.models import AllocationRow, OstRow, OstStat
from iez.db.requests import RequestIn, upsert_requests
from mds_helpers import Publisher, mds_factory, stats  # noqa: F401 (mds_factory is a fixture)

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def connect(mds, pub: Publisher, oss: str = "probe", first_ost: int = 900) -> int:
    """Send until the MDS has one message from ``oss`` (PUB drops what it sends before the subscription lands)."""
    seq = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        seq += 1
        pub.send(stats(oss, seq, first_ost, count=1))
        time.sleep(0.1)
        if oss in mds.status()["osses"]["fresh"] + mds.status()["osses"]["stale"]:
            return seq
    raise AssertionError("the MDS never received the probe")


def add_requests(db: str, app: str, n: int, size: int = 2**30, count: int = 2) -> None:
    engine = make_engine(database_url(db))
    with write_session(engine) as s:
        upsert_requests(s, app, [RequestIn(f"/lustre/{app}/out.{i}", size, count, rank=i) for i in range(n)])
    engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_statistics_arrive_and_allocations_follow(backend, tmp_path, mds_factory):
    db = fresh_db(backend, tmp_path, "mdsflow")
    mds = mds_factory(db, "--series-interval", "0").start()  # every message into the time series
    pub = Publisher(mds.endpoint)
    stop, reporter = threading.Event(), None
    try:
        connect(mds, pub, oss="oss0", first_ost=0)

        def agents():  # three OSS reporting every 0.3 s, as agents do, for the whole test
            seq = 100
            while not stop.is_set():
                for k in range(3):
                    pub.send(stats(f"oss{k}", seq, 5 * k))
                seq += 1
                stop.wait(0.3)

        reporter = threading.Thread(target=agents, daemon=True)
        reporter.start()
        mds.wait(lambda s: sorted(s["osses"]["fresh"]) == ["oss0", "oss1", "oss2"] and s["osts"] == 15, what="3 OSS")
        engine = make_engine(database_url(db))
        mds.wait(lambda s: s["messages"]["stored"] >= 10, what="stored")
        assert read(engine, lambda c: c.scalar(select(func.count()).select_from(OstRow))) == 15
        assert read(engine, lambda c: c.scalar(select(func.count()).select_from(OstStat))) >= 46
        add_requests(db, "ior", 15)
        status = mds.wait(lambda s: s["allocation"]["files"] == 15, what="allocation")
        assert status["allocation"]["failed"] == 0
        placed = [read(engine, lambda c, i=i: lookup(c, f"/lustre/ior/out.{i}")) for i in range(15)]
        counts: dict[int, int] = {}
        for layout in placed:
            assert layout["stripe_count"] == 2 and len(set(layout["osts"])) == 2
            for ost in layout["osts"]:
                counts[ost] = counts.get(ost, 0) + 1
        assert set(counts) == set(range(15)) and set(counts.values()) == {2}  # 30 stripes, 2 per OST
        engine.dispose()
    finally:
        stop.set()
        if reporter:
            reporter.join()
        pub.close()
    assert mds.stop() == 0


def test_ten_thousand_bad_messages_leave_the_service_running_with_exact_counters(tmp_path, mds_factory):
    db = fresh_db("sqlite", tmp_path, "mdsfuzz")
    oss_list = tmp_path / "oss.list"
    oss_list.write_text("# known servers\nprobe\noss0\n")
    mds = mds_factory(db, "--oss-list", str(oss_list)).start()
    pub = Publisher(mds.endpoint)
    rng = random.Random(7)
    sent = {"malformed": 0, "version": 0, "invalid": 0, "unknown_oss": 0, "replayed": 0}
    good = 0
    try:
        seq = connect(mds, pub)
        time.sleep(1.5)  # the status file is rewritten every second: let it count every probe
        base = mds.status()["messages"]["accepted"]
        for n in range(10_000):
            kind = rng.choice(list(sent) + ["good"])
            if kind == "malformed":
                payload = rng.choice([bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64))), b"[]", b"null",
                                      b'{"oss_id": "x"', b"\x00" * 10])
                if payload.startswith((b"{", b"[", b"n")) and payload not in (b"[]", b"null", b'{"oss_id": "x"'):
                    payload = b"\x01" + payload
            elif kind == "version":
                payload = json.dumps({**stats("oss0", 10**9, 0), "version": rng.choice([0, 3, 99, "1"])}).encode()
            elif kind == "invalid":
                bad = rng.choice([{"cpu_pct": -1}, {"mem_pct": 1e9}, {"seq": "x"}, {"osts": "none"},
                                  {"osts": [{"name": "a", "index": -3, "kbytes_total": 1, "kbytes_avail": 0}]},
                                  {"time": "yesterday"}])
                payload = json.dumps({**stats("oss0", 10**9, 0), **bad}).encode()
            elif kind == "unknown_oss":
                payload = json.dumps(stats(f"intruder{n}", 1, 500)).encode()
            elif kind == "replayed":
                # an hour old: messages are ordered by (time, seq), and this one is before the probe's last
                payload = json.dumps({**stats("probe", 1, 900, count=1), "time": time.time() - 3600}).encode()
            else:
                seq += 1
                good += 1
                payload = json.dumps(stats("probe", seq, 900, count=1)).encode()
            if kind != "good":
                sent[kind] += 1
            pub.send(payload)
        expected_total = good + sum(sent.values())
        status = mds.wait(lambda s: s["messages"]["accepted"] + sum(s["messages"]["dropped"].values())
                          >= expected_total + base, timeout=60, what="all messages")
        time.sleep(1.5)
        status = mds.status()
        assert status["messages"]["dropped"] == {**dict.fromkeys(status["messages"]["dropped"], 0), **sent}
        assert status["messages"]["accepted"] == good + base
        assert mds.proc.poll() is None
        log = mds.log.read_text()
        for cause in sent:
            assert log.count(f"dropping message ({cause}") == 1  # logged once per cause, then counted
    finally:
        pub.close()


def test_mds_restart_loses_nothing(tmp_path, mds_factory):
    db = fresh_db("sqlite", tmp_path, "mdsrestart")
    mds = mds_factory(db, "--interval", "60").start()
    pub = Publisher(mds.endpoint)
    try:
        connect(mds, pub, oss="oss0", first_ost=0)
        pub.send({**stats("oss0", 50, 0, interval=60.0)})
        pub.send({**stats("oss1", 50, 5, interval=60.0)})
        mds.wait(lambda s: s["osts"] == 10, what="stats")
        add_requests(db, "first", 4)
        # allocating stores the reports received so far first: no need to wait for the 5 s batch
        status = mds.wait(lambda s: s["allocation"]["files"] == 4, what="first allocation")
        assert status["messages"]["stored"] >= 3
    finally:
        pub.close()
    assert mds.stop() == 0
    assert "stopped:" in mds.log.read_text()
    engine = make_engine(database_url(db))
    before = read(engine, lambda c: c.execute(select(AllocationRow.path, AllocationRow.osts)).all())
    # while it is down, another job's requests arrive; the restarted MDS knows the OSTs from the DB alone
    add_requests(db, "second", 3)
    again = mds_factory(db, "--interval", "60", name="mds2").start()
    status = again.wait(lambda s: s["allocation"]["files"] == 3, what="allocation after restart")
    assert status["osts"] == 10 and sorted(status["osses"]["fresh"]) == ["oss0", "oss1"]
    after = read(engine, lambda c: c.execute(select(AllocationRow.path, AllocationRow.osts)).all())
    assert set(before) <= set(after) and len(after) == 7
    engine.dispose()


def test_the_allocator_defers_while_the_mds_node_is_busy(tmp_path, mds_factory):
    db = fresh_db("sqlite", tmp_path, "mdsbusy")
    # any CPU use is too much; the gate's bound (--defer-max) far away: tests/mds/test_mds_gate.py tests it
    mds = mds_factory(db, "--cpu-max", "0", "--defer-max", "3600").start()
    pub = Publisher(mds.endpoint)
    try:
        connect(mds, pub, oss="oss0", first_ost=0)
        add_requests(db, "ior", 2)
        status = mds.wait(lambda s: s["allocation"]["deferred"] >= 2, what="deferrals")
        assert status["allocation"]["files"] == 0
        assert "deferring allocation of 1 application(s) for at most 3600 s (--defer-max): MDS cpu" in \
            mds.log.read_text()
        assert status["gate"]["state"] == "deferring"
    finally:
        pub.close()


def test_curve_admits_authorised_agents_only(tmp_path, mds_factory):
    zmq_auth = pytest.importorskip("zmq.auth")
    keys = tmp_path / "keys"
    authorized = tmp_path / "authorized"
    keys.mkdir()
    authorized.mkdir()
    server_public, server_secret = zmq_auth.create_certificates(str(keys), "mds")
    good_public, good_secret = zmq_auth.create_certificates(str(keys), "agent-good")
    zmq_auth.create_certificates(str(keys), "agent-bad")
    (authorized / "agent-good.key").write_bytes((keys / "agent-good.key").read_bytes())
    db = fresh_db("sqlite", tmp_path, "mdscurve")
    mds = mds_factory(db, "--curve-secret-key", server_secret, "--curve-authorized", str(authorized)).start()
    srv_pub, _ = zmq_auth.load_certificate(server_public)
    gp, gs = zmq_auth.load_certificate(good_secret)
    bp, bs = zmq_auth.load_certificate(str(keys / "agent-bad.key_secret"))
    good = Publisher(mds.endpoint, curve=(gp, gs, srv_pub))
    bad = Publisher(mds.endpoint, curve=(bp, bs, srv_pub))
    plain = Publisher(mds.endpoint)
    try:
        for seq in range(1, 30):
            bad.send(stats("intruder", seq, 100, count=1))
            plain.send(stats("plaintext", seq, 200, count=1))
            good.send(stats("agent-good", seq, 0, count=1))  # the name of its key
            time.sleep(0.05)
        status = mds.wait(lambda s: "agent-good" in s["osses"]["fresh"], what="trusted agent")
        time.sleep(0.5)
        status = mds.status()
        assert status["osses"]["fresh"] + status["osses"]["stale"] == ["agent-good"]
        assert status["messages"]["accepted"] > 0
    finally:
        for p in (good, bad, plain):
            p.close()
