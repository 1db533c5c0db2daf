"""Refused writers are run again, a bounded number of times (issue 25, item 1), on the real MariaDB server.

A writer refused so that it may be run again (1205 here: the lock row held by another transaction past the
lock wait time-out, made 1 s for the test) is retried whole by :func:`iez.db.engine.write_transaction` and
succeeds once the lock is free; one refused on every attempt is reported unavailable (the API's 503) after
the bound, naming it. The lock row is written by every writer (what Galera certifies).
"""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from conftest import fresh_db
from iez.config import database_url
from iez.db import engine as db_engine
from iez.db.engine import DatabaseUnavailable, WriteConflict, make_engine, write_session, write_transaction

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture
def impatient(tmp_path):
    """An engine on a fresh MariaDB database whose lock waits give up after 1 s, and a second one to block it."""
    db = fresh_db("mariadb", tmp_path, "retry")
    url = database_url(db).update_query_dict({"init_command": "SET SESSION innodb_lock_wait_timeout = 1"})
    engine, other = make_engine(url), make_engine(database_url(db))
    yield engine, other
    engine.dispose()
    other.dispose()


def hold_lock(engine, release: threading.Event, held: threading.Event) -> threading.Thread:
    def hold() -> None:
        with write_session(engine):
            held.set()
            release.wait(60)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert held.wait(10)
    return thread


def test_a_writer_refused_by_a_lock_wait_is_run_again_and_commits(impatient):
    engine, other = impatient
    release, held = threading.Event(), threading.Event()
    blocker = hold_lock(other, release, held)
    before = db_engine.write_retries.value

    def free_on_first_refusal() -> None:  # the blocker commits once the writer has been refused
        deadline = time.monotonic() + 30
        while db_engine.write_retries.value == before and time.monotonic() < deadline:
            time.sleep(0.01)
        release.set()

    watcher = threading.Thread(target=free_on_first_refusal, daemon=True)
    watcher.start()
    runs = []

    def body(session) -> int:
        runs.append(1)
        session.execute(text("UPDATE mds_lease SET pid = pid"))  # any write
        return session.execute(text("SELECT COUNT(*) FROM iez_lock")).scalar_one()

    try:
        assert write_transaction(engine, body) == 1  # committed, not a 503
    finally:
        release.set()
        watcher.join(10)
        blocker.join(10)
    assert db_engine.write_retries.value - before >= 1  # refused (1205) at least once, then run again
    assert runs == [1]  # the refused attempts were refused at the lock, before the body


def test_a_writer_refused_every_time_is_unavailable_after_the_bound(impatient):
    engine, other = impatient
    release, held = threading.Event(), threading.Event()
    blocker = hold_lock(other, release, held)
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable, match="refused 3 times in a row; MariaDB error 1205") as caught:
            write_transaction(engine, lambda s: None, attempts=3)
        took = time.monotonic() - started
        assert not isinstance(caught.value, WriteConflict)
        assert 3.0 <= took < 3 * 1 + 3 * db_engine.RETRY_CAP_S + 5  # three 1 s lock waits and two short backoffs
        with pytest.raises(WriteConflict):  # the one-attempt form says it may be run again
            with write_session(engine):
                pass
    finally:
        release.set()
        blocker.join(10)


def test_the_backoff_is_random_and_bounded():
    waits = [db_engine.retry_delay(k) for k in range(1, 12) for _ in range(200)]
    assert all(0 <= w <= db_engine.RETRY_CAP_S for w in waits)
    assert max(db_engine.retry_delay(1) for _ in range(200)) <= db_engine.RETRY_BASE_S
    assert len({round(w, 6) for w in waits}) > 1000  # jittered, not in step
