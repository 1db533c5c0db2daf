"""Tracing's accounting under real programs (placement_lib/README.md "Trace CSV", issue 14 reproduction 8).

Each program runs once plainly and once traced in a fresh directory; the traced run must
leave exactly what the plain run left (exit code, output, files), and each file's
``bytes_written`` must be what the program wrote to it, with the file's size as ground truth:

- writes through descriptor copies (dup, dup2, dup3, fcntl F_DUPFD/F_DUPFD_CLOEXEC) count for
  the file; dup2 over a traced descriptor lets its file go; descriptors that close_range and
  closefrom closed are forgotten; splice into a file counts for it;
- the stdio family (fprintf, vfprintf, printf, puts, fputc, putc, fputs, fwrite_unlocked,
  putw, dprintf, ... and the _FORTIFY_SOURCE ``__*_chk`` entry points) counts what each call
  accepted; freopen counts for the new file;
- per-file state is bounded: past ``IEZ_TRACE_MAX_FILES`` files, the rows of files no longer
  open are written early, and 100,000 files neither grow the process nor slow its loop
  (``benchmarks/trace_scale.py`` measures 1,000,000).
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from conftest import run_cmd

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

HEADER = ["path", "bytes_written", "file_size", "stripe_count", "stripe_size", "rank", "comm_size",
          "open_time", "pid", "host", "app", "job", "layout", "dir_layout"]

# placement_lib/tests/apps/trace_fds.c: the bytes written to each file
TRACE_FDS = {
    "dup.dat": 600, "dupfd.dat": 60, "dup2_old.dat": 60, "dup2_new.dat": 70, "dup3.dat": 30,
    "dup3_victim.dat": 40, "pipe_over.dat": 5, "close_range.dat": 7, "closefrom.dat": 9, "splice.dat": 300,
    "stdio.dat": 167, "dprintf.dat": 9, "stdout.dat": 17, "freopen_a.dat": 100, "freopen_b.dat": 250,
    "fdopen_open.dat": 33, "stdout_freopen.dat": 20,
}


def traced(work: Path, traces: Path, **extra) -> dict[str, str]:
    return {"IEZ_MODE": "trace", "IEZ_TRACE_DIR": str(traces), "IEZ_INCLUDE": str(work), **extra}


def read_traces(traces: Path) -> list[dict[str, str]]:
    """Every row of every trace file; no temporary file may be left."""
    rows = []
    for f in sorted(traces.glob("iez-trace.*.csv")):
        with f.open(newline="") as handle:
            reader = csv.reader(handle)
            assert next(reader) == HEADER, f
            rows += [dict(zip(HEADER, r)) for r in reader]
    assert not list(traces.glob(".*.tmp")), "a temporary trace file was left behind"
    return rows


def assert_bytes_are_sizes(rows: list[dict[str, str]]) -> dict[str, int]:
    """Per path, the bytes of its rows add up to the file's size on disk; returns them."""
    written: dict[str, int] = Counter()
    for r in rows:
        written[r["path"]] += int(r["bytes_written"])
    wrong = {p: (b, os.path.getsize(p)) for p, b in written.items() if b != os.path.getsize(p)}
    assert not wrong, f"bytes_written vs file size: {wrong}"
    return written


@pytest.mark.parametrize("flags", [(), ("-D_FORTIFY_SOURCE=2",)], ids=["plain-build", "fortified-build"])
def test_copies_and_stdio_count_for_the_right_file(runner, apps, tmp_path, flags):
    exe = apps("trace_fds", *flags)
    if flags:  # the fortified build calls the __*_chk entry points, so those are what is tested
        imports = subprocess.run(["nm", "-D", "--undefined-only", str(exe)], capture_output=True, text=True).stdout
        assert all(f in imports for f in ("__fprintf_chk", "__vfprintf_chk", "__printf_chk", "__dprintf_chk"))
    work, traces = tmp_path / "work", tmp_path / "traces"
    cmp = runner.compare([exe, work], None, work, **traced(work, traces))
    cmp.assert_same()
    assert cmp.lib.stdout == b"done\n"
    rows = read_traces(traces)
    assert len(rows) == len(TRACE_FDS)  # one row per file, nothing for the pipe or the memfds
    by_name = {Path(r["path"]).name: r for r in rows}
    assert {n: int(r["bytes_written"]) for n, r in by_name.items()} == TRACE_FDS
    # the size each process left: at close, or where exit()'s flush of a stream still open takes it
    assert {n: int(r["file_size"]) for n, r in by_name.items()} == TRACE_FDS
    assert_bytes_are_sizes(rows)


@pytest.mark.parametrize("how, size", [("exit", 40), ("_exit", 0)])
def test_a_stream_left_open_is_sized_where_the_process_leaves_it(runner, apps, tmp_path, how, size):
    """exit() flushes a stream after the trace is written: its size counts the buffered bytes;
    _exit() drops them: the file stays empty, though the 40 bytes fputs accepted are counted."""
    work, traces = tmp_path / "work", tmp_path / "traces"
    cmp = runner.compare([apps("trace_exit"), work, how], None, work, **traced(work, traces))
    cmp.assert_same()
    (row,) = read_traces(traces)
    assert (row["bytes_written"], row["file_size"]) == ("40", str(size))
    assert (work / "buffered.dat").stat().st_size == size


def test_threads_with_copies_streams_and_early_rows(runner, apps, tmp_path):
    """8 threads x 1,500 files through dup'd descriptors and fdopen'd streams, 50 files kept in memory."""
    work, traces = tmp_path / "work", tmp_path / "traces"
    cmp = runner.compare([apps("trace_threads"), work, 8, 1500], None, work,
                         **traced(work, traces, IEZ_TRACE_MAX_FILES=50))
    cmp.assert_same()
    rows = read_traces(traces)
    assert len(list(traces.glob("iez-trace.*.csv"))) == 1
    written = assert_bytes_are_sizes(rows)
    assert len(written) == 8 * 1500 + 8
    # each file was opened once, so it has exactly one row, written early or at exit
    assert Counter(r["path"] for r in rows).most_common(1)[0][1] == 1
    assert {written[str(work / f"log.{t}")] for t in range(8)} == {1500}


def test_reopened_files_get_a_second_row_that_parse_merges(runner, tmp_path):
    """Rows written early are final for what came before; a file opened again gets a new row."""
    work, traces = tmp_path / "work", tmp_path / "traces"
    work.mkdir()
    script = """
import os, sys
d = sys.argv[1]
keep = open(os.path.join(d, "kept.log"), "wb", buffering=0)
for i in range(500):
    with open(os.path.join(d, f"f{i:04d}"), "wb") as f:
        f.write(b"x" * (i + 1))
    keep.write(b"k")
for i in range(0, 400, 50):
    with open(os.path.join(d, f"f{i:04d}"), "ab") as f:
        f.write(b"y" * 10)
keep.close()
"""
    proc = runner.iez([sys.executable, "-c", script, work], None, **traced(work, traces,
                                                                            IEZ_TRACE_MAX_FILES=100))
    assert proc.returncode == 0, proc.stderr
    rows = read_traces(traces)
    assert_bytes_are_sizes(rows)
    per_path = defaultdict(list)
    for r in rows:
        per_path[Path(r["path"]).name].append(r)
    assert len(per_path) == 501
    assert [(r["bytes_written"], r["file_size"]) for r in per_path["kept.log"]] == [("500", "500")]  # held: never early
    for i in range(0, 400, 50):
        got = sorted((int(r["bytes_written"]), int(r["file_size"])) for r in per_path[f"f{i:04d}"])
        assert got == sorted([(i + 1, i + 1), (10, i + 11)])  # the first open's row, then the reopening's

    from iez.trace.parse import parse_dir

    merged = {Path(q.file).name: q.write_bytes for q in parse_dir(traces).requests}
    assert merged == {p.name: p.stat().st_size for p in work.iterdir()}


def test_fork_children_write_their_own_early_rows(runner, tmp_path):
    work, traces = tmp_path / "work", tmp_path / "traces"
    work.mkdir()
    script = """
import os, sys
d = sys.argv[1]
def make(prefix, n):
    for i in range(n):
        with open(os.path.join(d, f"{prefix}{i:03d}"), "w") as f:
            f.write("z" * (i % 13 + 1))
make("p", 300)
pid = os.fork()
if pid == 0:
    make("c", 300)
    os._exit(0)
_, status = os.waitpid(pid, 0)
assert status == 0
make("q", 10)
"""
    proc = runner.iez([sys.executable, "-c", script, work], None, **traced(work, traces,
                                                                            IEZ_TRACE_MAX_FILES=50))
    assert proc.returncode == 0, proc.stderr
    assert len(list(traces.glob("iez-trace.*.csv"))) == 2
    rows = read_traces(traces)
    assert_bytes_are_sizes(rows)
    by_pid = defaultdict(set)
    for r in rows:
        by_pid[r["pid"]].add(Path(r["path"]).name[0])
    assert sorted(map(sorted, by_pid.values())) == [["c"], ["p", "q"]]
    assert len(rows) == 610  # the parent's files are not repeated by the child


def _loop(runner, exe, work: Path, n: int, env: dict | None) -> tuple[float, int]:
    """Seconds of trace_many's loop and its peak RSS (KiB), in a fresh directory."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    proc = runner.iez([exe, work, n], None, **env) if env is not None else runner.plain([exe, work, n])
    assert proc.returncode == 0, proc.stderr
    fields = proc.stdout.decode().split()
    assert fields[:2] == ["files", str(n)] and fields[4] == "peak_rss_kib", fields
    return float(fields[3]), int(fields[5])


def test_hundred_thousand_files_in_bounded_memory_and_time(runner, apps, tmp_path):
    """100,000 files with 2,000 kept in memory: every file in the trace, the process no larger
    than when tracing 1,000 files, the loop at most 3x the plain one (before: 17 MB more, and
    a fixed 4,096-bucket table)."""
    exe = apps("trace_many")
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path  # tmpfs: the file system's cost is steady
    scratch = Path(tempfile.mkdtemp(prefix="iez-trace-scale-", dir=base))
    try:
        work, traces = scratch / "work", tmp_path / "traces"
        n = 100_000
        env = traced(work, traces, IEZ_TRACE_MAX_FILES=2000)
        _, small_rss = _loop(runner, exe, work, 1000, env)  # the library's own footprint: its DB clients loaded
        plain, lib = [], []
        for _ in range(2):  # best of two for each side, alternating: drift hits both
            plain.append(_loop(runner, exe, work, n, None))
            shutil.rmtree(traces, ignore_errors=True)
            lib.append(_loop(runner, exe, work, n, env))
        rows = read_traces(traces)
        assert len(list(traces.glob("iez-trace.*.csv"))) == 1
        assert len(rows) == n and len({r["path"] for r in rows}) == n
        assert {(r["bytes_written"], r["file_size"]) for r in rows} == {("1", "1")}
        plain_s, lib_s = min(p[0] for p in plain), min(p[0] for p in lib)
        lib_rss = max(p[1] for p in lib)
        assert lib_rss - small_rss < 2 * 1024, f"100,000 files: {lib_rss} KiB, 1,000 files: {small_rss} KiB"
        assert lib_s < 3 * plain_s + 0.5, f"traced loop {lib_s:.2f} s, plain {plain_s:.2f} s"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.parametrize("value", ["abc", "0", "-5", "12x", "99999999999"])
def test_a_bad_max_files_is_said_and_the_default_kept(runner, tmp_path, value):
    work, traces = tmp_path / "work", tmp_path / "traces"
    work.mkdir()
    script = "import sys, os\nfor i in range(20): open(os.path.join(sys.argv[1], f'f{i}'), 'w').write('ab')\n"
    proc = runner.iez([sys.executable, "-c", script, work], None,
                      **traced(work, traces, IEZ_TRACE_MAX_FILES=value, IEZ_DEBUG=1))
    assert proc.returncode == 0
    assert f"IEZ_TRACE_MAX_FILES={value} is not a whole number from 1 to 4194304: 65536 files are kept" in (
        proc.stderr.decode())
    rows = read_traces(traces)
    assert len(rows) == 20 and "written early" not in proc.stderr.decode()


def test_early_rows_cut_short_leave_no_half_trace(runner, tmp_path):
    """RLIMIT_FSIZE stops the trace file at 4 KiB while the files are made (they are 2 bytes):
    the early rows fail part-way; the limit is lifted before exit, where the last rows would
    fit. The program is unharmed, and no trace with a cut row is left behind."""
    work, traces = tmp_path / "work", tmp_path / "traces"
    script = ("import os, resource, signal, sys\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
              "for i in range(300): open(os.path.join(sys.argv[1], f'f{i}'), 'w').write('ab')\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n"
              "print('ok')\n")
    cmp = runner.compare([sys.executable, "-c", script, work], None, work, cwd=tmp_path,
                         **traced(work, traces, IEZ_TRACE_MAX_FILES=100))
    cmp.assert_same()
    assert cmp.lib.stdout == b"ok\n"
    assert traces.is_dir() and sorted(p.name for p in traces.iterdir()) == []


def test_early_rows_without_a_trace_dir_leave_the_program_alone(runner, tmp_path):
    """No IEZ_TRACE_DIR: nothing is written, early or at exit, and the program is unharmed."""
    work = tmp_path / "work"
    script = ("import sys, os\nfor i in range(300): open(os.path.join(sys.argv[1], f'f{i}'), 'w').write('ab')\n"
              "print('ok')\n")
    cmp = runner.compare([sys.executable, "-c", script, work], None, work, cwd=tmp_path,
                         IEZ_MODE="trace", IEZ_INCLUDE=str(work), IEZ_TRACE_MAX_FILES=10)
    cmp.assert_same()
    assert cmp.lib.stdout == b"ok\n"
    assert not list(tmp_path.rglob("*iez-trace*"))


RAISED_LIMIT = r"""
import os, resource, sys
work = sys.argv[1]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
first = open(os.path.join(work, "first.dat"), "w")          # the first traced open, at the low soft limit
first.write("1" * 11); first.close()
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))   # then raised, as a launcher or a program does
fd = os.open(os.path.join(work, "high.dat"), os.O_CREAT | os.O_WRONLY, 0o644)
high = hard - 10
os.dup2(fd, high); os.close(fd)
os.write(high, b"h" * 123); os.close(high)
print(soft, hard)
"""


@pytest.mark.skipif(__import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)[1] < 2048,
                    reason="the hard descriptor limit is too low to raise the soft one past 1024")
def test_descriptors_above_a_soft_limit_raised_after_the_first_traced_open_are_traced(runner, tmp_path):
    import resource

    work, traces = tmp_path / "work", tmp_path / "traces"
    work.mkdir()
    traces.mkdir()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("IEZ_")}
    env.update(runner.env(None, **traced(work, traces)))
    proc = subprocess.run([sys.executable, "-B", "-c", RAISED_LIMIT, str(work)], env=env, capture_output=True,
                          timeout=60, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == b"1024"
    written = assert_bytes_are_sizes(read_traces(traces))
    assert written[str(work / "high.dat")] == 123  # written on descriptor hard - 10, above the old 1024
    assert written[str(work / "first.dat")] == 11
