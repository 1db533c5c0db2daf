"""Files that reach their name by a rename, or through a symbolic link (issue 31 item 7).

- rsync (and editors, scripts, mkstemp callers) write ``.NAME.XXXXXX``, ``NAME.tmp``, ``NAME~``, ``.#NAME`` or
  ``NAME.XXXXXX`` and rename it: a create that misses under such a name takes the final name's layout
  (placement_lib/README.md "Temporary names");
- tracing follows ``rename``/``renameat``/``renameat2``: the trace, and what ``iez trace parse`` learns from it,
  holds the final name with the bytes written under the temporary one;
- ``open(O_CREAT)`` through a dangling symbolic link creates, and places, the link's target.

Every run is compared with the plain run: exit code, output and the files left behind.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import MIB, counts_rows, layout_text, layouts_below, run_cmd
from iez.maps import MapEntry, write_map
from iez.trace.parse import TraceDir, merge_requests

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

RSYNC = shutil.which("rsync")


def make_map(path: Path, layouts: dict[str, tuple[int, list[int]]]) -> dict[str, str]:
    write_map(path, "renames", [MapEntry(p, s, len(o), " ".join(map(str, o))) for p, (s, o) in layouts.items()])
    return {p: layout_text(s, o) for p, (s, o) in layouts.items()}


def source_tree(src: Path, n: int) -> list[str]:
    """n files below src in 16 directories, names with dots, tildes and leading dots among them."""
    names = []
    for i in range(n):
        stem = ["f{:03d}.dat", ".hidden{:03d}", "a.b.{:03d}.c", "n{:03d}.tmp", "plain{:03d}", "x{:03d}~"][i % 6]
        rel = f"d{i % 16:02d}/{stem.format(i)}"
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(os.urandom(1 + i * 37 % 5000))
        names.append(rel)
    for d in [src, *src.iterdir()]:
        os.utime(d, (1e9, 1e9))  # rsync -i lists "./" by mtime, to the second: the same in every run
    return names


@pytest.mark.skipif(RSYNC is None, reason="rsync is not installed (apt-get install -y rsync)")
def test_rsync_places_every_file_it_writes_under_a_temporary_name(runner, state_dir, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    names = source_tree(src, 330)
    expected = make_map(tmp_path / "map.cdb", {str(dst / n): (MIB * (1 + i % 4), [i % 8, 8 + i % 8])
                                               for i, n in enumerate(names)})
    cmd = [RSYNC, "-ai", f"{src}/", f"{dst}/"]
    result = runner.compare(cmd, None, dst, IEZ_MAP=tmp_path / "map.cdb", IEZ_INCLUDE=dst)
    result.assert_same()
    assert result.plain.returncode == 0 and result.plain.stdout.count(b">f+++++++++") == len(names)
    placed = layouts_below(dst)
    assert len(placed) == len(names) == 330  # rsync: every destination file placed
    assert placed == expected
    rows = counts_rows(state_dir)
    assert sum(int(r["hits"]) for r in rows) == len(names)
    assert sum(int(r["errors"]) + int(r["skips"]) for r in rows) == 0


TEMP_WRITER = r"""
import os, sys
work = sys.argv[1]
def atomic(tmp, final, data):
    with open(os.path.join(work, tmp), "wb") as fh:
        fh.write(data)
    os.replace(os.path.join(work, tmp), os.path.join(work, final))
atomic("a.txt.tmp", "a.txt", b"a" * 100)
atomic("b.cfg~", "b.cfg", b"b" * 200)
atomic(".#c.log", "c.log", b"c" * 300)
atomic("d.bin.Zq09Ax", "d.bin", b"d" * 400)
atomic(".e.h5.Ab3xY7", "e.h5", b"e" * 500)
atomic("own.tmp", "own", b"o" * 10)      # a temporary name with its own layout keeps it
atomic("g.tmp", "g", b"g" * 10)          # a final name with no layout: nothing placed
open(os.path.join(work, "h.tmp.tmp"), "wb").close()  # one pattern at a time: h.tmp only
print("done")
"""


def test_temporary_names_of_atomic_writes_take_the_final_names_layout(runner, state_dir, tmp_path):
    work = tmp_path / "work"
    finals = ["a.txt", "b.cfg", "c.log", "d.bin", "e.h5", "own", "own.tmp", "h"]
    layouts = {str(work / n): (MIB, [i, i + 10]) for i, n in enumerate(finals)}
    expected = make_map(tmp_path / "map.cdb", layouts)
    script = tmp_path / "writer.py"
    script.write_text(TEMP_WRITER)
    result = runner.compare([sys.executable, script, work], None, work, IEZ_MAP=tmp_path / "map.cdb",
                            IEZ_INCLUDE=work)
    result.assert_same()
    assert result.lib.stdout == b"done\n"
    placed = layouts_below(work)
    assert placed == {str(work / n): expected[str(work / n)] for n in ["a.txt", "b.cfg", "c.log", "d.bin", "e.h5"]} | {
        str(work / "own"): expected[str(work / "own.tmp")]}
    rows = counts_rows(state_dir)
    assert [(int(r["hits"]), int(r["misses"])) for r in rows] == [(6, 2)]


SYMLINKS = r"""
import errno, os, sys
work = sys.argv[1]
os.chdir(work)
def attempt(name, path, flags):
    try:
        fd = os.open(path, flags, 0o640)
        print(name, "ok", oct(os.fstat(fd).st_mode), os.readlink(f"/proc/self/fd/{fd}").replace(work, "W"))
        os.close(fd)
    except OSError as err:
        print(name, errno.errorcode[err.errno])
C, W = os.O_CREAT, os.O_WRONLY
attempt("relative", "d/link", C | W)
attempt("up", "d/up", C | W | os.O_TRUNC)
attempt("absolute", "d/abs", C | os.O_RDWR)
attempt("chain", "d/chain", C | W)
attempt("at", "link_at", C | W)
attempt("nofollow", "d/nf", C | W | os.O_NOFOLLOW)
attempt("excl", "d/ex", C | W | os.O_EXCL)
attempt("nodir", "d/nodir", C | W)
attempt("existing", "d/to_existing", C | W)
attempt("slash", "d/slash", C | W)
attempt("sticky", "sticky/other", C | W)
attempt("undo", "d/undo", C | W | os.O_DIRECTORY)  # fails after a pre-created target: removed again
with open("d/via_fopen", "w") as fh:
    fh.write("x")
dirfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY)
fd = os.open("at_link", C | W, 0o600, dir_fd=dirfd)
print("openat", oct(os.fstat(fd).st_mode))
"""


def symlink_setup(work: Path) -> None:
    d, o = work / "d", work / "o"
    d.mkdir()
    o.mkdir()
    (d / "link").symlink_to("t_rel")
    (d / "up").symlink_to("../o/t_up")
    (d / "abs").symlink_to(work / "o" / "t_abs")
    (d / "chain").symlink_to("chain2")
    (d / "chain2").symlink_to("../o/chain3")
    (o / "chain3").symlink_to("t_chain")
    (work / "link_at").symlink_to("d/t_at")
    (d / "nf").symlink_to("t_nf")
    (d / "ex").symlink_to("t_ex")
    (d / "nodir").symlink_to("missing/t_nodir")
    (d / "existing").write_text("old")
    (d / "to_existing").symlink_to("existing")
    (d / "slash").symlink_to("t_slash/")
    (d / "via_fopen").symlink_to("t_fopen")
    (d / "at_link").symlink_to("../o/t_openat")
    (d / "undo").symlink_to("t_undo")
    sticky = work / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    (sticky / "other").symlink_to("t_sticky")
    os.lchown(sticky / "other", 4242, 4242)  # another user's link in a sticky world-writable directory


@pytest.mark.skipif(os.geteuid() != 0, reason="the sticky-directory case needs lchown to another user")
@pytest.mark.parametrize("create_path", ["own-open", "precreate"])
def test_creates_through_dangling_symbolic_links_place_the_target(create_path, runner, state_dir, tmp_path):
    work = tmp_path / "work"
    targets = ["d/t_rel", "o/t_up", "o/t_abs", "o/t_chain", "d/t_at", "d/t_nf", "d/t_ex", "d/missing/t_nodir",
               "d/existing", "d/t_slash", "d/t_fopen", "o/t_openat", "d/t_undo"]
    expected = make_map(tmp_path / "map.cdb", {str(work / t): (MIB, [i, 20 + i]) for i, t in enumerate(targets)})
    # the link's own name has another layout: the target's is the one applied
    script = tmp_path / "links.py"
    script.write_text(SYMLINKS)
    extra = {"IEZ_ASSUME_LUSTRE": "1"} if create_path == "precreate" else {}
    result = runner.compare([sys.executable, script, work], None, work, setup=symlink_setup,
                            IEZ_MAP=tmp_path / "map.cdb", IEZ_INCLUDE=work, **extra)
    result.assert_same()
    out = result.lib.stdout.decode()
    assert "nofollow ELOOP" in out and "excl EEXIST" in out and "nodir ENOENT" in out and "slash EISDIR" in out
    assert "undo EINVAL" in out and not (work / "d" / "t_undo").exists()
    assert "relative ok 0o100640 W/d/t_rel" in out
    created = ["d/t_rel", "o/t_up", "o/t_abs", "o/t_chain", "d/t_at", "d/t_fopen", "o/t_openat"]
    assert layouts_below(work) == {str(work / t): expected[str(work / t)] for t in created}
    rows = counts_rows(state_dir)
    # the pre-creating path counts the target it made for "undo" before the application's call failed
    assert sum(int(r["hits"]) for r in rows) == len(created) + (create_path == "precreate")


TRACED = r"""
import os, sys
work = sys.argv[1]
with open(os.path.join(work, "out.tmp"), "wb") as fh:
    fh.write(b"x" * 5000)
os.replace(os.path.join(work, "out.tmp"), os.path.join(work, "out"))
with open(os.path.join(work, "kept"), "wb") as fh:
    fh.write(b"k" * 700)
fd = os.open(os.path.join(work, "open.tmp"), os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"o" * 900)
os.rename(os.path.join(work, "open.tmp"), os.path.join(work, "sub", "open"))  # renamed while open
os.write(fd, b"o" * 100)
os.close(fd)
dfd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
with open(os.path.join(work, "at.part"), "wb") as fh:
    fh.write(b"a" * 300)
os.rename("at.part", "at", src_dir_fd=dfd, dst_dir_fd=dfd)
"""


@pytest.mark.skipif(RSYNC is None, reason="rsync is not installed (apt-get install -y rsync)")
def test_traces_hold_the_final_names_of_renamed_files(libiez, tmp_path):
    work, traces, src, dst = tmp_path / "work", tmp_path / "traces", tmp_path / "src", tmp_path / "dst"
    for d in (work / "sub", traces, src):
        d.mkdir(parents=True)
    names = source_tree(src, 40)
    script = tmp_path / "traced.py"
    script.write_text(TRACED)
    env = {"LD_PRELOAD": str(libiez), "IEZ_MODE": "trace", "IEZ_TRACE_DIR": str(traces),
           "IEZ_STATE_DIR": str(tmp_path / "state"), "IEZ_INCLUDE": f"{work}:{dst}"}
    py = run_cmd([sys.executable, script, work], env)
    assert py.returncode == 0, py.stderr
    rs = run_cmd([RSYNC, "-a", f"{src}/", f"{dst}/"], env)
    plain = run_cmd([RSYNC, "-a", f"{src}/", f"{tmp_path / 'plain'}/"])
    assert (rs.returncode, rs.stdout, rs.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    rows = TraceDir(traces).rows
    finals = {str(work / n) for n in ("out", "kept", "sub/open", "at")} | {str(dst / n) for n in names}
    assert {r.path for r in rows} == finals  # no temporary name left in the trace
    learnt = {r.file: r.write_bytes for r in merge_requests(rows)}
    assert learnt[str(work / "out")] == 5000 and learnt[str(work / "kept")] == 700
    assert learnt[str(work / "sub" / "open")] == 1000 and learnt[str(work / "at")] == 300
    for n in names:
        assert learnt[str(dst / n)] == (src / n).stat().st_size
    assert set(learnt) == finals


def test_renames_outside_tracing_are_the_plain_call(runner, tmp_path):
    """rename/renameat/renameat2 with every outcome: results and errno as plain, placement or not."""
    script = tmp_path / "renames.py"
    script.write_text(r"""
import ctypes, errno, os, sys
os.chdir(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
open("a", "w").close(); open("b", "w").close(); os.mkdir("dir")
def show(name, rc):
    print(name, rc, errno.errorcode.get(ctypes.get_errno(), 0) if rc else "")
    ctypes.set_errno(0)
show("rename", libc.rename(b"a", b"c"))
show("missing", libc.rename(b"nothere", b"x"))
show("isdir", libc.rename(b"c", b"dir"))
show("renameat", libc.renameat(-100, b"c", -100, b"d"))
show("badfd", libc.renameat(999, b"d", -100, b"e"))
show("noreplace", libc.renameat2(-100, b"d", -100, b"b", 1))
show("exchange", libc.renameat2(-100, b"d", -100, b"b", 2))
show("badflags", libc.renameat2(-100, b"d", -100, b"f", 1 | 2))
""")
    work = tmp_path / "w"
    for mode in ("place", "trace", "off"):
        extra = {"IEZ_MODE": mode, "IEZ_INCLUDE": work}
        if mode == "trace":
            extra["IEZ_TRACE_DIR"] = tmp_path / "t"
            (tmp_path / "t").mkdir(exist_ok=True)
        result = runner.compare([sys.executable, script, work], None, work, **extra)
        result.assert_same()
        assert b"missing -1 ENOENT" in result.lib.stdout and b"exchange 0" in result.lib.stdout


def test_rsync_output_is_unchanged_with_a_db(runner, shared_db, tmp_path):
    """The same with lookups in a SQLite DB: every miss tries at most the temporary name's final names."""
    if RSYNC is None:
        pytest.skip("rsync is not installed")
    from conftest import pin_layouts

    db = shared_db("sqlite")
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    names = source_tree(src, 60)
    expected = pin_layouts(db, {dst / n: (MIB, [i % 5, 5 + i % 5]) for i, n in enumerate(names)})
    result = runner.compare([RSYNC, "-a", "--delay-updates", f"{src}/", f"{dst}/"], db, dst, IEZ_INCLUDE=dst)
    result.assert_same()
    assert layouts_below(dst) == {str(k): v for k, v in expected.items()}
