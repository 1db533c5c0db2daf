"""Issue 30 item 4: a DB outage is visible to monitoring, and the MDS's log says it once.

The tester stalled MariaDB for 60 s: the MDS's ``/metrics`` stopped answering for the whole stall,
``iez_mds_up`` stayed 1, no metric said the DB was gone, and the log got one ERROR a second. Here a real
``iez mds`` on a real MariaDB database (this test's own) has its tables locked by another connection
(``LOCK TABLES ... WRITE``: every query of the MDS on them waits, as on a stalled server; the shared
server itself is never stopped), while an agent keeps reporting. ``/metrics`` must answer throughout,
with ``iez_mds_db_up 0``; the log must say the outage once and its end once.
"""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
from sqlalchemy import create_engine

from conftest import fresh_db
from iez.config import database_url
from mds_helpers import Publisher, ReportingAgent, free_port, mds_factory  # noqa: F401 (mds_factory is a fixture)
from test_mds_service import connect
from waiting import scaled

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]

#: every table the MDS's control loop and report writer touch (mds_lease left alone: the lease is not the test)
LOCKED = ("write_requests", "allocations", "reservations", "oss", "osts", "oss_stats", "ost_stats",
          "applications", "runs")


def _scrape(port: int) -> tuple[str, float]:
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=scaled(20)) as reply:
        return reply.read().decode(), time.monotonic() - started


def _sample(text: str, name: str) -> float | None:
    match = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    return float(match.group(1)) if match else None


def _wait_metric(port: int, name: str, value: float, what: str, timeout: float = 90) -> str:
    deadline = time.monotonic() + scaled(timeout)
    while True:
        text, _ = _scrape(port)
        if _sample(text, name) == value:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {name} = {_sample(text, name)}")
        time.sleep(0.5)


def test_metrics_answer_and_say_db_down_while_mariadb_stalls(tmp_path, mds_factory, request):
    db = fresh_db("mariadb", tmp_path, "h30stall")
    metrics_port = free_port()
    mds = mds_factory(db, "--metrics-bind", f"127.0.0.1:{metrics_port}").start()
    pub = Publisher(mds.endpoint)
    reporter = ReportingAgent(pub, "oss0")  # one OSS reporting every 0.3 s, for the whole test
    locker = create_engine(database_url(db))
    conn = None

    def release():
        if conn is not None:
            try:
                conn.exec_driver_sql("UNLOCK TABLES")
            finally:
                conn.close()
        locker.dispose()
        reporter.stop()
        pub.close()

    request.addfinalizer(release)
    connect(mds, pub, oss="oss0", first_ost=0)
    reporter.start()
    mds.wait(lambda s: s["messages"]["stored"] > 0, what="reports stored", timeout=60)
    before = _wait_metric(metrics_port, "iez_mds_db_up", 1, "the DB up before the stall")
    assert _sample(before, "iez_mds_db_seconds_since_success") is not None

    conn = locker.connect()
    conn.exec_driver_sql("LOCK TABLES " + ", ".join(f"`{t}` WRITE" for t in LOCKED))
    stalled_at = time.monotonic()
    during = _wait_metric(metrics_port, "iez_mds_db_up", 0, "iez_mds_db_up 0 during the stall")
    assert _sample(during, "iez_mds_up") == 1
    # a few more scrapes during the stall: each answers (urlopen's deadline), the DB's age grows
    ages = []
    for _ in range(3):
        text, _took = _scrape(metrics_port)
        assert _sample(text, "iez_mds_db_up") == 0
        ages.append(_sample(text, "iez_mds_db_seconds_since_success"))
        time.sleep(1)
    assert ages == sorted(ages) and ages[-1] >= 10, ages
    stalled_s = time.monotonic() - stalled_at

    conn.exec_driver_sql("UNLOCK TABLES")
    _wait_metric(metrics_port, "iez_mds_db_up", 1, "iez_mds_db_up 1 after the stall")
    mds.wait(lambda s: s["db"]["up"] and s["db"]["seconds_since_success"] < 30, what="the DB up in the status")
    log = mds.log.read_text()
    assert log.count("the DB is not answering") == 1, log
    assert log.count("the DB answers again") == 1, log
    assert log.count("ERROR") <= 2, f"the log repeats the outage ({stalled_s:.0f} s stall):\n{log}"
