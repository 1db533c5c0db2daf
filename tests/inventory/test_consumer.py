"""The changelog consumer on a real database (SQLite and MariaDB): records applied in order, its position
committed with them, cleared after, kept across kill -9; a hole rescanned; a bad record an error."""

from __future__ import annotations

import gc
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iez.inventory.changelog import fid_of_inode
from iez.inventory.consumer import Consumer
from iez.inventory.emulated_mdt import EMULATED_USER, ChangelogWriter, changelog_path
from iez.inventory.readers import EmulatedChangelog, LustreChangelog, read_users
from iez.inventory.scan import scan

from invtools import empty_followed, held, lfs_calls, position, put, stand_in_lfs, tree
from invtools import cluster, engine, inv_db  # noqa: F401 - fixtures

MDT = "iezfs-MDT0000"


def consumer(engine, log: Path, data: Path, **options) -> Consumer:
    return Consumer(engine, EmulatedChangelog(log, EMULATED_USER), MDT, EMULATED_USER, [str(data)], **options)


def test_creates_renames_unlinks_truncates_and_layout_changes_are_applied_in_order(engine, tmp_path):
    rng = random.Random(1)
    data = tmp_path / "data"
    for n in range(6):
        put(data / "a" / f"f{n}", 1000 * (n + 1), (n % 3,), rng)
    scan(engine, [str(data)], workers=1)
    log = tmp_path / "changelog"
    writer = ChangelogWriter([str(data)], log)
    put(data / "a" / "new", 5000, (1, 2), rng)  # CREAT, SATTR (its layout), CLOSE
    os.rename(data / "a" / "f0", data / "b-moved")  # RENME across directories
    os.unlink(data / "a" / "f1")  # UNLNK
    os.truncate(data / "a" / "f2", 10)  # MTIME (a size change without a close)
    os.mkdir(data / "c")
    (data / "c" / "x").write_bytes(b"abc")  # MKDIR, CREAT, CLOSE
    os.rename(data / "a" / "f3", data / "a" / "f4")  # RENME over another file: f4 goes
    os.setxattr(data / "a" / "f5", "user.iez.layout", b"version=1 stripe_size=65536 stripe_count=1 osts=3")
    os.rename(data / "c", data / "a" / "c2")  # a directory moves: paths below it follow
    writer.poll()
    writer.close()
    report = consumer(engine, log, data).run_once()
    assert report.records >= 9 and report.rescans == 0
    assert held(engine) == tree(data)
    assert held(engine)[f"{data}/a/f5"][1] == "version=1 stripe_size=65536 stripe_count=1 osts=3"
    assert position(engine, MDT)[:2] == (report.position, report.records)


def test_a_batch_commits_its_position_and_the_log_is_cleared_up_to_it(engine, tmp_path):
    rng = random.Random(2)
    data, log, writer = empty_followed(engine, tmp_path)
    for n in range(40):
        put(data / f"f{n}", 100, (0,), rng)
    writer.poll()
    report = consumer(engine, log, data, batch=7).run_once()
    assert report.position == writer.index
    assert read_users(log.with_name(log.name + ".users")) == {EMULATED_USER: writer.index}
    assert consumer(engine, log, data).run_once().records == 0  # nothing applied twice
    writer.close()


def test_a_read_pauses_the_cyclic_garbage_collector_and_restores_it(engine, tmp_path, monkeypatch):
    """The collector is off while the records are applied (its passes over the batch's objects were a tenth
    of the ingest) and as it was after the read, also after one that failed; left off when it was off."""
    rng = random.Random(3)
    data, log, writer = empty_followed(engine, tmp_path)
    for n in range(5):
        put(data / f"f{n}", 100, (0,), rng)
    writer.poll()
    seen: list[bool] = []
    apply = Consumer._apply
    monkeypatch.setattr(Consumer, "_apply", lambda self, *a: (seen.append(gc.isenabled()), apply(self, *a))[1])
    assert gc.isenabled()
    assert consumer(engine, log, data, batch=2).run_once().records == writer.index
    assert seen and not any(seen) and gc.isenabled()
    put(data / "g", 100, (0,), rng)
    writer.poll()
    writer.close()

    def fail(self, *a):
        raise RuntimeError("refused")

    monkeypatch.setattr(Consumer, "_apply", fail)
    with pytest.raises(RuntimeError, match="refused"):
        consumer(engine, log, data).run_once()
    assert gc.isenabled()
    gc.disable()
    try:
        monkeypatch.setattr(Consumer, "_apply", lambda self, *a: apply(self, *a))
        assert consumer(engine, log, data).run_once().position == writer.index
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.slow
def test_changelog_clear_runs_through_lfs_with_the_committed_position(engine, tmp_path, monkeypatch):
    rng = random.Random(3)
    data = tmp_path / "lustre"
    put(data / "d" / "old", 2000, (0,), rng)
    scan(engine, [str(data)], workers=1)
    log = tmp_path / "records"
    writer = ChangelogWriter([str(data)], log)
    put(data / "d" / "new", 3000, (1,), rng)
    os.rename(data / "d" / "old", data / "renamed")
    writer.poll()
    writer.close()
    monkeypatch.setenv("PATH", f"{stand_in_lfs(tmp_path, log)}:{os.environ['PATH']}")
    report = Consumer(engine, LustreChangelog("lustre-MDT0000", "cl1"), "lustre-MDT0000", "cl1", [str(data)],
                      lustre_mount=str(data)).run_once()
    committed = position(engine, "lustre-MDT0000")[0]
    assert committed == report.position == writer.index
    calls = lfs_calls(tmp_path)
    assert calls[0] == ["changelog", "lustre-MDT0000", "1"]
    assert ["changelog_clear", "lustre-MDT0000", "cl1", str(committed)] in calls
    assert any(c[0] == "fid2path" and c[1] == str(data) for c in calls)  # files found by FID, as on Lustre
    assert held(engine) == tree(data)


@pytest.mark.slow
def test_position_survives_kill_9_and_no_record_is_applied_twice_or_lost(inv_db, engine, cluster):
    rng = random.Random(4)
    data = cluster / "data"
    scan(engine, [str(data)], workers=1)
    log = changelog_path(cluster, "iezfs")
    writer = ChangelogWriter([str(data)], log)
    for n in range(1500):
        (data / f"d{n % 10}").mkdir(exist_ok=True)
        (data / f"d{n % 10}" / f"f{n}").write_bytes(rng.randbytes(rng.randint(0, 3000)))
        if n % 300 == 0:
            writer.poll()
    for n in range(0, 1500, 3):
        os.rename(data / f"d{n % 10}" / f"f{n}", data / f"d{(n + 1) % 10}" / f"r{n}")
    for n in range(1, 1500, 3):
        os.unlink(data / f"d{n % 10}" / f"f{n}")
    writer.poll()
    writer.close()
    total = writer.index
    argv = [sys.executable, "-m", "iez.cli", "inventory", "follow", "--once", "--cluster", str(cluster),
            "--db", inv_db, "--batch", "50"]
    for attempt in range(2):  # killed twice in the middle, then let finish
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while position(engine, MDT)[0] < (attempt + 1) * total // 3 and child.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert 0 < position(engine, MDT)[0] < total, "killed before it committed anything, or after the end"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    at, applied, rescans = position(engine, MDT)
    assert at == total and rescans == 0
    assert applied == total  # every record counted once: none applied twice, none skipped
    assert held(engine) == tree(data)


@pytest.mark.slow
def test_a_malformed_record_stops_the_consumer_naming_it_and_nothing_after_it_is_lost(inv_db, engine, cluster):
    data = cluster / "data"
    scan(engine, [str(data)], workers=1)
    log = changelog_path(cluster, "iezfs")
    writer = ChangelogWriter([str(data)], log)
    (data / "a").write_bytes(b"1")
    writer.poll()
    good = writer.index
    writer.close()
    with open(log, "a") as out:
        out.write(f"{good + 1} 01CREAT garbage\n")
        out.write(f"{good + 2} 11CLOSE 13:32:07.3 2023.05.10 0x0 t=[{fid_of_inode(1)}] ef=0xf u=0:0 nid=0@lo\n")
    argv = [sys.executable, "-m", "iez.cli", "inventory", "follow", "--once", "--cluster", str(cluster),
            "--db", inv_db]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"record {good + 1}: not a changelog record" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert position(engine, MDT)[0] < good + 1  # the bad record and those after it wait for a fix


@pytest.mark.slow
def test_a_hole_in_record_numbers_is_rescanned_not_trusted(engine, tmp_path):
    data, log, writer = empty_followed(engine, tmp_path)
    (data / "a").write_bytes(b"12")
    writer.poll()
    assert consumer(engine, log, data).run_once().rescans == 0
    writer.index += 100  # records the consumer never saw (purged from a full changelog)
    (data / "unseen").write_bytes(b"xyz")  # created while its records were lost ...
    os.unlink(data / "a")
    time.sleep(0.05)
    writer.inotify.read()  # ... and their events with them
    (data / "b").write_bytes(b"1")
    writer.poll()
    writer.close()
    report = consumer(engine, log, data).run_once()
    assert report.rescans == 1 and "are missing" in report.notes[0]
    assert held(engine) == tree(data)
    assert position(engine, MDT)[2] == 1


@pytest.mark.slow
def test_a_lost_events_mark_is_rescanned(engine, tmp_path):
    data, log, writer = empty_followed(engine, tmp_path)
    (data / "a").write_bytes(b"12")
    writer.poll()
    writer.close()
    (data / "while-down").write_bytes(b"no writer saw this")
    writer = ChangelogWriter([str(data)], log)  # a restarted emulated MDT says it was blind meanwhile
    writer.close()
    report = consumer(engine, log, data).run_once()
    assert report.rescans == 1 and "lost events" in report.notes[0]
    assert held(engine) == tree(data)


def test_following_a_tree_never_scanned_seeds_it_first(engine, tmp_path):
    rng = random.Random(6)
    data = tmp_path / "data"
    put(data / "before", 100, (0,), rng)
    log = tmp_path / "changelog"
    writer = ChangelogWriter([str(data)], log)
    put(data / "after", 200, (1,), rng)
    writer.poll()
    writer.close()
    report = consumer(engine, log, data).run_once()
    assert "seeded" in report.notes[0]
    assert held(engine) == tree(data)


@pytest.mark.slow
def test_names_sql_quotes_are_kept_exactly(engine, tmp_path):
    """Names are written as SQL literals built by the inventory itself on MariaDB (a column at a time):
    quotes, backslashes, percent signs, non-ASCII and control characters come back byte for byte."""
    rng = random.Random(7)
    data, log, writer = empty_followed(engine, tmp_path)
    names = ["it's", "back\\slash", "100%s", "café", 'say "hi"', "tab\there", "plain", "x'; DROP TABLE inv_files; --"]
    for n, name in enumerate(names):
        put(data / "d" / name, 10 + n, (n % 3,), rng)
    writer.poll()
    writer.close()
    report = consumer(engine, log, data).run_once()
    assert report.rescans == 0
    assert held(engine) == tree(data)
    assert sorted(p.rsplit("/", 1)[1] for p in held(engine)) == sorted(names)


def test_show_counts_files_bytes_per_ost_roots_and_the_position(engine, tmp_path):
    """What ``iez inventory show`` prints (``summary``): files and bytes, stripe objects per OST, the scanned root
    and the consumer's position with the records it applied."""
    from iez.inventory.store import summary

    rng = random.Random(8)
    data, log, writer = empty_followed(engine, tmp_path)
    put(data / "a", 3 * 65536, (0, 1), rng)  # RAID0 of 64 KiB stripes: 128 KiB on OST 0, 64 KiB on OST 1
    put(data / "b", 1000, (1,), rng)
    writer.poll()
    writer.close()
    report = consumer(engine, log, data).run_once()
    with engine.connect() as conn:
        shown = summary(conn)
    assert (shown["files"], shown["bytes"], shown["dirs"], shown["stale_files"]) == (2, 3 * 65536 + 1000, 1, 0)
    assert shown["per_ost"] == [{"ost": 0, "objects": 1, "bytes": 131072}, {"ost": 1, "objects": 2, "bytes": 66536}]
    assert [r["path"] for r in shown["roots"]] == [str(data)] and shown["roots"][0]["scanned"] is not None
    [log_row] = shown["changelogs"]
    assert (log_row["mdt"], log_row["user"], log_row["position"], log_row["records"], log_row["rescans"]) == (
        MDT, EMULATED_USER, report.position, report.records, 0)
    assert report.records > 0 and log_row["roots"] == [str(data)] and log_row["age_s"] >= 0
