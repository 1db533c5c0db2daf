"""A signal handler that creates a file while its thread is inside malloc, with lookups going to a
DB (issue 31 item 2). The tester met a deadlock even with IEZ_DB unset and no DB file at all: the
library allocated before finding there was nothing to open. Now nothing on a create's path
allocates with glibc's malloc whatever the configuration: no DB (IEZ_DB unset, or naming a file that
does not exist: one stat), a SQLite DB (libiez's own SQLite allocates from memory it maps
itself), or a MariaDB DB: Connector/C allocates with glibc's malloc, so libiez, which installs the
program's handlers behind a trampoline of its own (src/signals.c), makes no MariaDB lookup from a
handler (before, 3 runs of 3 hung): those creates are errors with the plain call, the files unplaced.
Each case runs 10 times; every run must finish, make every file and count no allocation made inside
the handler's open()."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import MIB, counts_rows, layouts_below, pin_layouts

pytestmark = pytest.mark.slow

CASES = ["unset", "missing-file", "sqlite", "mariadb"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("nthreads", [1, 4])
@pytest.mark.parametrize("case", CASES)
def test_signal_handler_creates_with_db_lookups(case, nthreads, shared_db, runner, state_dir, apps, tmp_path):
    n = 300
    work = tmp_path / "work"
    layouts = {work / f"s.{i}": (MIB, [i % 8, 8 + i % 8]) for i in range(n)}
    if case in ("sqlite", "mariadb"):
        db = shared_db(case)
        pinned = pin_layouts(db, layouts)
        expected = pinned if case == "sqlite" else {}  # every create is a handler's: no MariaDB lookup
    elif case == "missing-file":
        db, expected = str(tmp_path / "no-such.db"), {}
    else:
        db, expected = None, {}  # the default, $IEZ_STATE_DIR/iez.db, does not exist
    for attempt in range(10):
        run = runner.compare([apps("signal_create"), work, n, nthreads], db, work, timeout=120)
        run.assert_same()
        assert run.lib.stdout == f"created {n} allocations_in_handler 0\n".encode(), f"run {attempt}"
        assert layouts_below(work) == expected, f"run {attempt}"
    rows = counts_rows(state_dir)
    assert len(rows) == 10
    if case == "sqlite":
        assert all(int(r["hits"]) == n for r in rows)
    if case == "mariadb":
        assert all((r["hits"], r["misses"], r["errors"]) == ("0", "0", str(n)) for r in rows), rows
