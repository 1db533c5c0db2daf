"""A MariaDB lookup cut off by IEZ_TIMEOUT_MS fails that create only (issue 31, the MariaDB leftover).

The server is made slow honestly: the test holds ``LOCK TABLES allocations WRITE`` (the table under the
``placements`` view the library reads) through its own connection, so libiez's query waits in the
server past the create's deadline. Before, the connection the cut-off left mid-query could not be used
again and lookups were switched off for the rest of the process: every later create of a long-running
program went unplaced. Now the broken connection is dropped, the creates of a short back-off window
after it are errors without a wait, and a later create connects again and is placed
(placement_lib/README.md, "Every wait bounded").

``paced_create`` creates each path the test sends it, one at a time, and says when it is done, so the
test decides what the server does between two creates of the same process.
"""

from __future__ import annotations

import select
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from conftest import (
    MIB,
    assert_no_sanitizer_report,
    clean_env,
    counts_rows,
    fresh_db,
    layouts_below,
    pin_layouts,
    reset_dir,
)
from waiting import scaled

pytestmark = pytest.mark.slow

LOCKED = [f"locked{i}" for i in range(12)]
AFTER = [f"after{i}" for i in range(4)]


def mysql_connect(db: str):
    import MySQLdb

    url = urlsplit(db)
    return MySQLdb.connect(host=url.hostname, port=url.port or 3306, user=url.username or "root",
                           passwd=url.password or "", db=url.path.strip("/"))


class Paced:
    """paced_create under libiez: one create per line sent, its answer read back."""

    def __init__(self, cmd: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)

    def create(self, path: Path, timeout: float) -> float:
        """Creates ``path``; seconds it took, answer included."""
        start = time.monotonic()
        self.proc.stdin.write(f"{path}\n".encode())
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], scaled(timeout))
        assert ready, f"paced_create did not answer for {path} within {scaled(timeout):.0f} s"
        line = self.proc.stdout.readline()
        assert line == f"{path} ok\n".encode(), line
        return time.monotonic() - start

    def finish(self) -> tuple[int, bytes]:
        _, err = self.proc.communicate(timeout=scaled(30))
        return self.proc.returncode, err


@pytest.mark.timeout(300)
@pytest.mark.parametrize("build", ["plain", "sanitizers"])
def test_a_cut_off_mariadb_lookup_fails_that_create_only(build, request, state_dir, apps, tmp_path):
    """The same process: 12 creates under the lock (made, unplaced, not a wait each), then 4 placed. The
    sanitizer build checks the dropped connection's memory (ASan, UBSan)."""
    runner = request.getfixturevalue("runner" if build == "plain" else "san_runner")
    db = fresh_db("mysql", tmp_path, "cutoff")
    work = reset_dir(tmp_path / "work")
    names = LOCKED + AFTER
    expected = pin_layouts(db, {work / n: (MIB * (1 + i % 3), [i % 8, 8 + i % 5]) for i, n in enumerate(names)})
    timeout_ms = int(scaled(0.1) * 1000)
    env = runner.env(db, IEZ_TIMEOUT_MS=timeout_ms, IEZ_DEBUG=1)

    holder = mysql_connect(db)
    paced = Paced([str(apps("paced_create"))], clean_env(env))
    try:
        cur = holder.cursor()
        cur.execute("LOCK TABLES allocations WRITE")  # every read of the placements view now waits in the server
        first = paced.create(work / LOCKED[0], 30)
        assert first >= timeout_ms / 1000 * 0.9, f"the first create did not wait for the locked table ({first:.3f} s)"
        # the server still holds the table: these must not each pay IEZ_TIMEOUT_MS (a back-off, not a wait each)
        start = time.monotonic()
        for name in LOCKED[1:]:
            paced.create(work / name, 30)
        waited = time.monotonic() - start
        assert waited < len(LOCKED[1:]) * timeout_ms / 1000 / 2, (
            f"{len(LOCKED) - 1} creates against the locked table took {waited:.3f} s (IEZ_TIMEOUT_MS={timeout_ms})")
        cur.execute("UNLOCK TABLES")
        # past the back-off the cut-offs started (at most 64 x IEZ_TIMEOUT_MS), the same process is placed again
        time.sleep(64 * timeout_ms / 1000 + 0.2)
        for name in AFTER:
            paced.create(work / name, 30)
    finally:
        holder.close()
        rc, err = paced.finish()
    assert rc == 0, err.decode(errors="replace")
    assert_no_sanitizer_report(subprocess.CompletedProcess([], rc, b"", err))
    placed = layouts_below(work)
    assert {p: expected[p] for p in placed if Path(p).name in LOCKED} == {}, "a create placed under the lock"
    assert placed == {str(work / n): expected[str(work / n)] for n in AFTER}, err.decode(errors="replace")[-3000:]
    assert [(r["hits"], r["misses"], r["errors"]) for r in counts_rows(state_dir)] == [
        (str(len(AFTER)), "0", str(len(LOCKED)))]


@pytest.mark.timeout(600)
def test_signals_during_mariadb_lookups_neither_hang_nor_cut_them_off(runner, state_dir, apps, tmp_path):
    """A SIGALRM handler creates files every 2 ms while the main thread creates files too (``signal_lookup``),
    so the signal often lands in the middle of a main-thread lookup: the handler's create then gets the plain
    call (libiez is busy on that thread), and the lookup it interrupted waits on for the server's answer.
    Before, the interrupted wait (``poll`` failing with EINTR) was taken for a server that did not answer:
    thousands of errors per run and lookups paused. Every run must end, make every file, and count every
    main-thread create a miss (its lookup answered, none cut off). A handler's create that finds libiez idle
    makes no MariaDB lookup at all (src/signals.c; test_signal_db.py): an error, the file unplaced."""
    n = 300
    db = fresh_db("mysql", tmp_path, "siglookup")
    work = tmp_path / "work"
    pin_layouts(db, {work / f"s.{i}": (MIB, [i % 8, 8 + i % 8]) for i in range(n)})
    for attempt in range(5):
        reset_dir(work)
        for old in (state_dir / "runs").glob("*") if (state_dir / "runs").is_dir() else []:
            old.unlink()
        run = runner.iez([apps("signal_lookup"), work, n], db, timeout=scaled(90),
                         IEZ_TIMEOUT_MS=int(scaled(0.1) * 1000))
        assert (run.returncode, run.stdout, run.stderr) == (0, f"created {n}\n".encode(), b""), f"run {attempt}"
        made = sorted(p.name for p in work.iterdir())
        mains = [m for m in made if m.startswith("m.")]
        assert sorted(m for m in made if m.startswith("s.")) == sorted(f"s.{i}" for i in range(n))
        assert layouts_below(work) == {}, f"run {attempt}: a handler's create looked its layout up"
        [row] = counts_rows(state_dir)
        assert (row["misses"], row["hits"]) == (str(len(mains)), "0") and int(row["errors"]) <= n, (
            f"run {attempt}: {row}")
