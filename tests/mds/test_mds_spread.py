"""Issue 30 item 6: applications allocated seconds apart spread over the OSTs.

The tester allocated 3 applications of 8 stripes each, seconds apart, on a 15-OST file system: all three
landed on the same 8 OSTs and 7 stayed unused (12 % slower in the model had they run together), because
the other applications' unexpired reservations did not count as expected load. A real ``iez mds`` with
three OSSs reporting places three such applications one after another here; by default the later ones
must avoid the OSTs the earlier ones hold (``PlacementSettings.fair_share``, on by default), and
``--ignore-reservations`` keeps the old behaviour.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from conftest import fresh_db
from iez.config import database_url
from iez.db.engine import make_engine, read
from iez.db.models import AllocationRow, WriteRequestRow
from mds_helpers import Publisher, mds_factory, stats  # noqa: F401 (mds_factory is a fixture)
from test_mds_service import add_requests, connect

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _osts_of(db: str) -> dict[str, set[int]]:
    from iez.db.models import Application

    engine = make_engine(database_url(db))
    try:
        rows = read(engine, lambda c: c.execute(
            select(Application.name, AllocationRow.osts)
            .join(WriteRequestRow, WriteRequestRow.id == AllocationRow.request_id)
            .join(Application, Application.id == WriteRequestRow.app_id)).all())
    finally:
        engine.dispose()
    used: dict[str, set[int]] = {}
    for name, osts in rows:
        used.setdefault(name, set()).update(int(i) for i in osts.replace(",", " ").split())
    return used


def _big(message: dict) -> dict:
    """OSTs of 100 TiB, 60..74 % free (as a real file system's differ): a few GiB reserved change no OST's
    fill enough to steer placement."""
    for ost in message["osts"]:
        ost["kbytes_total"], ost["kbytes_avail"] = 100 * 1024 ** 3, (60 + ost["index"]) * 1024 ** 3
    return message


def _place_three(tmp_path, mds_factory, name: str, *extra: str) -> dict[str, set[int]]:
    db = fresh_db("sqlite", tmp_path, name)
    mds = mds_factory(db, *extra, name=name)
    mds.start()
    pub = Publisher(mds.endpoint)
    stop = threading.Event()

    def agents():  # three OSSs of 5 OSTs, each reporting every 0.3 s, for the whole test
        seq = 1000
        while not stop.is_set():
            seq += 1
            for k in range(3):
                pub.send(_big(stats(f"oss{k}", seq, 5 * k)))
            stop.wait(0.3)

    reporter = threading.Thread(target=agents, daemon=True)
    try:
        connect(mds, pub, oss="oss0", first_ost=0)
        reporter.start()
        mds.wait(lambda s: len(s["osses"]["fresh"]) == 3 and s["osts"] == 15, what="15 OSTs of 3 fresh OSSs",
                 timeout=60)
        for k, app in enumerate(("app1", "app2", "app3")):
            add_requests(db, app, 4)  # 4 files of 2 stripes: 8 OSTs each
            mds.wait(lambda s, n=4 * (k + 1): s["allocation"]["files"] == n, what=f"{app} allocated", timeout=90)
    finally:
        stop.set()
        if reporter.is_alive():
            reporter.join(timeout=10)
        pub.close()
        mds.stop()
    return _osts_of(db)


def test_applications_allocated_seconds_apart_spread_over_the_osts(tmp_path, mds_factory):
    used = _place_three(tmp_path, mds_factory, "spread")
    assert all(len(osts) == 8 for osts in used.values()), used
    # the second application avoids the first one's 8 OSTs where it can: 7 are free, so at most 1 is shared
    assert len(used["app1"] & used["app2"]) <= 1, used
    assert len(set().union(*used.values())) == 15, f"OSTs left unused: {used}"


def test_ignore_reservations_keeps_the_old_placement(tmp_path, mds_factory):
    used = _place_three(tmp_path, mds_factory, "packed", "--ignore-reservations")
    assert all(len(osts) == 8 for osts in used.values()), used
    # without the reservations as load, nothing tells app2 that app1 will write there
    assert len(set().union(*used.values())) < 15, used
