"""How libiez reaches the interaction DB: the IEZ_DB forms iez itself accepts, lost
MariaDB connections, and lookups that must match the path exactly."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sqlalchemy import create_engine, text

from conftest import BACKENDS, MIB, clean_env, counts_rows, fresh_db, layouts_below, mysql_url, pin_layouts, reset_dir

from iez.config import database_url

pytestmark = pytest.mark.slow


def _mysql_parts() -> tuple[str, str]:
    """(user@host:port, database) of the test MariaDB, from IEZ_TEST_MYSQL_URL."""
    url = database_url(mysql_url())
    auth = url.username + (f":{url.password}" if url.password else "")
    return f"{auth}@{url.host}:{url.port or 3306}", url.database


# Every IEZ_DB form the iez command line accepts (iez/config.py database_url) must name the same
# database for libiez, given the same working directory.
def _db_forms():
    where, name = _mysql_parts()
    return {
        "relative-path": lambda tmp: "forms.db",
        "absolute-path": lambda tmp: str(tmp / "forms.db"),
        "sqlite-absolute-url": lambda tmp: f"sqlite:///{tmp / 'forms.db'}",
        "sqlite-relative-url": lambda tmp: "sqlite:///forms.db",
        "mysql-url": lambda tmp: f"mysql://{where}/{name}_forms",
        "mariadb-url": lambda tmp: f"mariadb://{where}/{name}_forms",
        "mysql+mysqldb-url": lambda tmp: f"mysql+mysqldb://{where}/{name}_forms",
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("form", sorted(_db_forms()))
def test_every_iez_db_form_reaches_the_same_db(form, runner, state_dir, tmp_path, monkeypatch):
    db = _db_forms()[form](tmp_path)
    # an empty database at the current schema behind each form: tmp_path/forms.db or <test db>_forms
    fresh_db("mariadb" if "://" in db and not db.startswith("sqlite") else "sqlite", tmp_path, "forms")
    work = reset_dir(tmp_path / "work")
    # iez's own reading of IEZ_DB (iez.config.database_url), from the directory the application starts in
    monkeypatch.chdir(tmp_path)
    expected = pin_layouts(db, {work / "a.dat": (MIB, [2, 4])})
    monkeypatch.undo()
    # the application changes directory before its first create: IEZ_DB is relative to where it started
    script = "import os, sys\nos.chdir(sys.argv[1])\nopen('a.dat', 'w').write('a')\nopen('b.dat', 'w')\n"
    done = runner.iez([sys.executable, "-B", "-c", script, work], db, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, b"")
    assert layouts_below(work) == expected
    assert [(r["hits"], r["misses"], r["errors"]) for r in counts_rows(state_dir)] == [("1", "1", "0")]


@pytest.mark.timeout(120)
def test_mariadb_connection_killed_between_creates(runner, state_dir, tmp_path):
    """The server drops libiez's connection (restart, wait_timeout): the next lookup reconnects."""
    db = fresh_db("mariadb", tmp_path, "reconnect")
    work = reset_dir(tmp_path / "work")
    expected = pin_layouts(db, {work / "one": (MIB, [1]), work / "two": (MIB, [2])})
    script = ("import sys\n"
              "open(sys.argv[1] + '/one', 'w')\n"
              "print('ready', flush=True)\n"
              "sys.stdin.readline()\n"
              "open(sys.argv[1] + '/two', 'w')\n")
    proc = subprocess.Popen([sys.executable, "-B", "-c", script, str(work)], env=clean_env(runner.env(db)),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        admin = create_engine(database_url(db))
        with admin.connect() as conn:
            name = database_url(db).database
            mine = conn.execute(text("SELECT CONNECTION_ID()")).scalar()
            ids = conn.execute(text("SELECT id FROM information_schema.processlist WHERE db = :db AND id <> :me"),
                               {"db": name, "me": mine}).scalars().all()
            assert ids, "libiez holds no connection to the DB"
            for cid in ids:
                conn.execute(text(f"KILL CONNECTION {int(cid)}"))
        admin.dispose()
        out, err = proc.communicate(b"go\n", timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, err) == (0, b"")
    assert layouts_below(work) == expected
    assert [(r["hits"], r["errors"]) for r in counts_rows(state_dir)] == [("2", "0")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_only_the_exact_path_gets_the_layout(backend, shared_db, runner, tmp_path):
    """Names that differ in case, trailing spaces or Unicode form are other files."""
    db = shared_db(backend)
    work = tmp_path / "work"
    pinned = ["Case.dat", "space", "caf\u00e9.dat", "tab\there"]
    expected = pin_layouts(db, {work / n: (MIB, [i + 1]) for i, n in enumerate(pinned)})
    others = ["case.dat", "CASE.DAT", "space ", "space  ", " space", "cafe\u0301.dat", "tab here"]
    result = runner.compare(["touch", *(work / n for n in pinned + others)], db, work)
    result.assert_same()
    assert layouts_below(work) == expected
