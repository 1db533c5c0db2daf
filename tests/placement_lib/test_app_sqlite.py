"""Issue 27, reproduction 1: applications that use SQLite themselves, under every IEZ_DB and IEZ_MAP.

The sqlite3 shell and Python's sqlite3 module write a database of their own in WAL and in
rollback-journal mode, under libiez with IEZ_DB a SQLite file in WAL mode, one in rollback mode,
MariaDB, or a file that does not exist, each with and without a layout map. Every file they create is pinned, so each create
is a lookup (the database, its -journal, -wal and -shm, an .output file, a backup). The run must
end (plain: well under a second; it hung before), and leave exactly what the plain run leaves:
exit code, output, every file byte for byte; the files that remain carry their layouts.

libiez's SQLite is its own (a private copy, placement_lib/src/db_sqlite.c): before, the
application's WAL open of its -shm file held SQLite's global VFS mutex while libiez's lookup,
inside that open, waited for the same mutex forever. The last cases run the application on the
interaction DB itself: libiez must never open, lock or close that file (POSIX locks are per
process), so those lookups are errors with the plain call, and nothing waits.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from conftest import MIB, counts_rows, fresh_db, layout_text, layouts_below, pin_layouts, reset_dir, tree
from iez.config import database_url
from iez.maps import MapEntry, write_map

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

TIMEOUT = 60  # each run; plain runs take well under a second
NAMES = ["app.db", "app.db-journal", "app.db-wal", "app.db-shm", "out.txt", "backup.db", "backup.db-journal",
         "export.csv"]


def sqlite3_shell() -> str:
    path = shutil.which("sqlite3")
    if not path:
        pytest.fail("the sqlite3 shell is required (apt-get install sqlite3; scripts/test installs it)")
    return path


def shell_script(journal: str) -> str:
    """What the sqlite3 shell runs: deterministic writes (same bytes in every run), reads, an .output
    file (fopen) and a backup (a second database), so each kind of create happens."""
    return f"""PRAGMA journal_mode={journal};
CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);
BEGIN;
WITH RECURSIVE c(x) AS (VALUES(1) UNION ALL SELECT x+1 FROM c WHERE x<3000)
  INSERT INTO t SELECT x, printf('%040d', x) FROM c;
COMMIT;
UPDATE t SET b = upper(hex(b)) WHERE a % 7 = 0;
DELETE FROM t WHERE a % 11 = 0;
CREATE INDEX tb ON t(b);
SELECT count(*), sum(a), max(b) FROM t;
.output out.txt
SELECT * FROM t WHERE a < 40;
.output stdout
.backup backup.db
PRAGMA integrity_check;
"""


PYTHON_APP = r"""
import sqlite3, sys, threading
journal = sys.argv[1]
db = sqlite3.connect("app.db", isolation_level=None, check_same_thread=False)
print(db.execute(f"PRAGMA journal_mode={journal}").fetchone()[0])
db.execute("CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT)")
reader = sqlite3.connect("app.db", isolation_level=None, check_same_thread=False)
def write(k):
    # one writer at a time (SQLite's own rule); the reader reads between the transactions
    for i in range(20):
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO t(b) VALUES (?)", [(f"{k}-{i}-{j:030d}",) for j in range(50)])
        db.execute("COMMIT")
        reader.execute("SELECT count(*) FROM t").fetchone()
write(0)
t = threading.Thread(target=write, args=(1,))
t.start(); t.join()
print(db.execute("SELECT count(*), max(b) FROM t").fetchone())
with open("export.csv", "w") as out:
    for row in db.execute("SELECT a, b FROM t WHERE a % 100 = 0"):
        out.write(f"{row[0]},{row[1]}\n")
backup = sqlite3.connect("backup.db")
db.backup(backup)
backup.close()
reader.close()
db.close()
print(sqlite3.connect("backup.db").execute("PRAGMA integrity_check").fetchone()[0])
"""


@pytest.fixture(scope="module")
def interaction_dbs(tmp_path_factory, shared_db) -> dict[str, str]:
    """IEZ_DB by kind: a SQLite file in WAL mode (iez's own), one in rollback-journal mode, MariaDB."""
    base = tmp_path_factory.mktemp("interaction")
    return {"sqlite-wal": fresh_db("sqlite", base, "wal"), "sqlite-rollback": fresh_db("sqlite", base, "rollback"),
            "mariadb": shared_db("mariadb"), "missing": str(base / "no-such.db")}


def set_journal(db: str, mode: str) -> None:
    conn = sqlite3.connect(db)
    assert conn.execute(f"PRAGMA journal_mode={mode}").fetchone()[0] == mode
    conn.close()


def pin(db: str, work: Path) -> dict[str, str]:
    """Pins every name the applications create below work; the DB keeps its journal mode."""
    if db.endswith("no-such.db"):
        return {}
    expected = pin_layouts(db, {work / n: (MIB, [i % 8, 8 + i % 8]) for i, n in enumerate(NAMES)})
    if db.endswith("rollback.db"):
        set_journal(db, "delete")  # iez's engine turns WAL on when it connects
    return expected


def layout_map(path: Path, work: Path) -> str:
    write_map(path, "app-sqlite", [MapEntry(str(work / n), MIB, 2, f"{i % 8} {8 + i % 8}")
                                   for i, n in enumerate(NAMES)])
    return str(path)


def app_command(app: str, journal: str) -> tuple[list, bytes | None]:
    if app == "sqlite3":
        return [sqlite3_shell(), "app.db"], shell_script(journal).encode()
    return [sys.executable, "-B", "-c", PYTHON_APP, journal], None


def run_both(runner, cmd, stdin, db, work, **extra):
    """The plain run, then the run under libiez, each in a fresh work directory: both results and trees."""
    reset_dir(work)
    plain = runner.plain(cmd, cwd=work, timeout=TIMEOUT, input=stdin)
    plain_tree = tree(work)
    reset_dir(work)
    lib = runner.iez(cmd, db, cwd=work, timeout=TIMEOUT, input=stdin, **extra)
    return plain, plain_tree, lib, tree(work)


@pytest.mark.parametrize("with_map", [False, True], ids=["db", "map"])
@pytest.mark.parametrize("iez_db", ["sqlite-wal", "sqlite-rollback", "mariadb", "missing"])
@pytest.mark.parametrize("journal", ["wal", "delete"])
@pytest.mark.parametrize("app", ["sqlite3", "python"])
def test_an_application_using_sqlite_runs_as_plainly(app, journal, iez_db, with_map, interaction_dbs, runner,
                                                     state_dir, tmp_path):
    db = interaction_dbs[iez_db]
    work = tmp_path / "work"
    expected = pin(db, work)
    extra = {"IEZ_MAP": layout_map(tmp_path / "job.map", work)} if with_map else {}
    if iez_db.startswith("sqlite"):
        mode = sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == {"sqlite-wal": "wal", "sqlite-rollback": "delete"}[iez_db]
    cmd, stdin = app_command(app, journal)
    plain, plain_tree, lib, lib_tree = run_both(runner, cmd, stdin, db, work, **extra)
    assert plain.returncode == 0, plain.stderr
    assert (lib.returncode, lib.stdout, lib.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert lib_tree == plain_tree  # every file, byte for byte: the application's databases included
    assert lib.elapsed < plain.elapsed + 10
    left = {str(work / n) for n in NAMES if (work / n).exists()}
    rows = counts_rows(state_dir)
    assert len(rows) == 1
    if iez_db == "missing" and not with_map:  # no DB: every create an error, with the plain call
        assert layouts_below(work) == {} and rows[0]["hits"] == "0" and int(rows[0]["errors"]) >= len(left)
        return
    if iez_db == "missing":
        expected = {str(work / n): layout_text(MIB, [i % 8, 8 + i % 8]) for i, n in enumerate(NAMES)}
    assert layouts_below(work) == {p: t for p, t in expected.items() if p in left}
    assert rows[0]["errors"] == "0" and int(rows[0]["hits"]) >= len(left)


@pytest.mark.parametrize("journal", ["wal", "delete"])
@pytest.mark.parametrize("app", ["sqlite3", "python"])
def test_an_application_writing_the_interaction_db_itself(app, journal, runner, state_dir, tmp_path):
    """The application's database is IEZ_DB: libiez never opens it (closing a descriptor of its own
    would drop the application's POSIX locks), so the lookups its creates need are errors, made at
    once with the plain call, and the database is what the plain run leaves."""
    template = tmp_path / "template"
    template.mkdir()
    source = fresh_db("sqlite", template, "iez")
    pin(source, tmp_path / "work")
    set_journal(source, journal)
    work = tmp_path / "work"

    def setup(path: Path) -> None:
        shutil.copy(source, path / "app.db")  # the application's database is the interaction DB

    cmd, stdin = app_command(app, journal)
    cmd = [c.replace("CREATE TABLE t(", "CREATE TABLE IF NOT EXISTS t(") if isinstance(c, str) else c for c in cmd]
    if stdin:
        stdin = stdin.replace(b"CREATE TABLE t(", b"CREATE TABLE IF NOT EXISTS t(")
    reset_dir(work, setup)
    plain = runner.plain(cmd, cwd=work, timeout=TIMEOUT, input=stdin)
    plain_tree = tree(work)
    reset_dir(work, setup)
    lib = runner.iez(cmd, str(work / "app.db"), cwd=work, timeout=TIMEOUT, input=stdin)
    assert plain.returncode == 0, plain.stderr
    assert (lib.returncode, lib.stdout, lib.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert tree(work) == plain_tree
    assert lib.elapsed < plain.elapsed + 10
    assert layouts_below(work) == {}
    rows = counts_rows(state_dir)
    assert len(rows) == 1 and rows[0]["hits"] == "0" and int(rows[0]["errors"]) >= 1


LATE_APP = r"""
import sqlite3, sys
mode = sys.argv[1]
open("out.txt", "w").write("first\n")  # a pinned create: libiez connects to the interaction DB
db = sqlite3.connect("app.db", isolation_level=None)  # the application opens that DB itself
print(db.execute(f"PRAGMA journal_mode={mode}").fetchone()[0])  # alone in the plain run
db.execute("CREATE TABLE IF NOT EXISTS t(a INTEGER PRIMARY KEY, b TEXT)")
db.execute("BEGIN IMMEDIATE")
db.executemany("INSERT INTO t(b) VALUES (?)", [(f"{i:030d}",) for i in range(500)])
open("export.csv", "w").write("while the application holds its write lock\n")
db.execute("COMMIT")
print(db.execute("SELECT count(*) FROM t").fetchone()[0], db.execute("PRAGMA integrity_check").fetchone()[0])
db.close()
"""


@pytest.mark.parametrize("switch", [("wal", "delete"), ("delete", "wal")], ids=["wal-to-delete", "delete-to-wal"])
def test_an_application_opening_the_interaction_db_after_libiez(switch, runner, state_dir, tmp_path):
    """libiez connected first (a create), then the application opens the same DB and changes its
    journal mode, which needs no other connection: libiez's gives way when the application opens
    the file, so the change succeeds as in the plain run, and later creates are errors."""
    template = tmp_path / "template"
    template.mkdir()
    source = fresh_db("sqlite", template, "iez")
    work = tmp_path / "work"
    pin(source, work)
    set_journal(source, switch[0])

    def setup(path: Path) -> None:
        shutil.copy(source, path / "app.db")

    cmd = [sys.executable, "-B", "-c", LATE_APP, switch[1]]
    reset_dir(work, setup)
    plain = runner.plain(cmd, cwd=work, timeout=TIMEOUT)
    plain_tree = tree(work)
    reset_dir(work, setup)
    lib = runner.iez(cmd, str(work / "app.db"), cwd=work, timeout=TIMEOUT)
    assert plain.returncode == 0 and plain.stdout == f"{switch[1]}\n500 ok\n".encode(), plain.stderr
    assert (lib.returncode, lib.stdout, lib.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert tree(work) == plain_tree
    assert list(layouts_below(work)) == [str(work / "out.txt")]
    assert [(r["hits"], r["errors"]) for r in counts_rows(state_dir)] == [("1", "1")]


CONNECTOR_APP = r"""
import sys, threading, MySQLdb
from urllib.parse import urlsplit
url = urlsplit(sys.argv[1])
def connect():
    return MySQLdb.connect(host=url.hostname, port=url.port or 3306, user=url.username or "root",
                           passwd=url.password or "", db=url.path.strip("/"))
db = connect()
cur = db.cursor()
cur.execute("SELECT count(*) FROM placements")
count = cur.fetchone()[0]
def other():  # a second thread, its own connection, a create while it is open
    c = connect(); k = c.cursor(); k.execute("SELECT 1"); open("export.csv", "w").write(str(k.fetchone())); c.close()
t = threading.Thread(target=other); t.start()
with open("out.txt", "w") as out:
    out.write(f"{count > 0}\n")
t.join()
db.close()
print("done")
"""


@pytest.mark.parametrize("with_map", [False, True], ids=["db", "map"])
def test_an_application_using_connector_c_runs_as_plainly(with_map, interaction_dbs, runner, state_dir, tmp_path):
    """The same for MariaDB's client: the application's Connector/C (mysqlclient) and libiez's own
    copy live side by side, with IEZ_DB that very server."""
    db = interaction_dbs["mariadb"]
    work = tmp_path / "work"
    expected = pin(db, work)
    extra = {"IEZ_MAP": layout_map(tmp_path / "job.map", work)} if with_map else {}
    url = database_url(db).render_as_string(hide_password=False).replace("mysql+mysqldb://", "mysql://")
    plain, plain_tree, lib, lib_tree = run_both(runner, [sys.executable, "-B", "-c", CONNECTOR_APP, url], None, db,
                                                work, **extra)
    assert plain.returncode == 0 and plain.stdout == b"done\n", plain.stderr
    assert (lib.returncode, lib.stdout, lib.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert lib_tree == plain_tree
    assert layouts_below(work) == {p: t for p, t in expected.items() if Path(p).name in ("out.txt", "export.csv")}
    assert [(r["hits"], r["errors"]) for r in counts_rows(state_dir)] == [("2", "0")]
