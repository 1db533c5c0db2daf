"""Issue 30 item 2: one freshness truth, and refusals that name staleness as their cause.

With agents reporting every second, the tester saw ``iez status`` and ``GET /v1/oss`` flip OSSs to stale
while the MDS said fresh (they read the DB, where the MDS stores reports in batches up to 5 s apart), and
``POST /v1/allocate`` answer 409 "no OST of the file system takes new stripes" when the cause was
staleness. Here a real ``iez mds`` gets a report every second from each of two OSSs while ``iez status
--json`` and the real API are asked again and again: no OSS is ever stale. Then the reports stop; once the
OSSs are stale, ``POST /v1/allocate`` answers 503 naming them and how long they have been silent.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mds"))

from conftest import Server, fresh_db, iez_cli  # noqa: E402
from mds_helpers import Mds, Publisher, stats  # noqa: E402
from waiting import scaled  # noqa: E402

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]


def test_db_readers_agree_with_the_mds_and_allocate_names_staleness(tmp_path):
    from test_mds_service import add_requests, connect

    db = fresh_db("sqlite", tmp_path, "flap")
    mds = Mds(db, tmp_path)
    pub = None
    server = None
    stop = threading.Event()

    def agents():  # two OSSs reporting every second (interval 1 s in their messages), as iez-agent --interval 1
        seq = 1000
        while not stop.is_set():
            seq += 1
            for k in range(2):
                pub.send(stats(f"oss{k}", seq, 4 * k, count=4, interval=1.0))
            stop.wait(1.0)

    reporter = threading.Thread(target=agents, daemon=True)
    try:
        mds.start()
        pub = Publisher(mds.endpoint)
        connect(mds, pub, oss="oss0", first_ost=0)
        reporter.start()
        mds.wait(lambda s: sorted(s["osses"]["fresh"]) == ["oss0", "oss1"], what="both OSSs fresh", timeout=60)
        mds.wait(lambda s: s["messages"]["stored"] >= 4, what="reports stored", timeout=60)
        server = Server(db)
        stale_seen = []
        with server.client() as client:
            deadline = time.monotonic() + 15  # more than 2 batches of the MDS's writes
            rounds = 0
            while time.monotonic() < deadline or rounds < 5:
                rounds += 1
                status = json.loads(iez_cli("status", "--db", db, "--json").stdout)
                stale_seen += [("iez status", o["id"], o["age_s"]) for o in status["oss"] if not o["fresh"]]
                rows = client.get("/v1/oss").json()["oss"]
                stale_seen += [("GET /v1/oss", o["oss_id"], o.get("age_s")) for o in rows if o["stale"]]
                time.sleep(0.3)
            assert mds.status()["osses"]["stale"] == []
            assert not stale_seen, f"flapped to stale while the MDS said fresh: {stale_seen}"

            # the agents stop: once their OSSs are stale, an allocation names that as the cause
            stop.set()
            reporter.join(timeout=10)
            mds.wait(lambda s: sorted(s["osses"]["stale"]) == ["oss0", "oss1"], what="both OSSs stale", timeout=90)
            add_requests(db, "late", 2)
            deadline = time.monotonic() + scaled(60)
            while True:  # the API reads the DB: its view of staleness follows the same rule
                reply = client.post("/v1/allocate", json={"app": "late"})
                if reply.status_code == 503 or time.monotonic() > deadline:
                    break
                time.sleep(1)
        assert reply.status_code == 503, reply.text
        detail = reply.json()["detail"]
        assert "OSS oss0: no report for" in detail and "OSS oss1: no report for" in detail, detail
        assert "(stale after 13 s)" in detail, detail  # 3 intervals of 1 s + the 10 s margin
    finally:
        stop.set()
        if reporter.is_alive():
            reporter.join(timeout=10)
        if pub is not None:
            pub.close()
        if server is not None:
            server.stop()
        mds.stop()
