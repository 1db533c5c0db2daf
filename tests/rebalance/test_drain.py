"""iez drain / undrain on an emulated cluster with every layout kind: no object left on the drained OST, every
layout otherwise intact (extents, stripe sizes and counts, pools, Data-on-MDT and uninstantiated components,
mirrors in distinct OSSs, stale flags), every file's bytes and attributes unchanged; what cannot move is
said; kill -9 and a rerun; --status, --cancel, undrain; bad input in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import layout_kinds as lk

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "move"))

from move_helpers import compare, temporaries  # noqa: E402

from iez.emulate.cluster import ClusterLayout, tree_states  # noqa: E402

pytestmark = pytest.mark.slow

IEZ = [sys.executable, "-m", "iez.cli"]


def env_for(tmp: Path, **extra) -> dict:
    env = {**os.environ, "IEZ_STATE_DIR": str(tmp / "state"), **extra}
    for k in ("LD_PRELOAD", "IEZ_MOVER_PRELOADED", "IEZ_EMULATE"):
        if k not in extra:
            env.pop(k, None)
    return env


def iez(tmp: Path, *args, env=None, check=None) -> subprocess.CompletedProcess:
    done = subprocess.run([*IEZ, *map(str, args)], capture_output=True, text=True, timeout=300,
                          env=env or env_for(tmp))
    if check is not None:
        assert done.returncode == check, done.stderr
    return done


def objects(layout) -> list[tuple[int, int, int]]:
    """(mirror, component, OST) of every object."""
    return [(m, c, o) for m, copy in enumerate(layout.copies()) for c, comp in enumerate(copy) for o in comp.osts]


def shape(layout) -> list:
    """Everything a drain keeps: per mirror, per component its extent, stripe size and count, pool, DoM,
    overstriping and whether it is placed."""
    return [[(c.start, c.end, c.stripe_size, c.stripe_count, c.pool, c.dom, c.overstriping, bool(c.osts))
             for c in copy] for copy in layout.copies()]


def check_intact(before, after, drained: int) -> None:
    assert shape(after) == shape(before)
    old, new = objects(before), objects(after)
    for (m, c, o), (_, _, n) in zip(old, new):
        if o != drained:
            assert n == o, (old, new)  # only the drained OST's objects move
        assert n != drained
    for m, copy in enumerate(after.copies()):
        for c, comp in enumerate(copy):
            if comp.pool:
                assert set(comp.osts) <= set(lk.FLASH)
            if comp.osts and not comp.overstriping:
                assert len(set(comp.osts)) == len(comp.osts)
    if after.mirrors:
        oss = [{o // 2 for c in copy for o in c.osts} for copy in after.mirrors]
        for a in range(len(oss)):
            for b in range(a + 1, len(oss)):
                assert not oss[a] & oss[b], oss  # mirrors in distinct failure domains (OSSs)
        moved = {m for (m, _, o), (_, _, n) in zip(old, new) if o != n}
        assert set(after.stale) == set(before.stale) - moved  # a moved mirror is rewritten; the others keep theirs
        assert after.preferred_mirror == before.preferred_mirror


def test_drain_moves_every_layout_kind_off_the_ost_and_keeps_everything(tmp_path):
    root = lk.cluster(tmp_path)
    snaps = lk.tree(root, n=2)
    layouts = {p: lk.layout_of(p) for p in snaps}
    assert sum(o == 2 for lay in layouts.values() for _, _, o in objects(lay)) == 2 * 8
    done = iez(tmp_path, "drain", "--ost", 2, "--root", root, "--json", check=0)
    out = json.loads(done.stdout)
    assert (out["objects_left"], out["files_moved"], out["status"]) == (0, len(snaps), "done")
    assert out["bytes_moved"] == sum(s["size"] for s in snaps.values())
    assert "drain OST 2: 14/14 files" in done.stderr  # progress lines
    for path, before in layouts.items():
        after = lk.layout_of(path)
        assert 2 not in {o for _, _, o in objects(after)}, path
        check_intact(before, after, 2)
    result = compare([(s, p) for p, s in snaps.items()])
    assert (result["lost"], result["corrupted"], result["attributes_changed"]) == (0, 0, 0), result["examples"]
    assert temporaries(root / "data") == []
    states = tree_states(ClusterLayout.load(root))
    assert states[2] == "nocreate" and all(states[j] == "active" for j in states if j != 2)
    plan = json.loads(iez(tmp_path, "rebalance", "plan", "--cluster", root, "--json", "--improve-s", "0.2").stdout)
    assert 2 not in {o["index"] for o in plan["osts"] if o["state"] == "active"}
    status = json.loads(iez(tmp_path, "drain", "--status", "--root", root, "--json", check=0).stdout)
    assert (status["status"], status["objects_left"], status["nocreate"], status["running"]) == ("done", 0, [2], False)
    again = json.loads(iez(tmp_path, "drain", "--ost", 2, "--root", root, "--json", check=0).stdout)
    assert (again["files_moved"], again["objects_left"]) == (0, 0)
    undone = json.loads(iez(tmp_path, "undrain", "--ost", 2, "--root", root, "--json", check=0).stdout)
    assert undone["nocreate"] == [] and undone["max_create_count"] == {"2": 20000}
    assert tree_states(ClusterLayout.load(root))[2] == "active"


def test_hard_links_and_files_open_for_writing_are_left_with_the_reason(tmp_path):
    root = lk.cluster(tmp_path)
    snaps = lk.tree(root, n=1, decorate_files=False)
    linked = root / "data" / "d0" / "plain1-0"
    os.link(linked, root / "data" / "d0" / "plain1-0.link")
    held = root / "data" / "d1" / "plain2-0"
    writer = subprocess.Popen([sys.executable, "-c", "import sys, time\nf = open(sys.argv[1], 'r+b')\n"
                               "print('open', flush=True)\ntime.sleep(60)", str(held)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "open"
        done = iez(tmp_path, "drain", "--ost", 2, "--root", root, "--json", check=1)
    finally:
        writer.kill()
        writer.wait()
    out = json.loads(done.stdout)
    reasons = {(x["file"], x["ost"]): x["reason"] for x in out["left"]}
    assert "hard links (2 names)" in reasons[(str(linked), 2)]
    assert "hard links (2 names)" in reasons[(str(root / "data" / "d0" / "plain1-0.link"), 2)]
    assert f"open for writing (pid {writer.pid})" in reasons[(str(held), 2)]
    assert out["objects_left"] == 3 and out["status"] == "incomplete"
    assert out["files_moved"] == len(snaps) - 2
    result = compare([(s, p) for p, s in snaps.items()])
    assert (result["lost"], result["corrupted"], result["attributes_changed"]) == (0, 0, 0), result["examples"]
    # once the writer is gone, running the drain again finishes it (the hard links stay, said again)
    rest = json.loads(iez(tmp_path, "drain", "--ost", 2, "--root", root, "--json", check=1).stdout)
    assert rest["files_moved"] == 1 and rest["objects_left"] == 2


def _slow_drain(tmp_path, root, journal_events: int):
    """A drain under IEZ_EMULATE (slow OSTs), waited for until ``journal_events`` files are done."""
    env = env_for(tmp_path, IEZ_EMULATE=str(root))
    proc = subprocess.Popen([*IEZ, "drain", "--ost", "2", "--root", str(root), "--json", "--share", "1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    journal = root / "drain" / "plan.json.journal"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if journal.exists() and sum('"done"' in line for line in journal.read_text().splitlines()) >= journal_events:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    return proc, env


def test_kill_9_mid_drain_then_rerun_leaves_no_temporary_duplicate_or_lost_file(tmp_path):
    root = lk.cluster(tmp_path, mib_s=12.0)
    snaps = lk.tree(root, n=2)
    layouts = {p: lk.layout_of(p) for p in snaps}
    proc, env = _slow_drain(tmp_path, root, 3)
    time.sleep(0.1)  # somewhere inside the next move
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    status = json.loads(iez(tmp_path, "drain", "--status", "--root", root, "--json", check=0).stdout)
    assert status["status"] == "interrupted" and status["files_moved"] >= 1  # saved every 0.2 s
    done = iez(tmp_path, "drain", "--ost", 2, "--root", root, "--json", env=env, check=0)
    out = json.loads(done.stdout)
    assert out["objects_left"] == 0 and out["files_moved"] <= len(snaps) - 3
    for path, before in layouts.items():
        check_intact(before, lk.layout_of(path), 2)
    result = compare([(s, p) for p, s in snaps.items()])
    assert (result["lost"], result["corrupted"], result["attributes_changed"]) == (0, 0, 0), result["examples"]
    assert temporaries(root / "data") == []
    names = sorted(p.name for p in (root / "data").rglob("*") if p.is_file())
    assert names == sorted(p.name for p in snaps)  # no duplicate


def test_cancel_stops_the_drain_and_the_ost_refuses_stripes_until_undrain(tmp_path):
    root = lk.cluster(tmp_path, mib_s=1.0)  # the rest of the drain takes longer than two iez commands start
    snaps = lk.tree(root, n=2, decorate_files=False)
    proc, env = _slow_drain(tmp_path, root, 1)
    running = json.loads(iez(tmp_path, "drain", "--status", "--root", root, "--json", check=0).stdout)
    assert running["running"] and running["pid"] == proc.pid and running["draining"] == [2]
    cancel = json.loads(iez(tmp_path, "drain", "--cancel", "--root", root, "--json", check=0).stdout)
    assert cancel["cancelled"] and cancel["nocreate"] == [2], cancel
    out, _ = proc.communicate(timeout=60)
    report = json.loads(out)
    assert report["status"] == "cancelled" and 0 < report["objects_left"]
    assert any(x["reason"] == "cancelled before its move" for x in report["left"])
    assert tree_states(ClusterLayout.load(root))[2] == "nocreate"
    status = json.loads(iez(tmp_path, "drain", "--status", "--root", root, "--json", check=0).stdout)
    assert status["status"] == "cancelled" and not status["running"]
    assert temporaries(root / "data") == []
    result = compare([(s, p) for p, s in snaps.items()])
    assert (result["lost"], result["corrupted"]) == (0, 0)
    iez(tmp_path, "undrain", "--ost", 2, "--root", root, check=0)
    assert tree_states(ClusterLayout.load(root))[2] == "active"


def test_drain_errors_are_one_line(tmp_path):
    root = lk.cluster(tmp_path)
    for args, said in ((["--ost", "99"], "--ost 99: no such OST"), (["--ost", "x"], "'x' is not an OST index"),
                       (["--ost", "2", "--share", "0"], "--share 0.0")):
        done = iez(tmp_path, "drain", *args, "--root", root)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = iez(tmp_path, "drain", "--ost", "2", "--root", tmp_path / "nowhere")
    assert done.returncode == 2 and "nowhere: no such directory" in done.stderr
    assert tree_states(ClusterLayout.load(root))[2] == "active"  # nothing changed


def test_a_drain_finds_its_files_in_the_followed_inventory_and_walks_when_it_is_only_seeded(tmp_path, monkeypatch):
    """With the inventory kept current from the (emulated) MDT changelog, the drain finds the files through the
    inventory, a file created after the seeding scan included; seeded but not followed, it walks (a drain must
    miss no file)."""
    import random
    import threading

    from iez.inventory.emulated_mdt import ChangelogWriter, changelog_path

    root = lk.cluster(tmp_path)
    snaps = lk.tree(root, n=1, decorate_files=False)
    layout = ClusterLayout.load(root)
    (tmp_path / "state").mkdir(exist_ok=True)
    iez(tmp_path, "db", "upgrade", check=0)
    seeded = iez(tmp_path, "inventory", "scan", "--cluster", root, "--json", check=0)
    assert json.loads(seeded.stdout)["files"] == len(snaps)
    from iez.rebalance.drain import scan

    monkeypatch.setenv("IEZ_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("IEZ_DB", raising=False)
    walked = scan(layout.data, {o.index for o in layout.osts}, {2}, None, str(root))
    assert walked.source == "walk" and len(walked.movable) == len(snaps)  # seeded, not followed
    writer = ChangelogWriter(layout.data, changelog_path(layout.root, layout.fsname))
    stop = threading.Event()
    iez(tmp_path, "inventory", "follow", "--cluster", root, "--once", "--json", check=0)

    def pump():
        while not stop.is_set():
            writer.poll()
            stop.wait(0.05)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    try:
        late = lk.put(root / "data" / "late" / "new", 200 * 1024, f"version=1 stripe_size={lk.S} stripe_count=1 osts=2",
                      random.Random(3))
        time.sleep(0.3)  # a few polls: the writer has recorded the new file
        done = iez(tmp_path, "drain", "--ost", 2, "--root", root, "--json", check=0)
    finally:
        stop.set()
        thread.join()
        writer.close()
    out = json.loads(done.stdout)
    assert (out["inventory"], out["objects_left"], out["status"]) == ("store", 0, "done")
    assert out["files_moved"] == len(snaps) + 1
    assert 2 not in {o for _, _, o in objects(lk.layout_of(late))}
    for path in snaps:
        assert 2 not in {o for _, _, o in objects(lk.layout_of(Path(path)))}
