"""MariaDB going away: the API answers 503 in JSON, then recovers by itself with the data intact."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from conftest import Server, fresh_db, mysql_admin
from iez.config import database_url

pytestmark = pytest.mark.slow

USER, PASSWORD = "iez_resilience", "pw-resilience"


def admin(statement: str) -> None:
    mysql_admin(statement)  # on the server, outside any database: the order of the tests does not matter


def kill_sessions_of(user: str) -> None:
    for (pid,) in mysql_admin("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = :u", u=user):
        try:
            mysql_admin(f"KILL CONNECTION {int(pid)}")
        except OperationalError:  # it ended meanwhile
            pass


@pytest.mark.parametrize("backend", ["mariadb"])
def test_api_answers_503_while_mariadb_refuses_and_recovers_without_a_restart(backend, tmp_path):
    db = fresh_db(backend, tmp_path, "down")
    name = database_url(db).database
    admin(f"DROP USER IF EXISTS '{USER}'@'%'")
    admin(f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'")
    admin(f"GRANT ALL ON `{name}`.* TO '{USER}'@'%'")
    url = database_url(db).set(username=USER, password=PASSWORD, query={})
    srv = Server(url.set(drivername="mysql").render_as_string(hide_password=False))
    try:
        with srv.client() as api:
            api.post("/v1/requests", json={"app": "kept", "requests": [
                {"file": "/lustre/kept", "write_bytes": 1, "stripe_count": 1, "rank": 0}]}).raise_for_status()
            # the server drops every connection (as a restart does): the next read reconnects by itself
            kill_sessions_of(USER)
            assert api.get("/v1/apps/kept").status_code == 200

            admin(f"ALTER USER '{USER}'@'%' ACCOUNT LOCK")
            kill_sessions_of(USER)
            for answer in (api.get("/v1/allocations", params={"path": "/lustre/kept"}), api.get("/healthz"),
                           api.post("/v1/requests", json={"app": "kept", "requests": []})):
                assert answer.status_code == 503, answer.text
                assert "is unavailable" in answer.json()["detail"]
            assert api.get("/metrics").status_code == 200  # metrics are still served

            admin(f"ALTER USER '{USER}'@'%' ACCOUNT UNLOCK")
            assert api.get("/healthz").status_code == 200
            assert api.get("/v1/apps/kept").json()["requests"][0]["file"] == "/lustre/kept"
    finally:
        srv.stop()
        admin(f"DROP USER IF EXISTS '{USER}'@'%'")
