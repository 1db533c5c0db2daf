"""The MariaDB driver is an extra: without it, every path that would open a ``mysql://`` database stops
with one line naming the extra and the Debian packages, never a traceback (issue 11).

The driver is hidden from a child process (``sys.modules["MySQLdb"] = None``), so this runs where
mysqlclient is installed; tests/test_fresh_install.py checks the same in a venv that really lacks it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from iez.config import ConfigError, DriverMissing, database_url, require_driver

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
URL = "mysql://iez:secret@db.invalid:3306/iez"
WITHOUT_DRIVER = "import sys; sys.modules['MySQLdb'] = None\n"


def without_driver(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_DRIVER + code, *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def assert_one_clear_line(done: subprocess.CompletedProcess, exit_code: int) -> None:
    assert done.returncode == exit_code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    for needed in ("MariaDB driver", "mysqlclient", "'.[mariadb]'", "libmariadb-dev", "pkg-config"):
        assert needed in line, line
    assert "secret" not in line and "Traceback" not in done.stderr


@pytest.mark.parametrize("argv", [
    ["db", "upgrade", "--db", URL],
    ["db", "current", "--db", URL],
    ["alloc", "add", "--db", URL, "--file", "/lustre/x", "--stripe-size", "1048576", "--osts", "1,2"],
    ["alloc", "show", "--db", URL, "--file", "/lustre/x"],
    ["api", "--db", URL, "--port", "0"],
    ["mds", "--db", URL, "--bind", "tcp://127.0.0.1:0", "--insecure"],
], ids=lambda a: " ".join(a[:2]))
def test_iez_commands_name_the_extra_in_one_line(argv):
    code = "from iez.cli import main; sys.exit(main(sys.argv[1:]))"
    assert_one_clear_line(without_driver(code, *argv), 2)


def test_iez_db_environment_variable_too():
    code = "import os; os.environ['IEZ_DB'] = sys.argv[1]; from iez.cli import main; sys.exit(main(['db', 'current']))"
    assert_one_clear_line(without_driver(code, URL), 2)


@pytest.mark.parametrize("script, args", [
    ("lookup_bench.py", ["--backends", "mariadb"]),
    ("preload_latency.py", ["--backends", "mariadb", "--cases", "db"]),
])
def test_benchmarks_name_the_extra_in_one_line(script, args):
    code = ("import os, runpy; os.environ['IEZ_BENCH_MYSQL_URL'] = sys.argv[1]; sys.path.insert(0, 'benchmarks');"
            f"sys.argv = ['{script}', *sys.argv[2:]]; runpy.run_path('benchmarks/{script}', run_name='__main__')")
    assert_one_clear_line(without_driver(code, URL, *args), 2)


def test_driver_missing_is_a_config_error_and_sqlite_never_asks_for_it(monkeypatch):
    monkeypatch.setattr("iez.config._mysqldb_problem", lambda: "is not installed")
    with pytest.raises(DriverMissing) as caught:
        database_url(URL)
    assert isinstance(caught.value, ConfigError) and isinstance(caught.value, ValueError)
    assert "db.invalid" in str(caught.value) and "secret" not in str(caught.value)
    require_driver(database_url("/tmp/x.db"))  # SQLite: nothing to check


def test_with_the_driver_the_url_is_mysqldb():
    assert database_url(URL).drivername == "mysql+mysqldb"
