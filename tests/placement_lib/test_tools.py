"""Unmodified tools under libiez: coreutils, tar, Python, fio.

Each tool runs twice in the same directory, plainly and under the library:
exit code, outputs and the files it leaves (modes, sizes, contents) must be
the same, every pinned file must carry exactly the layout stored in the DB
(SQLite and MariaDB), and no other file may carry one.
"""

from __future__ import annotations

import os
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import BACKENDS, MIB, assert_layouts_match_db, counts_rows, layouts_below, pin_cli, pin_layouts

pytestmark = pytest.mark.slow


def _bytes(n: int, seed: int) -> bytes:
    """Deterministic incompressible bytes."""
    import random

    return random.Random(seed).randbytes(n)


def _one_count(state_dir: Path, app: str) -> dict:
    rows = [r for r in counts_rows(state_dir) if r["app"] == app]
    assert len(rows) == 1, f"expected one counts file for {app}, got {rows}"
    return rows[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_touch_places_pinned_files_only(backend, shared_db, runner, state_dir, tmp_path):
    db = shared_db(backend)
    work = tmp_path / "work"
    expected = {str(work / "a"): pin_cli(db, work / "a", MIB, [3, 7, 11])}
    expected.update(pin_layouts(db, {work / "sub" / "c": (2 * MIB, [5])}))

    result = runner.compare(["touch", work / "a", work / "b", work / "sub" / "c"], db, work,
                            setup=lambda w: (w / "sub").mkdir())
    result.assert_same()
    assert result.lib.returncode == 0
    assert layouts_below(work) == expected
    assert_layouts_match_db(db, work)
    row = _one_count(state_dir, "touch")
    assert (row["hits"], row["misses"], row["errors"]) == ("2", "1", "0")
    assert int(row["pid"]) > 0 and row["rank"] == "0"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_dd_writes_into_the_placed_file(backend, shared_db, runner, tmp_path):
    db = shared_db(backend)
    src = tmp_path / "src.bin"
    src.write_bytes(_bytes(MIB, 1))
    work = tmp_path / "work"
    expected = pin_layouts(db, {work / "dd.out": (MIB, [0, 1, 2, 3])})

    result = runner.compare(["dd", f"if={src}", f"of={work / 'dd.out'}", "bs=64K", "count=10", "status=noxfer"],
                            db, work)
    result.assert_same()
    assert result.lib.returncode == 0
    assert (work / "dd.out").read_bytes() == src.read_bytes()[: 10 * 65536]
    assert layouts_below(work) == expected
    assert_layouts_match_db(db, work)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_cp_5mib_to_a_pinned_destination(backend, shared_db, runner, state_dir, tmp_path):
    db = shared_db(backend)
    src = tmp_path / "five.bin"
    src.write_bytes(_bytes(5 * MIB, 2))
    work = tmp_path / "work"
    expected = pin_layouts(db, {work / "copy.bin": (4 * MIB, [9, 2])})

    result = runner.compare(["cp", src, work / "copy.bin"], db, work)
    result.assert_same()
    assert result.lib.returncode == 0
    assert (work / "copy.bin").read_bytes() == src.read_bytes()
    assert layouts_below(work) == expected
    assert_layouts_match_db(db, work)
    row = _one_count(state_dir, "cp")
    assert (row["hits"], row["errors"]) == ("1", "0")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_tar_extract_places_pinned_members(backend, shared_db, runner, tmp_path):
    db = shared_db(backend)
    source = tmp_path / "source" / "data"
    (source / "sub").mkdir(parents=True)
    (source / "x.bin").write_bytes(_bytes(300_000, 3))
    (source / "sub" / "y.txt").write_text("y" * 1000)
    (source / "z.txt").write_text("not pinned\n")
    os.chmod(source / "z.txt", 0o600)
    archive = tmp_path / "data.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(source, arcname="data")
    work = tmp_path / "work"
    expected = pin_layouts(db, {work / "data" / "x.bin": (MIB, [4, 8]),
                                work / "data" / "sub" / "y.txt": (MIB, [12])})

    # relative member names, resolved against the working directory
    result = runner.compare(["tar", "-xf", archive], db, work, cwd=work)
    result.assert_same()
    assert result.lib.returncode == 0
    assert (work / "data" / "x.bin").read_bytes() == (source / "x.bin").read_bytes()
    assert layouts_below(work) == expected
    assert_layouts_match_db(db, work)

    # the same archive with -C: tar resolves members against a directory descriptor
    result = runner.compare(["tar", "-xf", archive, "-C", work], db, work)
    result.assert_same()
    assert layouts_below(work) == expected
    assert_layouts_match_db(db, work)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_python_open_w(backend, shared_db, runner, state_dir, tmp_path):
    db = shared_db(backend)
    work = tmp_path / "work"
    expected = pin_layouts(db, {work / "py.txt": (MIB, [1, 0])})
    script = ("import sys\n"
              "for i, p in enumerate(sys.argv[1:]):\n"
              "    with open(p, 'w') as f:\n"
              "        f.write(f'line {i}\\n' * 1000)\n"
              "print('done', len(sys.argv) - 1)\n")

    result = runner.compare([sys.executable, "-B", "-c", script, work / "py.txt", work / "other.txt"], db, work)
    result.assert_same()
    assert result.lib.stdout == b"done 2\n"
    assert layouts_below(work) == expected
    assert_layouts_match_db(db, work)
    row = _one_count(state_dir, Path(sys.executable).resolve().name)
    assert (row["hits"], row["misses"], row["errors"]) == ("1", "1", "0")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_fio_sequential_write(backend, shared_db, runner, tmp_path):
    db = shared_db(backend)
    work = tmp_path / "work"
    target = work / "fio.dat"
    expected = pin_layouts(db, {target: (MIB, [6, 5, 4])})
    cmd = ["fio", "--name=x", f"--filename={target}", "--rw=write", "--bs=1M", "--size=4M", "--ioengine=psync",
           "--buffer_pattern=0x5a", "--output-format=terse"]

    # fio reports timings, so only its exit code and the files are compared
    result = runner.compare(cmd, db, work)
    result.assert_same(stdout=False, stderr=False)
    assert result.lib.returncode == 0, result.lib.stderr
    assert target.stat().st_size == 4 * MIB
    assert target.read_bytes() == b"\x5a" * (4 * MIB)
    assert layouts_below(work) == expected
    assert_layouts_match_db(db, work)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shell", ["bash", "dash"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_shell_redirections_and_tee(backend, shell, shared_db, runner, tmp_path):
    """`cmd > file`, `>>` and tee: the shell (or its forked child) creates the file."""
    db = shared_db(backend)
    work = tmp_path / "work"
    names = ["builtin.out", "external.out", "append.out", "tee.out"]
    expected = pin_layouts(db, {work / n: (MIB, [i, i + 1]) for i, n in enumerate(names)})
    script = ("set -e; cd \"$1\"; echo builtin > builtin.out; cat /dev/null builtin.out > external.out; "
              "seq 1 100 >> append.out; seq 1 5 | tee tee.out unpinned.out; echo done >&2")
    result = runner.compare([shell, "-c", script, shell, work], db, work)
    result.assert_same()
    assert result.lib.returncode == 0 and result.lib.stderr == b"done\n"
    assert (work / "external.out").read_text() == "builtin\n"
    assert layouts_below(work) == expected
    assert_layouts_match_db(db, work)
