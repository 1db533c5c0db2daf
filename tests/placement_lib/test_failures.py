"""When the DB or the attribute fails, the application sees exactly the plain run.

Each case runs ``errno_probe`` (opens with known outcomes) and ``touch`` of 20
files plainly and under libiez, in the same directory: exit codes, stdout,
stderr and the files left behind must be identical, and the library must not
make the application wait much longer than IEZ_TIMEOUT_MS per process.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import (MIB, TOUCHED, Runner, counts_rows, fresh_db, layouts_below, pin_layouts, pin_probe_paths,
                      probe_setup, reset_dir)

pytestmark = pytest.mark.slow

NFILES = len(TOUCHED)
TIMEOUT_MS = 100
# One process pays the time-out once, then stops asking: 20 creates that each paid it would take 2 s.
MAX_EXTRA_S = 1.0


def touch_files(work: Path) -> list[Path]:
    return [work / name for name in TOUCHED]


def assert_plain_behaviour(runner: Runner, apps, db: str, work: Path, **extra) -> None:
    """errno_probe and touch under libiez with ``db`` behave exactly as plain runs, and no file gets a layout."""
    probe = runner.compare([apps("errno_probe"), work], db, work, setup=probe_setup, IEZ_TIMEOUT_MS=TIMEOUT_MS,
                           **extra)
    probe.assert_same()
    assert b"new_excl open ok EDOM mode=640\n" in probe.lib.stdout
    assert layouts_below(work) == {}

    touched = runner.compare(["touch", *touch_files(work)], db, work, IEZ_TIMEOUT_MS=TIMEOUT_MS, **extra)
    touched.assert_same()
    assert touched.lib.returncode == 0
    assert layouts_below(work) == {}
    assert touched.lib.elapsed < 5.0
    assert touched.lib.elapsed - touched.plain.elapsed < MAX_EXTRA_S, (touched.lib.elapsed, touched.plain.elapsed)


def assert_counted_as_errors(state_dir: Path) -> None:
    rows = counts_rows(state_dir)
    assert rows, "no counts file written"
    assert all(r["hits"] == "0" and r["misses"] == "0" for r in rows), rows
    assert all(int(r["errors"]) > 0 for r in rows), rows


@pytest.mark.timeout(120)
def test_missing_db_is_not_created(runner, state_dir, apps, tmp_path):
    work = tmp_path / "work"
    for db in (tmp_path / "nodb.db", tmp_path / "no" / "such" / "dir" / "iez.db"):
        assert_plain_behaviour(runner, apps, str(db), work)
        assert not db.exists()
        assert not db.parent.exists() or sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name)) == []
    assert_counted_as_errors(state_dir)


@pytest.mark.timeout(120)
def test_corrupt_db_is_left_alone(runner, state_dir, apps, tmp_path):
    db = tmp_path / "corrupt.db"
    junk = os.urandom(64 * 1024)
    db.write_bytes(junk)
    assert_plain_behaviour(runner, apps, str(db), tmp_path / "work")
    assert db.read_bytes() == junk
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("corrupt.db")) == ["corrupt.db"]
    assert_counted_as_errors(state_dir)


class LockHolder:
    """Another process holding ``BEGIN EXCLUSIVE`` on a SQLite file until stopped."""

    def __init__(self, db: Path):
        code = ("import sqlite3, sys\n"
                "c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)\n"
                "c.execute('BEGIN EXCLUSIVE')\n"
                "c.execute('UPDATE allocations SET policy = policy')\n"
                "print('locked', flush=True)\n"
                "sys.stdin.read()\n"
                "c.execute('ROLLBACK')\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line == "locked\n", f"the lock holder did not start: {line!r}"

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


@pytest.mark.timeout(120)
def test_exclusively_locked_db_times_out_once(runner, state_dir, apps, tmp_path):
    """A rollback-journal DB under an EXCLUSIVE lock: no reader gets in, so the lookup times out."""
    db = Path(fresh_db("sqlite", tmp_path, "locked"))
    work = tmp_path / "work"
    pin_probe_paths(str(db), work)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    holder = LockHolder(db)
    try:
        assert_plain_behaviour(runner, apps, str(db), work)
    finally:
        holder.stop()
    assert_counted_as_errors(state_dir)


@pytest.mark.timeout(120)
def test_wal_db_locked_by_a_writer_still_answers(runner, state_dir, apps, tmp_path):
    """iez's own DB runs in WAL mode, where a writer holding BEGIN EXCLUSIVE does not stop readers."""
    db = Path(fresh_db("sqlite", tmp_path, "wal"))
    work = tmp_path / "work"
    expected = pin_probe_paths(str(db), work)
    holder = LockHolder(db)
    try:
        touched = runner.compare(["touch", *touch_files(work)], str(db), work, IEZ_TIMEOUT_MS=TIMEOUT_MS)
    finally:
        holder.stop()
    touched.assert_same()
    assert layouts_below(work) == {str(p): expected[str(p)] for p in touch_files(work)}
    assert [(r["hits"], r["errors"]) for r in counts_rows(state_dir)] == [(str(NFILES), "0")]


@pytest.mark.timeout(120)
def test_mariadb_down(runner, state_dir, apps, tmp_path):
    # nothing listens on port 1
    assert_plain_behaviour(runner, apps, "mysql://root@127.0.0.1:1/x", tmp_path / "work")
    assert_counted_as_errors(state_dir)


class SilentServer:
    """A TCP server that accepts connections and never sends a byte (a hung MariaDB)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted.append(conn)

    def stop(self) -> None:
        self.running = False
        self.thread.join(5)
        for conn in self.accepted:
            conn.close()
        self.sock.close()


@pytest.mark.timeout(120)
def test_mariadb_hanging(runner, state_dir, apps, tmp_path):
    server = SilentServer()
    try:
        work = tmp_path / "work"
        db = f"mysql://root@127.0.0.1:{server.port}/iez"
        assert_plain_behaviour(runner, apps, db, work)
        touched = runner.iez(["touch", *touch_files(reset_dir(work))], db, IEZ_TIMEOUT_MS=TIMEOUT_MS)
        assert touched.returncode == 0
        assert touched.elapsed < 3.0
        assert server.accepted, "libiez never connected to the hung server"
    finally:
        server.stop()
    assert_counted_as_errors(state_dir)


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            out.append({"\\": "\\", "t": "\t", "n": "\n"}[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@pytest.mark.timeout(120)
def test_refused_attribute_goes_to_the_sidecar_log(shared_db, runner, state_dir, apps, tmp_path):
    db = shared_db("sqlite")
    work = tmp_path / "work"
    odd = work / "odd\tname\\with\nbreaks"
    files = [work / "a.dat", odd, work / "b.dat"]
    expected = pin_layouts(db, {files[0]: (MIB, [3, 7, 11]), files[1]: (2 * MIB, [0]), files[2]: (MIB, [5, 6])})
    with pytest.raises(OSError):
        os.setxattr(tmp_path, "bogus.iez.layout", b"x")  # no such namespace: the kernel refuses it

    result = runner.compare(["touch", *files, work / "unpinned"], db, work, IEZ_LAYOUT_XATTR="bogus.iez.layout")
    result.assert_same()
    assert layouts_below(work) == {}
    log = (state_dir / "layouts.log").read_bytes().decode()
    lines = log.split("\n")
    assert lines[-1] == "" and len(lines) == 4, log  # one line per placed file, each ending in \n
    assert lines[1] == expected[str(odd)] + "\t" + str(work) + "/odd\\tname\\\\with\\nbreaks"
    parsed = {}
    for line in lines[:-1]:
        attr, escaped = line.split("\t")
        parsed[_unescape(escaped)] = attr
    assert parsed == expected
    assert [(r["hits"], r["misses"], r["errors"]) for r in counts_rows(state_dir)] == [("3", "1", "0")]


@pytest.mark.timeout(120)
def test_debug_off_keeps_stderr_identical(shared_db, runner, apps, tmp_path):
    """Without IEZ_DEBUG (or with IEZ_DEBUG=0) libiez writes nothing of its own, even when things fail."""
    db = shared_db("sqlite")
    work = tmp_path / "work"
    pin_layouts(db, {work / "x": (MIB, [1]), work / "missing" / "y": (MIB, [2])})
    commands = [
        ["touch", work / "x", work / "missing" / "y"],
        ["cp", tmp_path / "nonexistent", work / "x"],
        [sys.executable, "-B", "-c", "import sys; open(sys.argv[1], 'w'); sys.exit('bye')", work / "x"],
        ["dd", "if=/dev/zero", f"of={work / 'x'}", "bs=4k", "count=3", "status=noxfer"],
    ]
    for cmd in commands:
        for extra in ({}, {"IEZ_DEBUG": "0"}):
            for broken in (db, str(tmp_path / "nodb.db"), "mysql://root@127.0.0.1:1/x"):
                result = runner.compare(cmd, broken, work, **extra)
                result.assert_same()
                assert result.plain.stderr  # every command here has something to say
    debug = runner.iez(["touch", work / "new"], db, IEZ_DEBUG="1")
    assert debug.stderr.startswith(b"iez[")  # the switch itself works
