"""SQLite lookups under concurrency: many threads, and several processes, creating at once (issue 31 item 7).

The tester's 256 simultaneous thread creates placed only 19 to 112 with ``IEZ_DB`` a SQLite file (a
map: 256/256). These lost them on a loaded machine (the first two a whole process's lookups at once):

- a create whose ``IEZ_TIMEOUT_MS`` went on waiting for the other threads' lookups had its own
  lookup interrupted by SQLite's progress handler at the deadline, and that was taken for a DB
  that timed out: lookups were switched off for the rest of the process;
- the same for the connection's first read of the schema (several processes opening the DB at
  once): a process made no lookup at all;
- the threads took turns on one mutex, each woken and run for its single lookup, so waits grew
  with the scheduler's delays (now the thread holding the connection makes the queued lookups);
- the create's deadline started before the application's own open, which waits for the
  directory's lock while the other threads create there, and the first lookup's connection time
  counted against every thread queued behind it (now neither does).

``burst_create`` starts 4 processes of 16 threads (and 1 process of 16 threads x 50 creates) that
create their files at once, each thread one after another, then one more file per process alone.
Every file must carry the layout the DB holds for it, and every process count all its creates as
hits: none lost. ``IEZ_TIMEOUT_MS`` is the default 100 ms, stretched by the machine's load as any
deadline in the tests (tests/waiting.py): it bounds a wait, it is not what is measured.

Measured at the default 100 ms on the shared 2-core development machine (load 6-9), the library
before and after (``burst_create DIR 1 16 50`` and ``DIR 4 16 12`` under ``IEZ_DB``): 1 x 16 x 50
placed 69 / 199 / 279 of 801 before, 801 / 801 / 801 after; 4 x 16 x 12 placed 9 / 58 / 167 of
772 before (whole processes switched off), 688 / 692 / 693 after (the rest: creates whose lookup
the loaded machine did not run within 100 ms, errors for those creates only).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import MIB, counts_rows, fresh_db, layouts_below, pin_layouts, reset_dir
from waiting import scaled

pytestmark = pytest.mark.slow

THREADS = 16
#: (processes, creates per thread)
CASES = {"1x16x50": (1, 50), "4x16x12": (4, 12)}


def names(procs: int, per: int) -> list[str]:
    return [f"p{k}.t{i}.{j}" for k in range(procs) for i in range(THREADS) for j in range(per)] + [
        f"p{k}.last" for k in range(procs)]


@pytest.fixture(scope="module")
def burst_db(tmp_path_factory) -> tuple[str, Path, dict[str, str]]:
    """One SQLite DB with a layout for every file of every case below one work directory."""
    base = tmp_path_factory.mktemp("burst")
    db = fresh_db("sqlite", base, "burst")
    work = base / "work"
    wanted = sorted({n for procs, per in CASES.values() for n in names(procs, per)})
    expected = pin_layouts(db, {work / n: (MIB * (1 + i % 4), [i % 16, 16 + i % 7]) for i, n in enumerate(wanted)})
    return db, work, expected


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", list(CASES))
def test_every_create_of_many_threads_and_processes_is_placed_from_sqlite(case, burst_db, runner, state_dir, apps):
    procs, per = CASES[case]
    db, work, expected = burst_db
    reset_dir(work)
    timeout_ms = int(scaled(0.1) * 1000)
    done = runner.iez([apps("burst_create"), work, procs, THREADS, per], db, timeout=240, IEZ_TIMEOUT_MS=timeout_ms)
    total = procs * (THREADS * per + 1)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"created {total}\n".encode(), b"")
    made = {str(work / n) for n in names(procs, per)}
    placed = layouts_below(work)
    lost = sorted(made - set(placed))
    assert not lost, f"{len(lost)} of {total} creates not placed (IEZ_TIMEOUT_MS={timeout_ms}), e.g. {lost[:5]}"
    assert placed == {p: expected[p] for p in made}
    rows = counts_rows(state_dir)
    assert sorted((r["hits"], r["misses"], r["errors"]) for r in rows) == [
        (str(THREADS * per + 1), "0", "0")] * procs
