"""Fixtures for the interaction DB and the REST API: real SQLite files, a real MariaDB, real servers.

MariaDB comes from ``IEZ_TEST_MYSQL_URL`` (default ``mysql://root@127.0.0.1:3306/iez_test``):
the tests use that database and others named after it (``iez_test_api``, ...),
create them when missing and empty them before use; at the end of the session
that database and every other one the session created are dropped
(tests/README.md). An unreachable MariaDB fails the tests that need it: it is
never skipped.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, inspect, text

from iez.config import database_url
from iez.db.engine import make_engine
from iez.db.schema import ensure_database, upgrade
from waiting import scaled

BACKENDS = ("sqlite", "mariadb")
API_TOKEN = "test-token-4f1c"
DATA_TABLES = ("reservations", "allocations", "write_requests", "runs", "applications",
               "ost_stats", "oss_stats", "osts", "oss", "mds_lease")


def mysql_url(suffix: str = "") -> str:
    base = os.environ.get("IEZ_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/iez_test")
    return base + suffix


def mysql_admin(statement: str, **params) -> list[tuple]:
    """Run ``statement`` on the test MariaDB server outside any database (none needs to exist yet); its rows."""
    engine = create_engine(database_url(mysql_url()).set(database=""), connect_args={"connect_timeout": 5})
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def suite_databases() -> set[str]:
    """The MariaDB databases of this suite: ``IEZ_TEST_MYSQL_URL``'s and those named after it."""
    base = database_url(mysql_url()).database
    return {name for (name,) in mysql_admin("SHOW DATABASES") if name == base or name.startswith(base + "_")}


@pytest.fixture(scope="session", autouse=True)
def drop_test_databases():
    """At the end of the session, drop the test databases: the base one, and every other the session created.

    The base database (``IEZ_TEST_MYSQL_URL``'s) is the suite's scratch space, emptied on first use, so it
    goes even when it existed before (``scripts/test`` creates it afresh). Databases named after it that
    existed before the session are left alone: they may belong to a run with a longer base name.
    """
    try:
        before = suite_databases()
    except Exception:  # MariaDB down: the tests that need it fail by themselves
        before = None
    yield
    if before is None:
        return
    base = database_url(mysql_url()).database
    for name in sorted(n for n in suite_databases() if n == base or n not in before):
        mysql_admin(f"DROP DATABASE IF EXISTS `{name.replace('`', '``')}`")


def reset_mysql(db: str) -> None:
    """Drop everything in the MariaDB database ``db`` (created if missing)."""
    url = database_url(db)
    try:
        ensure_database(url)
    except OSError as err:
        pytest.fail(f"MariaDB is required for these tests and is unreachable: {err}")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("SET FOREIGN_KEY_CHECKS=0"))
        for view in inspect(conn).get_view_names():
            conn.execute(text(f"DROP VIEW `{view}`"))
        for table in inspect(conn).get_table_names():
            conn.execute(text(f"DROP TABLE `{table}`"))
        conn.execute(text("SET FOREIGN_KEY_CHECKS=1"))
    engine.dispose()


def fresh_db(backend: str, tmp_path: Path, name: str, migrate: bool = True) -> str:
    """An IEZ_DB value naming an empty database of ``backend`` (at the current schema if ``migrate``)."""
    if backend == "sqlite":
        db = str(tmp_path / f"{name}.db")
    else:
        db = mysql_url(f"_{name}")
        reset_mysql(db)
    if migrate:
        engine = make_engine(database_url(db))
        upgrade(engine)
        engine.dispose()
    return db


_mariadb_ready = False


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def db(backend: str, tmp_path: Path) -> str:
    """IEZ_DB of a database at the current schema holding no rows."""
    global _mariadb_ready
    if backend == "sqlite":
        return fresh_db("sqlite", tmp_path, "iez")
    url = mysql_url()
    if not _mariadb_ready:
        reset_mysql(url)
        engine = make_engine(database_url(url))
        upgrade(engine)
        engine.dispose()
        _mariadb_ready = True
    engine = create_engine(database_url(url))
    with engine.begin() as conn:
        for table in DATA_TABLES:
            conn.execute(text(f"DELETE FROM {table}"))
    engine.dispose()
    return url


@pytest.fixture
def empty_db(backend: str, tmp_path: Path) -> str:
    """IEZ_DB of a database with no tables at all."""
    global _mariadb_ready
    if backend == "mariadb":
        _mariadb_ready = False  # the shared test database is about to lose its schema
        reset_mysql(mysql_url())
        return mysql_url()
    return str(tmp_path / "empty.db")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_iez(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real ``iez`` command line in a child process."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "iez.cli", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout)


def iez_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``iez ARGS`` run by ``iez.cli.main`` in this process: what :func:`run_iez` gives, without its new
    interpreter (about 0.6 s of imports a call).

    Both streams are captured at the file descriptors as well, so what a C library writes to fd 2 is in
    ``stderr`` as it would be from a child; the environment is ``os.environ`` with ``env`` on top; the
    shared engines are closed afterwards, as the child's exit would. For commands that neither start
    processes nor serve (alloc, db, trace parse/import-darshan, usage, layout, simulate).
    """
    from iez.cli import main
    from iez.db.engine import dispose_engines

    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file, \
            pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        out = open(1, "w", encoding="utf-8", errors="surrogateescape", closefd=False)
        err = open(2, "w", encoding="utf-8", errors="surrogateescape", closefd=False)
        try:
            os.dup2(out_file.fileno(), 1)
            os.dup2(err_file.fileno(), 2)
            patch.setattr(sys, "stdout", out)
            patch.setattr(sys, "stderr", err)
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse's usage errors (2), --help and --version (0)
                code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
                if isinstance(exit_.code, str):
                    print(exit_.code, file=err)
            finally:
                dispose_engines()
                out.flush()
                err.flush()
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        out_file.seek(0)
        err_file.seek(0)
        return subprocess.CompletedProcess(["iez", *args], code, out_file.read().decode(), err_file.read().decode())


class Server:
    """``iez api`` running in a child process on a free loopback port."""

    def __init__(self, db: str, env: dict | None = None, workers: int = 1):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, "IEZ_API_TOKEN": API_TOKEN, **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "iez.cli", "api", "--db", db, "--port", str(self.port),
             "--workers", str(workers), "--log-level", "warning"],
            env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        limit = scaled(60)
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"iez api exited with {self.proc.returncode}: {self.proc.stdout.read()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"iez api did not answer /healthz within {limit:.0f} s")

    def client(self, token: str | None = API_TOKEN) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session", params=BACKENDS)
def server(request, tmp_path_factory) -> Server:
    """One API server per backend for the whole session; tests use their own app names and paths."""
    db = fresh_db(request.param, tmp_path_factory.mktemp("api"), "api")
    srv = Server(db)
    srv.backend = request.param
    srv.db = db
    yield srv
    srv.stop()


@pytest.fixture
def api(server: Server) -> httpx.Client:
    with server.client() as client:
        yield client


class Munged:
    """munged in the foreground with its own key, socket, log and seed in a temporary directory."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="iez-munge-"))
        os.chmod(self.dir, 0o755)  # munged wants its socket's directory searchable by every client
        self.socket, key = self.dir / "munge.socket", self.dir / "munge.key"
        made = subprocess.run(["mungekey", "--create", "--keyfile", str(key), "--bits", "1024"],
                              capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        self.proc = subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={self.socket}", f"--key-file={key}",
             f"--log-file={self.dir / 'munged.log'}", f"--pid-file={self.dir / 'munged.pid'}",
             f"--seed-file={self.dir / 'munged.seed'}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + scaled(20)
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"munged did not start: {self.proc.stdout.read()}")
            time.sleep(0.02)

    def credential(self, uid: int) -> str:
        """A new credential of ``uid``: root asks munged for one on that user's behalf (``munge -U``)."""
        args = ["munge", "--no-input", f"--socket={self.socket}"]
        if uid != os.getuid():
            args += [f"--uid={uid}", f"--gid={uid}"]
        made = subprocess.run(args, capture_output=True, text=True)
        assert made.returncode == 0, made.stderr
        return made.stdout.strip()

    def header(self, uid: int) -> dict:
        return {"Authorization": f"MUNGE {self.credential(uid)}"}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


# -- the session's own hygiene (issue 32) -----------------------------------------------------------------------------


def _ignored_signal(signum, frame) -> None:
    """Stands in for SIG_IGN in the test process itself (see :func:`pytest_configure`)."""


def pytest_configure(config) -> None:
    """Programs the tests start get the default signal dispositions however pytest was launched: a shell's
    background job (``cmd &``) ignores SIGINT and SIGQUIT, ``nohup`` ignores SIGHUP, and an ignored signal stays
    ignored across exec, so the signal tests' programs would not die of what they are sent. A handler (unlike
    SIG_IGN) is reset to the default at exec; in pytest itself these do what ignoring did: nothing."""
    import signal

    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, _ignored_signal)


def _session_processes(basetemp: Path | None) -> list[int]:
    """Processes the session left running: its descendants, and daemons (double-forked, so no longer its
    descendants) whose command line names the session's temporary tree."""
    parents: dict[int, int] = {}
    named: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
            if state == "Z":
                continue  # exited, waiting for its parent: nothing to stop
            parents[int(entry.name)] = int(ppid)
            if basetemp is not None and str(basetemp).encode() in (entry / "cmdline").read_bytes():
                named.add(int(entry.name))
        except (OSError, ValueError):
            continue
    me, found = os.getpid(), set(named)
    for pid in parents:
        at, seen = pid, set()
        while at in parents and at not in seen and at > 1:
            seen.add(at)
            if parents[at] == me:
                found.add(pid)
                break
            at = parents[at]
    found.discard(me)
    return sorted(found)


def pytest_sessionfinish(session, exitstatus) -> None:
    """Every process a test started and did not stop (a service whose start failed, a daemon) is stopped here,
    by pid (SIGTERM, then SIGKILL after 5 s), and named: the suite leaves nothing running."""
    import signal

    try:
        basetemp = session.config._tmp_path_factory.getbasetemp()
    except Exception:
        basetemp = None
    left = _session_processes(basetemp)
    if not left:
        return
    names = []
    for pid in left:
        try:
            names.append(f"{pid} {Path(f'/proc/{pid}/cmdline').read_bytes().replace(bytes(1), b' ').decode()[:120]}")
            os.kill(pid, signal.SIGTERM)
        except (OSError, UnicodeDecodeError):
            continue
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in left):
        time.sleep(0.1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    sys.stderr.write("\nconftest: stopped processes the tests left running:\n  " + "\n  ".join(names) + "\n")
