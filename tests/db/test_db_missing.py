"""Reading never creates: every command but ``iez db upgrade`` and ``iez alloc add`` refuses a missing database.

A mistyped ``--db`` (or ``IEZ_DB``, or ``IEZ_STATE_DIR``) used to create the
directories and an empty SQLite file on first use. Now a command that reads,
serves or adds to an existing database says in one line that there is no
interaction DB and which ``iez db upgrade`` command creates it, exits non-zero,
and leaves the disk (and the MariaDB server) as it found them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import text

from conftest import free_port, mysql_admin, mysql_url, run_iez
from iez.cli import main
from iez.config import database_url
from iez.db import DatabaseMissing, open_db
from iez.db.engine import DatabaseUnavailable, make_engine, read
from iez.db.lookup import LayoutReader
from iez.db.schema import head_revision, upgrade

DARSHAN_LOG = Path(__file__).resolve().parents[1] / "data" / "darshan" / "ior-posix-16ranks.darshan"
COUNTS = ("app,job,host,pid,rank,hits,misses,errors,started,ended\n"
          "app,j1,n1,1,0,3,1,0,1700000000.000000,1700000005.000000\n")


def commands(db: str, work: Path) -> dict[str, list[str]]:
    """Every command that only reads, serves, or writes into an existing database, on ``db``."""
    traces = work / "traces"
    return {
        "db current": ["db", "current", "--db", db],
        "db downgrade": ["db", "downgrade", "base", "--db", db],
        "alloc show": ["alloc", "show", "--db", db, "--file", "/lustre/x"],
        "learn --status": ["learn", "app", "--status", "--db", db],
        "learn --retrace": ["learn", "app", "--retrace", "--db", db],
        "learn --trace": ["learn", "app", "--trace", str(traces), "--db", db],
        "mds": ["mds", "--db", db, "--bind", f"tcp://127.0.0.1:{free_port()}", "--insecure"],
        "api": ["api", "--db", db, "--port", str(free_port())],
        "trace parse --store": ["trace", "parse", str(traces), "--store", "--app", "app", "--db", db],
        "trace import-darshan --store": ["trace", "import-darshan", str(DARSHAN_LOG), "--store", "--app", "app",
                                         "--db", db],
        "run": ["run", "app", "--preload", str(work / "libiez.so"), "--db", db, "--", "true"],
    }


COMMANDS = list(commands("x", Path("/")))


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def work(tmp_path: Path, monkeypatch) -> Path:
    """A directory with the inputs the commands need (traces, a stand-in preload library) and a state dir."""
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "iez-counts.n1.1.csv").write_text(COUNTS)
    (tmp_path / "libiez.so").write_bytes(b"")
    (tmp_path / "state").mkdir()
    monkeypatch.setenv("IEZ_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("IEZ_DB", raising=False)
    return tmp_path


def run_in_process(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("where", ["file", "directory"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_sqlite_database_is_refused_naming_the_upgrade_and_nothing_is_created(command, where, work,
                                                                                         capsys):
    db = work / "iez.db" if where == "file" else work / "no" / "such" / "iez.db"
    before = tree(work)
    code, err = run_in_process(commands(str(db), work)[command], capsys)
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"no interaction DB at {db}" in lines[0], err
    assert f"run `iez db upgrade --db '{db}'` to create it" in lines[0], err
    if where == "directory":
        assert f"(no directory {db.parent})" in lines[0], err
    assert tree(work) == before  # no file, no directory, no WAL, no re-trace marker, no trace directory


def test_the_default_database_in_a_missing_state_dir_is_not_created(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("IEZ_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("IEZ_DB", raising=False)
    for argv in (["db", "current"], ["alloc", "show", "--file", "/x"], ["learn", "app", "--status"]):
        code, err = run_in_process(argv, capsys)
        assert code == 1 and f"iez db upgrade --db '{tmp_path / 'state' / 'iez.db'}'" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_real_command_line_exits_1_with_one_line_and_creates_nothing(tmp_path):
    db = tmp_path / "typo" / "iez.db"
    done = run_iez("db", "current", "--db", str(db))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == (f"iez db: error: no interaction DB at {db} (no directory {db.parent}): "
                                   f"run `iez db upgrade --db '{db}'` to create it")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["db current", "alloc show", "learn --status", "api", "mds",
                                     "trace parse --store"])
def test_a_missing_mariadb_database_is_refused_and_not_created(command, work, capsys):
    db = mysql_url("_absent")
    name = database_url(db).database
    mysql_admin(f"DROP DATABASE IF EXISTS `{name}`")
    code, err = run_in_process(commands(db, work)[command], capsys)
    assert code != 0
    assert f"interaction DB {db} does not exist: run `iez db upgrade --db {db}` to create it" in err, err
    assert mysql_admin(f"SHOW DATABASES LIKE '{name}'") == []


@pytest.mark.slow
def test_only_upgrade_and_alloc_add_create_a_database_with_its_directories(tmp_path, capsys):
    up = tmp_path / "a" / "b" / "iez.db"
    assert main(["db", "upgrade", "--db", str(up)]) == 0
    assert main(["db", "current", "--db", str(up)]) == 0
    added = tmp_path / "c" / "iez.db"
    assert main(["alloc", "add", "--db", str(added), "--file", "/l/f", "--stripe-size", "65536", "--osts", "0"]) == 0
    assert main(["alloc", "show", "--db", str(added), "--file", "/l/f"]) == 0
    assert capsys.readouterr().err == ""


def test_engines_and_the_lookup_path_never_create_a_sqlite_file(tmp_path):
    path = tmp_path / "d" / "iez.db"
    engine = make_engine(database_url(str(path)))
    with pytest.raises(DatabaseMissing, match=r"no directory"):
        read(engine, lambda conn: conn.execute(text("SELECT 1")).scalar())
    assert isinstance(DatabaseMissing("x"), DatabaseUnavailable)  # services treat it as unavailable
    with pytest.raises(DatabaseMissing):
        LayoutReader(engine).one("/x")
    assert not path.parent.exists()
    upgrade(engine)  # creates the directory and the file: ensure_database, then the schema
    assert path.is_file()
    assert LayoutReader(engine).one("/x") is None
    path.unlink()
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    engine.dispose()  # pooled connections still hold the removed file open
    with pytest.raises(DatabaseMissing, match=r"no such file"):
        read(engine, lambda conn: conn.execute(text("SELECT 1")).scalar())
    assert not path.exists()
    engine.dispose()


def test_open_db_creates_only_when_asked(tmp_path):
    from iez.config import Settings

    settings = Settings.from_env(db=str(tmp_path / "n" / "iez.db"), env={})
    with pytest.raises(DatabaseMissing):
        open_db(settings)
    assert not (tmp_path / "n").exists()
    engine = open_db(settings, create_if_empty=True)
    with sqlite3.connect(tmp_path / "n" / "iez.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone()[0] == head_revision()
    engine.dispose()
