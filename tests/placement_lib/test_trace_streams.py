"""Issue 27, reproduction 3: tracing counts every byte written through a stdio stream.

placement_lib/tests/apps/trace_streams.c writes one file through one stdio function per run:
the narrow calls, their _unlocked forms, the printf family, the wide-character family (fputwc,
putwc, putwchar, fputws, fwprintf, vfwprintf, wprintf, vwprintf and _unlocked forms; text
with accented letters, so bytes differ from characters), streams left open for exit() to
flush, and fflush/fseek in between. Built with -fno-inline (every call a call), with -O2 (glibc's headers then inline
putc_unlocked, fputc_unlocked, putchar_unlocked and small constant fwrite_unlocked into
stores into the stream's buffer: 300 of 300 bytes were missed) and with -D_FORTIFY_SOURCE=2
(the __*_chk entry points). And what libc formats and writes itself through a stream: perror,
psignal, warn, warnx, err, error, error_at_line (on stderr, err and error also as the exit()
they end in), putpwent, addmntent. For every case the traced run leaves what the plain run leaves,
and its row says bytes_written = file_size = the file's size: 0 bytes missed.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from conftest import reset_dir, run_cmd

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

# apps() builds with -O2; -fno-inline keeps every stdio call a call (__NO_INLINE__: no inline putc_unlocked)
# what the stream cases write; libc's own text (perror ... addmntent) has the length libc gives it
SIZES = {"putc_unlocked_big": 30000, **{c: 300 for c in (
    "fputc", "fputc_exit", "putc", "fputc_unlocked", "putc_unlocked", "putc_unlocked_exit", "putc_unlocked_flush",
    "putchar", "putchar_unlocked", "fputs", "fputs_unlocked", "puts", "fwrite", "fwrite_unlocked",
    "fwrite_unlocked_small", "putw", "fprintf", "vfprintf", "printf", "vprintf", "fputwc", "putwc", "fputwc_unlocked",
    "putwc_unlocked", "putwchar", "putwchar_unlocked", "fputws", "fputws_exit", "fputws_unlocked", "fwprintf",
    "vfwprintf", "wprintf", "vwprintf")}}
BUILDS = {"calls": ("-fno-inline",), "O2": (), "O2-fortify": ("-D_FORTIFY_SOURCE=2",)}


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_every_stdio_write_is_counted(build, runner, apps, tmp_path):
    exe = apps("trace_streams", *BUILDS[build])
    imports = run_cmd(["nm", "-D", "--undefined-only", exe]).stdout.decode()
    inlined = "putc_unlocked" not in imports and "__overflow" in imports
    assert inlined == (build != "calls")
    cases = run_cmd([exe, "list"]).stdout.decode().split()
    assert len(cases) == 44
    missed = {}
    for case in cases:
        work, traces = tmp_path / case / "work", tmp_path / case / "traces"
        reset_dir(work)
        plain = runner.plain([exe, work, case])
        plain_size = (work / f"{case}.dat").stat().st_size
        reset_dir(work)
        traced = runner.iez([exe, work, case], None, IEZ_MODE="trace", IEZ_TRACE_DIR=traces, IEZ_INCLUDE=work)
        assert (traced.returncode, traced.stdout, traced.stderr) == (plain.returncode, plain.stdout, plain.stderr)
        assert plain.returncode == (3 if case == "error_exit" else 0), plain.stderr
        size = (work / f"{case}.dat").stat().st_size
        assert size == plain_size and size == SIZES.get(case, size)
        (trace,) = traces.glob("iez-trace.*.csv")
        with trace.open(newline="") as fh:
            (row,) = list(csv.DictReader(fh))
        assert Path(row["path"]).name == f"{case}.dat"
        if (int(row["bytes_written"]), int(row["file_size"])) != (size, size):
            missed[case] = (row["bytes_written"], row["file_size"], size)
    assert not missed, f"case: (bytes_written, file_size, real size): {missed}"
