"""libiez installs a program's signal handlers behind a trampoline of its own (src/signals.c), so that a
create from inside a handler makes no direct MariaDB lookup (issue 31 item 2; test_signal_db.py). The
program must not be able to tell: ``signal_actions`` installs handlers with sigaction (both forms, with
SA_RESTART, SA_NODEFER, SA_RESETHAND, SA_ONSTACK and a mask), signal, bsd_signal, ssignal, sysv_signal,
sigset and siginterrupt, reads them back, raises signals and prints all it sees; the plain run and the
run under libiez must print the same. Its handlers also create files and leave by siglongjmp (on the
thread's stack and on a sigaltstack), after which the program creates more: those are outside any handler
and are placed from MariaDB too, while the handlers' own creates are placed from a map or SQLite only."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import MIB, counts_rows, layouts_below, pin_layouts
from iez.maps import MapEntry, write_map

pytestmark = pytest.mark.slow

ROUNDS = 12
IN_HANDLER = ("in", "ret")       # created by a handler (that leaves by siglongjmp / that returns)
OUTSIDE = ("out", "after")       # created by the program after it


def layouts_for(work: Path) -> dict[Path, tuple[int, list[int]]]:
    return {work / f"{prefix}.{k}": (MIB, [k % 8, 8 + k % 8])
            for prefix in IN_HANDLER + OUTSIDE for k in range(ROUNDS)}


@pytest.mark.parametrize("source", ["none", "sqlite", "mariadb", "map"])
def test_signal_handlers_look_the_same_and_only_their_creates_skip_mariadb(source, shared_db, runner, state_dir,
                                                                          apps, tmp_path):
    work = tmp_path / "work"
    layouts = layouts_for(work)
    extra = {}
    if source == "none":
        db, expected = str(tmp_path / "no-such.db"), {}
    else:
        db = shared_db("sqlite" if source == "sqlite" else "mariadb")
        expected = pin_layouts(db, layouts)
        if source == "map":  # the map answers first, in a handler too; IEZ_DB stays the MariaDB one
            entries = [MapEntry(str(p), size, len(osts), " ".join(map(str, osts)))
                       for p, (size, osts) in layouts.items()]
            write_map(tmp_path / "job.map", "signal-actions", entries)
            extra["IEZ_MAP"] = str(tmp_path / "job.map")
    run = runner.compare([apps("signal_actions"), work, ROUNDS], db, work, timeout=60, **extra)
    run.assert_same()
    out = run.lib.stdout.decode()
    assert f"jumped {ROUNDS} of {ROUNDS}\n" in out and "after plain: plain_handler flags" in out, out
    assert "read with SA_RESTART: 1 \n" in out and "one-shot child: signalled 12\n" in out, out
    if source == "mariadb":
        expected = {p: t for p, t in expected.items() if Path(p).name.split(".")[0] in OUTSIDE}
    assert layouts_below(work) == expected
    [row] = counts_rows(state_dir)  # the SA_RESETHAND child dies of its second signal: no counts of its own
    outside, in_handler = len(OUTSIDE) * ROUNDS, len(IN_HANDLER) * ROUNDS
    if source == "mariadb":
        assert (row["hits"], row["errors"]) == (str(outside), str(in_handler))
    elif source == "none":
        assert row["hits"] == "0"
    else:
        assert (row["hits"], row["errors"]) == (str(outside + in_handler), "0")
