"""The rebalancer's and the mover's Lustre steps: the ``lfs`` commands they run and what they make of the answers.

This machine has no Lustre, so ``lfs`` here is a stand-in script on PATH that logs its arguments and
answers as the real one does (exit 0, or a non-zero exit with Lustre's message on stderr); the checks
around it (the plan's version, local writers, the journal) run for real. Lustre itself is only told
apart by ``statfs``, so apply() is pointed at the Lustre step by replacing that one test.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from iez.layout import lustre
from iez.layout.model import Layout
from iez.move import migrate as migrate_mod
from iez.move.migrate import Identity, Skipped, lfs_migrate_argv, migrate
from iez.move.placement import Placer
from iez.rebalance.apply import apply

MiB = 1 << 20


def fake_lfs(tmp: Path, exit_code: int = 0, stderr: str = "", create: bool = False) -> Path:
    """An ``lfs`` on a private PATH directory that appends its argv (one JSON list a line) to tmp/lfs.log."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "lfs"
    script.write_text(f"""#!{sys.executable}
import json, sys
with open({str(tmp / 'lfs.log')!r}, "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if {create!r} and sys.argv[1] == "setstripe":
    open(sys.argv[-1], "x").close()
sys.stderr.write({stderr!r})
sys.exit({exit_code})
""")
    script.chmod(0o755)
    return bindir


def calls(tmp: Path) -> list[list[str]]:
    log = tmp / "lfs.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "f"
    path.parent.mkdir()
    path.write_bytes(os.urandom(3 * MiB))
    return path


def test_lfs_migrate_command_is_non_blocking_with_count_size_osts_and_pool():
    assert lfs_migrate_argv("/l/f", Layout(MiB, (7, 2, 9))) == [
        "lfs", "migrate", "--non-block", "-c", "3", "-S", str(MiB), "-o", "7,2,9", "/l/f"]
    assert lfs_migrate_argv("/l/f", Layout(4 * MiB, (1,), "flash"), "/usr/bin/lfs") == [
        "/usr/bin/lfs", "migrate", "--non-block", "-c", "1", "-S", str(4 * MiB), "-o", "1", "-p", "flash", "/l/f"]


def test_migrate_on_lustre_runs_lfs_migrate_and_keeps_the_inode(tmp_path, a_file, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_lfs(tmp_path)}:{os.environ['PATH']}")
    before = a_file.stat()
    data = a_file.read_bytes()
    ino = migrate(str(a_file), Layout(MiB, (3, 5)), Identity.of(before), on_lustre=True)
    assert ino == before.st_ino
    assert calls(tmp_path) == [["migrate", "--non-block", "-c", "2", "-S", str(MiB), "-o", "3,5", str(a_file)]]
    assert a_file.read_bytes() == data
    assert sorted(p.name for p in a_file.parent.iterdir()) == ["f"]  # no copy beside it: Lustre swaps in place


def test_a_refused_lfs_migrate_is_a_skip_that_says_why_and_leaves_the_file(tmp_path, a_file, monkeypatch):
    bindir = fake_lfs(tmp_path, 16, "lfs migrate: cannot get open lease for '/l/f': Device or resource busy\n"
                      "error: lfs migrate: /l/f: cannot swap layout: Device or resource busy\n")
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    data = a_file.read_bytes()
    with pytest.raises(Skipped) as why:
        migrate(str(a_file), Layout(MiB, (3,)), on_lustre=True)
    assert str(a_file) in str(why.value) and "exit 16" in str(why.value)
    assert "cannot swap layout: Device or resource busy" in str(why.value)
    assert a_file.read_bytes() == data


def test_a_file_changed_since_the_plan_or_open_for_writing_is_skipped_before_lfs_runs(tmp_path, a_file,
                                                                                      monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_lfs(tmp_path)}:{os.environ['PATH']}")
    seen = Identity.of(a_file.stat())
    with open(a_file, "ab") as out:
        out.write(b"more")
    with pytest.raises(Skipped, match="changed since the plan"):
        migrate(str(a_file), Layout(MiB, (3,)), seen, on_lustre=True)
    writer = subprocess.Popen([sys.executable, "-c", "import sys; f = open(sys.argv[1], 'r+b'); "
                               "print('open', flush=True); sys.stdin.read()", str(a_file)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "open"
        with pytest.raises(Skipped, match=rf"open for writing \(pid {writer.pid}\)"):
            migrate(str(a_file), Layout(MiB, (3,)), on_lustre=True)
    finally:
        writer.communicate("")
    assert calls(tmp_path) == []


def test_no_lfs_on_lustre_is_an_error_naming_the_file(tmp_path, a_file, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(OSError, match=rf"{a_file} is on Lustre but there is no lfs command"):
        migrate(str(a_file), Layout(MiB, (3,)), on_lustre=True)


def test_a_file_that_already_has_the_target_layout_is_not_migrated_again(tmp_path, a_file, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_lfs(tmp_path)}:{os.environ['PATH']}")
    monkeypatch.setattr(lustre, "get_stripe", lambda p: Layout(MiB, (3, 5)) if p == str(a_file) else None)
    assert migrate(str(a_file), Layout(MiB, (3, 5)), on_lustre=True) == a_file.stat().st_ino
    assert calls(tmp_path) == []
    migrate(str(a_file), Layout(MiB, (5, 3)), on_lustre=True)  # the same OSTs in another order: a new layout
    assert calls(tmp_path)[0][-3:] == ["-o", "5,3", str(a_file)]


def test_apply_on_lustre_journals_each_migration_once(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_lfs(tmp_path)}:{os.environ['PATH']}")
    monkeypatch.setattr(migrate_mod.lustre, "is_lustre", lambda p: True)
    monkeypatch.setattr(migrate_mod.lustre, "get_stripe", lambda p: None)
    files = []
    for k in range(3):
        path = tmp_path / f"g{k}"
        path.write_bytes(os.urandom(MiB + k))
        files.append(path)
    moves = [{"file": str(p), "from": [0], "to": [k + 1], "stripe_size": MiB, "bytes": p.stat().st_size,
              "ino": p.stat().st_ino, "mtime_ns": p.stat().st_mtime_ns} for k, p in enumerate(files)]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"moves": moves}))
    report = apply(str(plan))
    assert (report.moved, report.skipped, report.bytes_moved) == (3, [], sum(m["bytes"] for m in moves))
    assert [c[-3:] for c in calls(tmp_path)] == [["-o", str(k + 1), str(p)] for k, p in enumerate(files)]
    again = apply(str(plan))
    assert (again.moved, again.already) == (0, 3) and len(calls(tmp_path)) == 3


def test_mover_places_a_destination_on_lustre_with_lfs_setstripe(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_lfs(tmp_path, create=True)}:{os.environ['PATH']}")
    dst = tmp_path / "out"
    Placer("lustre", None, "iez").apply(str(dst), Layout(2 * MiB, (4, 0, 6)))
    assert calls(tmp_path) == [["setstripe", "-S", str(2 * MiB), "-c", "3", "-o", "4,0,6", str(dst)]]
    assert stat.S_ISREG(dst.stat().st_mode)


def test_mover_says_which_lfs_setstripe_failed(tmp_path, monkeypatch):
    bindir = fake_lfs(tmp_path, 22, "lfs setstripe: cannot create composite file 'x': Invalid argument\n")
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    with pytest.raises(OSError, match=r"setstripe -S 1048576 -c 1 -o 9 .*failed: lfs setstripe: cannot create"):
        Placer("lustre", None, "iez").apply(str(tmp_path / "x"), Layout(MiB, (9,)))


# ---- every layout kind on Lustre (issue 24): composite layouts through lfs migrate, mirrors through extend/split

def pfl() -> Layout:
    from iez.model import EOF_END, Component

    return Layout.from_components([
        Component(0, MiB, 0, MiB, None, (), True),  # Data-on-MDT
        Component(MiB, 64 * MiB, 2, MiB, "flash", (4, 6)),
        Component(64 * MiB, 256 * MiB, 4, 4 * MiB, None, (1, 1, 3, 3), False, True),  # overstriped
        Component(256 * MiB, EOF_END, 8, 4 * MiB),  # not instantiated: Lustre chooses its OSTs
    ])


def test_lfs_migrate_command_of_a_composite_layout_spells_out_each_component():
    assert lfs_migrate_argv("/l/f", pfl()) == [
        "lfs", "migrate", "--non-block", "-E", str(MiB), "-L", "mdt",
        "-E", str(64 * MiB), "-c", "2", "-S", str(MiB), "-o", "4,6", "-p", "flash",
        "-E", str(256 * MiB), "-C", "4", "-S", str(4 * MiB), "-o", "1,1,3,3", "-p", "",
        "-E", "-1", "-c", "8", "-S", str(4 * MiB), "-p", "", "/l/f"]  # lfs would carry "flash" over


def test_migrate_on_lustre_gives_a_composite_file_its_layout_with_one_lfs_migrate(tmp_path, a_file, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_lfs(tmp_path)}:{os.environ['PATH']}")
    monkeypatch.setattr(lustre, "get_stripe", lambda p: None)
    ino = migrate(str(a_file), pfl(), Identity.of(a_file.stat()), on_lustre=True)
    assert ino == a_file.stat().st_ino
    (call,) = calls(tmp_path)
    assert call[:3] == ["migrate", "--non-block", "-E"] and call[-1] == str(a_file)
    monkeypatch.setattr(lustre, "get_stripe", lambda p: pfl())  # already there (a rerun after a kill): no call
    migrate(str(a_file), pfl(), on_lustre=True)
    assert len(calls(tmp_path)) == 1


def lov_with_mirror_ids(ids: list[int]) -> bytes:
    """A lov_comp_md_v1 with one plain component per mirror, mirror IDs ``ids`` (lcme_id bits 16..30)."""
    blobs = [lustre.V1_HEADER.pack(lustre.LOV_USER_MAGIC_V1, lustre.LOV_PATTERN_RAID0, bytes(16), MiB, 1, 0)
             + lustre.OST_DATA.pack(bytes(16), 0, k) for k in range(len(ids))]
    offset = lustre.COMP_HEADER.size + len(ids) * lustre.COMP_ENTRY.size
    size = offset + sum(map(len, blobs))
    out = bytearray(lustre.COMP_HEADER.pack(lustre.LOV_USER_MAGIC_COMP_V1, size, 0, 0, len(ids), len(ids) - 1, 0,
                                            bytes(13)))
    for mid, blob in zip(ids, blobs):
        out += lustre.COMP_ENTRY.pack(mid << 16 | 1, lustre.LCME_FL_INIT, 0, lustre.LUSTRE_EOF, offset, len(blob),
                                      0, 0, bytes(4))
        offset += len(blob)
    return bytes(out) + b"".join(blobs)


def test_mirror_ids_are_read_from_the_component_ids():
    raw = lov_with_mirror_ids([1, 3])
    assert migrate_mod.mirror_ids_of(raw) == [1, 3]
    assert lustre.parse_lov_user_md(raw, "f").mirrors[1][0].osts == (1,)  # the same buffer, as iez reads it


@pytest.mark.slow
def test_a_mirror_moves_on_lustre_by_extend_then_split_and_a_rerun_does_neither_again(tmp_path, a_file,
                                                                                      monkeypatch):
    from iez.model import EOF_END, Component

    def mirrored(*osts):
        return Layout.from_mirrors([[Component(0, EOF_END, len(o), MiB, None, o)] for o in osts], 0)

    monkeypatch.setenv("PATH", f"{fake_lfs(tmp_path)}:{os.environ['PATH']}")
    now = {"layout": mirrored((2, 3), (6, 7)), "ids": [1, 2]}
    monkeypatch.setattr(lustre, "get_stripe", lambda p: now["layout"])
    monkeypatch.setattr(migrate_mod, "mirror_ids", lambda p: now["ids"])
    target = mirrored((5, 3), (6, 7))
    assert migrate(str(a_file), target, on_lustre=True) == a_file.stat().st_ino
    assert calls(tmp_path) == [
        ["mirror", "extend", "-N", "-c", "2", "-S", str(MiB), "-o", "5,3", str(a_file)],
        ["mirror", "split", "-d", "--mirror-id", "1", str(a_file)]]
    # killed after the extend: the new copy is there (appended, mirror id 3), the old one too: only the split
    now.update(layout=mirrored((2, 3), (6, 7), (5, 3)), ids=[1, 2, 3])
    migrate(str(a_file), target, on_lustre=True)
    assert calls(tmp_path)[2:] == [["mirror", "split", "-d", "--mirror-id", "1", str(a_file)]]
    # done: the layout now holds the target's copies (in Lustre's order): nothing runs
    now.update(layout=mirrored((6, 7), (5, 3)), ids=[2, 3])
    migrate(str(a_file), target, on_lustre=True)
    assert len(calls(tmp_path)) == 3
