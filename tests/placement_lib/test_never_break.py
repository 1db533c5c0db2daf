"""Issue 14's reproductions 1-7 and 9: libiez never breaks a program, whatever the program does.

Each test runs a real program plainly and under libiez (direct SQLite and MariaDB lookups, and
a layout map where it matters) and holds the library to the plain run: exit code, output, the
files left behind, the time taken. placement_lib/README.md "Signals, fork and descriptors" says
what each case promises.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from conftest import BACKENDS, MIB, counts_rows, fresh_db, layout_text, layouts_below, pin_layouts
from iez.config import database_url
from iez.db.engine import make_engine
from iez.layout.emulated import read_sidecar
from iez.maps import MapEntry, write_map

pytestmark = pytest.mark.slow

MODES = ("sqlite", "mariadb", "map")


def pin(shared_db, mode: str, tmp_path: Path, layouts: dict) -> tuple[str, dict[str, str], dict[str, str]]:
    """Pins ``layouts`` (path: (stripe_size, osts)) for ``mode``: the IEZ_DB, the extra environment
    (IEZ_MAP for "map", a map written from the same layouts next to a SQLite IEZ_DB) and the expected
    attribute per path."""
    db = shared_db("sqlite" if mode == "map" else mode)
    expected = pin_layouts(db, layouts)
    extra: dict[str, str] = {}
    if mode == "map":
        layout_map = tmp_path / "job.map"
        write_map(layout_map, "never-break", [
            MapEntry(str(path), size, len(osts), " ".join(str(o) for o in osts)) for path, (size, osts) in layouts.items()
        ])
        extra["IEZ_MAP"] = str(layout_map)
    return db, extra, expected


def totals(state_dir: Path) -> tuple[int, int, int, int]:
    """(processes, hits, misses, errors) over every counts file the run left."""
    rows = counts_rows(state_dir)
    return (len(rows), sum(int(r["hits"]) for r in rows), sum(int(r["misses"]) for r in rows),
            sum(int(r["errors"]) for r in rows))


# ---- 1. fork() from a threaded program that uses SQLite ----------------------------------------
@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", MODES)
def test_fork_while_another_thread_works_in_sqlite(mode, shared_db, runner, state_dir, apps, tmp_path):
    """100 children forked while the parent's other thread is inside SQLite all create their file:
    none hangs. A child of a threaded parent never calls into a DB client (another thread may have
    held its locks at fork): with IEZ_DB its create is an error and the plain call; a map places it."""
    work = tmp_path / "work"
    n = 100
    db, extra, expected = pin(shared_db, mode, tmp_path, {work / f"c.{i}": (MIB, [i % 16]) for i in range(n)})
    # the parent's own lookups (its SQLite journals: misses) get 10 s: past the default 100 ms on a loaded node
    # one became an error, and the parent's row then counted as a 101st child
    extra["IEZ_TIMEOUT_MS"] = "10000"
    run = runner.compare([apps("fork_threads_sqlite"), work, n, tmp_path / "app.db"], db, work, timeout=120,
                         **extra)
    run.assert_same()
    assert run.lib.stdout == f"children {n} hung 0 failed 0\n".encode()
    # the parent looks up its SQLite journals (misses); each child its one file
    children = [r for r in counts_rows(state_dir) if int(r["hits"]) + int(r["errors"]) > 0]
    assert len(children) == n
    if mode == "map":
        assert layouts_below(work) == expected
        assert all((r["hits"], r["errors"]) == ("1", "0") for r in children)
    else:
        assert layouts_below(work) == {}
        assert all((r["hits"], r["errors"]) == ("0", "1") for r in children)


# ---- 2. a signal handler creates while its thread is inside malloc ----------------------------
@pytest.mark.timeout(240)
@pytest.mark.parametrize("nthreads", [1, 4])
def test_signal_handler_creates_while_the_program_allocates(nthreads, shared_db, runner, state_dir, apps, tmp_path):
    """open() is async-signal-safe: with a layout map, libiez's create path allocates nothing, so a
    SIGALRM handler that creates while the program is in malloc neither corrupts the heap (one
    thread) nor deadlocks (four): every file is made and placed, and the program's own malloc saw
    no call from inside the handler's open()."""
    work = tmp_path / "work"
    n = 600
    db, extra, expected = pin(shared_db, "map", tmp_path, {work / f"s.{i}": (MIB, [i % 8, 8 + i % 8]) for i in range(n)})
    run = runner.compare([apps("signal_create"), work, n, nthreads], db, work, timeout=120, **extra)
    run.assert_same()
    assert run.lib.stdout == f"created {n} allocations_in_handler 0\n".encode()
    assert layouts_below(work) == expected
    assert totals(state_dir) == (1, n, 0, 0)


# ---- 3. SIGPIPE ---------------------------------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("reachable", [True, False], ids=["reachable", "unreachable"])
def test_a_mysql_db_leaves_sigpipe_alone(reachable, shared_db, runner, tmp_path):
    """A shell whose redirection made libiez talk to MariaDB still runs `yes | head -1` with SIGPIPE
    at its default: yes dies of it (141), as in the plain run, and no trap shows it ignored."""
    db = shared_db("mariadb") if reachable else "mysql://root@127.0.0.1:1/nothing"
    work = tmp_path / "work"
    script = 'echo x > "$1/new"; yes | head -1; echo "${PIPESTATUS[@]}"; trap -p'
    run = runner.compare(["bash", "-c", script, "sh", work], db, work)
    run.assert_same()
    assert run.lib.stdout == b"y\n141 0\n"


# ---- 4. descriptors ------------------------------------------------------------------------------
GAMES = {
    "first": "placed 3 a 3 b 4 c 5\n",
    "emfile": None,  # as many as the plain run (what is inherited varies): compared below
    "closed012": "",
    "closerange": "whole file held, SQLite's lock bytes held, its WAL index's held\n",
}
LIMITS = {"above-the-limit": "256:4096", "top-of-the-range": "256:256"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("limit", list(LIMITS))
@pytest.mark.parametrize("game", list(GAMES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_descriptors_stay_out_of_the_applications_way(backend, game, limit, shared_db, runner, state_dir, apps,
                                                      tmp_path):
    """The DB connection's descriptors never take the application's numbers: its first files get 3,
    4, 5; it opens as many files before EMFILE; with 0-2 closed its stdout and stderr land in its
    own files; after close_range and dup2 over every number, libiez neither reads its files nor
    releases its locks. Where the soft limit can be raised (256:4096) they sit above it, else at the
    top of the range, given back when the application's own open hits EMFILE."""
    work = tmp_path / "work"
    db, _, expected = pin(shared_db, backend, tmp_path,
                          {work / name: (MIB, [i + 1]) for i, name in enumerate(["placed", "p1", "p2"])})
    run = runner.compare(["prlimit", f"--nofile={LIMITS[limit]}", apps("fd_games"), game, work], db, work)
    run.assert_same()
    if GAMES[game] is not None:
        assert run.lib.stdout == GAMES[game].encode()
    else:
        assert run.lib.stdout.endswith(b" then Too many open files\n")
    placed = layouts_below(work)
    if game != "closerange":
        assert placed == {str(work / "placed"): expected[str(work / "placed")]}
    elif backend == "mariadb":
        # a lost socket is forgotten without a call on it, and a new connection made
        assert placed == {str(work / n): expected[str(work / n)] for n in ("p1", "p2")}
    else:
        # SQLite's per-file state would reuse the lost descriptors: lookups stop instead
        assert placed == {str(work / "p1"): expected[str(work / "p1")]}
    if game == "closed012":
        assert (work / "out").read_bytes() == b"in 0 out 1 err 2\nto stdout\n"
        assert (work / "err").read_bytes() == b"to stderr\n"


# ---- 5, 6. invalid pointers, O_PATH ---------------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["place", "trace"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_invalid_pointers_and_o_path_fail_as_plainly(backend, mode, shared_db, runner, apps, tmp_path):
    """open/open64/openat/creat/fopen with a path the kernel cannot read fail with EFAULT, not a
    crash; O_PATH|O_CREAT on a missing file with a stored layout is ENOENT and creates nothing."""
    work = tmp_path / "work"
    db, _, _ = pin(shared_db, backend, tmp_path,
                   {work / "opath_missing": (MIB, [1]), work / "opath_exists": (MIB, [2]), "/tmp/x": (MIB, [3])})
    extra = {"IEZ_MODE": mode, "IEZ_TRACE_DIR": tmp_path / "traces"} if mode == "trace" else {}
    run = runner.compare([apps("bad_calls"), work], db, work, **extra)
    run.assert_same()
    out = run.lib.stdout.decode().splitlines()
    assert [line for line in out if line.startswith(("pointer_1", "unmapped", "runs_into"))] == [
        f"{label} {call} {'NULL' if call == 'fopen' else '-1'} EFAULT"
        for label in ("pointer_1", "unmapped", "runs_into_unreadable")
        for call in ("open", "open64", "openat", "creat", "fopen")
    ]
    assert out[-4:] == ["opath_creat_missing -1 ENOENT", "opath_creat_missing_at -1 ENOENT",
                        "opath_creat_exists ok 0", "opath_missing absent"]
    # opath_exists is made by a plain create first (placed), then opened with O_PATH|O_CREAT
    assert layouts_below(work) == ({str(work / "opath_exists"): layout_text(MIB, [2])} if mode == "place" else {})


# ---- 7. every wait bounded ------------------------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", MODES)
def test_a_vfork_childs_create_costs_the_parent_nothing(mode, shared_db, runner, state_dir, apps, tmp_path):
    """A vfork() child shares its parent's memory: its create must not leave a connection there
    that the parent's next create would use (it took 10 s). The child makes no direct lookup (a
    map still answers); the parent's creates are placed at once."""
    work = tmp_path / "work"
    names = ["child", "parent.0", "parent.1", "parent.2"]
    db, extra, expected = pin(shared_db, mode, tmp_path, {work / n: (MIB, [i]) for i, n in enumerate(names)})
    run = runner.compare([apps("vfork_create"), work], db, work, **extra)
    run.assert_same()
    assert run.lib.stdout.endswith(b"slowest parent create 0 s\n")
    assert run.lib.elapsed < 3.0
    placed = {str(work / n): expected[str(work / n)] for n in names[1:]}
    if mode == "map":
        placed[str(work / "child")] = expected[str(work / "child")]
        assert totals(state_dir) == (1, 4, 0, 0)  # a vfork child counts in its parent's memory
    else:
        assert totals(state_dir) == (1, 3, 0, 1)
    assert layouts_below(work) == placed


class BlackHoleDNS:
    """A name server on port 53 of a free loopback address (UDP and TCP) that reads every question
    and never answers."""

    def __init__(self):
        for _ in range(50):
            self.address = f"127.{random.randint(1, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"
            self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                self.udp.bind((self.address, 53))
                self.tcp.bind((self.address, 53))
                break
            except OSError:
                self.udp.close()
                self.tcp.close()
        else:
            pytest.fail("no free loopback address for port 53")
        self.tcp.listen(64)
        self.accepted: list[socket.socket] = []
        self.stopped = False
        threading.Thread(target=self._drain, daemon=True).start()
        threading.Thread(target=self._accept, daemon=True).start()

    def _drain(self):
        while not self.stopped:
            try:
                self.udp.recv(4096)
            except OSError:
                return

    def _accept(self):
        while not self.stopped:
            try:
                self.accepted.append(self.tcp.accept()[0])
            except OSError:
                return

    def close(self):
        self.stopped = True
        for s in (self.udp, self.tcp, *self.accepted):
            s.close()


@pytest.mark.timeout(120)
def test_a_db_host_whose_dns_never_answers_costs_one_time_out(runner, state_dir, tmp_path):
    """IEZ_DB names a MariaDB host that the name server never answers (resolv.conf replaced in a
    mount namespace): the process pays IEZ_TIMEOUT_MS once (the resolver's own retries took 10 s),
    counts its creates as errors and leaves the files a plain run leaves."""
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, text=True)
    assert probe.returncode == 0, f"unshare -rm (user and mount namespaces) is needed here: {probe.stderr}"
    dns = BlackHoleDNS()
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(f"nameserver {dns.address}\noptions timeout:5 attempts:2\n")
    try:
        work = tmp_path / "work"
        files = [work / f"f{i}" for i in range(5)]
        cmd = ["unshare", "-rm", "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && exec "$@"', resolv,
               "touch", *files]
        run = runner.compare(cmd, "mysql://root@never.answers.iez.test:3306/x", work, timeout=60,
                             IEZ_TIMEOUT_MS=200)
        run.assert_same()
        assert run.lib.elapsed - run.plain.elapsed < 1.5, (run.lib.elapsed, run.plain.elapsed)
        processes, hits, misses, errors = totals(state_dir)
        assert (hits, misses, errors) == (0, 0, len(files))
    finally:
        dns.close()


def slow_mariadb(tmp_path: Path, paths: list[Path], seconds: float) -> str:
    """A MariaDB database whose placements view takes ``seconds`` per query (a derived table that
    sleeps), holding a layout for each of ``paths``."""
    db = fresh_db("mariadb", tmp_path, "slow", migrate=False)
    engine = make_engine(database_url(db))
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE slow_rows (path VARCHAR(700) PRIMARY KEY, stripe_size BIGINT, "
                              "stripe_count INT, osts TEXT, layout TEXT, default_layout TEXT)"))
            conn.execute(text("CREATE VIEW placements AS SELECT r.path, r.stripe_size, r.stripe_count, r.osts, "
                              f"r.layout, r.default_layout FROM slow_rows r JOIN (SELECT SLEEP({seconds}) AS s) d"))
            for i, path in enumerate(paths):
                conn.execute(text("INSERT INTO slow_rows VALUES (:p, :s, 1, :o, NULL, NULL)"),
                             {"p": str(path), "s": MIB, "o": str(i % 16)})
    finally:
        engine.dispose()
    return db


@pytest.mark.timeout(120)
def test_the_time_out_bounds_each_create_not_each_lookup(runner, state_dir, apps, tmp_path):
    """64 threads create at once behind 40 ms lookups: IEZ_TIMEOUT_MS bounds each create, the wait
    for the other threads' lookups included (one create waited 3.45 s). The creates that ran out
    of time are errors with the plain call, the others placed; lookups stay on."""
    work = tmp_path / "work"
    n, timeout_ms = 64, 300
    db = slow_mariadb(tmp_path, [work / f"t.{i}" for i in range(n)], 0.04)
    run = runner.compare([apps("threads_wait"), work, n], db, work, IEZ_TIMEOUT_MS=timeout_ms)
    run.assert_same(stderr=False)
    assert run.lib.stdout == f"created {n}\n".encode()
    slowest = int(run.lib.stderr.decode().split()[-2])
    assert slowest <= timeout_ms + 700, run.lib.stderr  # a busy 2-core machine adds scheduling delays
    processes, hits, misses, errors = totals(state_dir)
    assert (processes, hits + errors, misses) == (1, n, 0)
    assert 1 <= hits < n and errors > 0


# ---- 9. ".." after a symbolic link; undone placements in the sidecar log --------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_dotdot_after_a_symbolic_link_is_where_the_kernel_goes(backend, shared_db, runner, tmp_path):
    """dir-link/../f is the f beside dir-link's target (the kernel's walk), not work/f: it gets the
    layout stored for that file; ".." after a real directory still folds as written."""
    work = tmp_path / "work"

    def setup(w: Path) -> None:
        (w / "a" / "b").mkdir(parents=True)
        (w / "real" / "sub").mkdir(parents=True)
        (w / "dir-link").symlink_to("a/b")

    db, _, expected = pin(shared_db, backend, tmp_path, {work / "f": (MIB, [1]), work / "a" / "f": (MIB, [2]),
                                                          work / "real" / "f": (MIB, [3]),
                                                          work / "a" / "g": (MIB, [4])})
    run = runner.compare(["touch", "dir-link/../f", "real/sub/../f", work / "dir-link" / ".." / "g"], db, work,
                         setup=setup, cwd=work)
    run.assert_same()
    assert not (work / "f").exists()
    assert layouts_below(work) == {str(work / n): expected[str(work / n)] for n in ("a/f", "real/f", "a/g")}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("create_path", ["own-open", "precreate"])
def test_an_undone_placement_leaves_no_layout_in_the_sidecar_log(shared_db, runner, state_dir, tmp_path,
                                                                 create_path):
    """Where the attribute is refused the layout goes to the sidecar log. On the pre-creating path
    (a Lustre client, MPI-IO, HDF5: IEZ_ASSUME_LUSTRE=1 takes it here), when the application's own
    call then fails and libiez removes the file it made, the log says so ("-"), so that iez layout
    show never reports OSTs a file never got - here for the file a later plain create makes. Where
    libiez makes the application's open itself, a call that fails creates nothing and logs nothing."""
    db = shared_db("sqlite")
    work = tmp_path / "work"
    target = work / "d"
    expected = pin_layouts(db, {target: (MIB, [3, 7])})
    # O_CREAT|O_DIRECTORY: EINVAL on a missing name (older kernels: a file and ENOTDIR)
    code = ("import os, sys\ntry:\n    os.open(sys.argv[1], os.O_CREAT | os.O_DIRECTORY | os.O_WRONLY, 0o644)\n"
            "except OSError as e:\n    print(e.errno)\n")
    extra = {"IEZ_ASSUME_LUSTRE": "1"} if create_path == "precreate" else {}
    run = runner.compare([sys.executable, "-c", code, target], db, work, IEZ_LAYOUT_XATTR="bogus.iez.layout",
                         **extra)
    run.assert_same()
    log_file = state_dir / "layouts.log"
    if create_path == "precreate":
        assert log_file.read_text().splitlines() == [f"{expected[str(target)]}\t{target}", f"-\t{target}"]
    else:
        assert not log_file.exists() or log_file.read_text() == ""
    assert read_sidecar(log_file) == {}

    target.touch()  # a later plain create
    show = subprocess.run([sys.executable, "-m", "iez.cli", "layout", "show", str(target), "--json"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "IEZ_STATE_DIR": str(state_dir)})
    assert show.returncode == 1 and "has no layout" in show.stderr, (show.stdout, show.stderr)
