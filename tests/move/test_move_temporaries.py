"""The movers' temporaries (issue 27, item 5), with real processes: a temporary names the process writing it
(host, boot, pid namespace, pid, start time), so the next run of any mover (iez copy, iez stage, iez rebalance
apply, iez mirror resync) removes those whose process is gone, reports how many, and never removes one whose
process still runs, nor one written where its process cannot be seen, nor a file that only looks like one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from move_helpers import REPO, XATTR, MiB, emulated_cluster, iez_copy, sha, temporaries, with_layout

from iez.move import temps

pytestmark = pytest.mark.slow

#: A real process that writes temporaries beside each path given (both kinds), says so, and waits.
WRITER = r"""
import os, sys, time
from iez.move import temps
for dst in sys.argv[1:]:
    for kind in ("copy", "rebalance"):
        with open(temps.temp_name(dst, kind), "wb") as out:
            out.write(b"half a file")
print("written", flush=True)
time.sleep(600)
"""


def writer(*dsts: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, *map(str, dsts)], stdout=subprocess.PIPE, text=True,
                            cwd=REPO)
    assert proc.stdout.readline().strip() == "written"
    return proc


def dead_writer(*dsts: Path) -> None:
    proc = writer(*dsts)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_a_live_writers_temporaries_are_kept_and_a_dead_ones_removed(tmp_path):
    live = writer(tmp_path / "a")
    try:
        dead_writer(tmp_path / "b")
        assert len(temporaries(tmp_path)) == 4
        swept = temps.sweep([str(tmp_path)])
        assert swept.removed == 2 and swept.kept == 2
        left = temporaries(tmp_path)
        assert [p.name.split(".iez-")[0] for p in left] == [".a", ".a"]
        assert all(temps.writer_of(p.name).pid == live.pid for p in left)
    finally:
        live.kill()
        live.wait()
    assert temps.sweep([str(tmp_path)]).removed == 2 and temporaries(tmp_path) == []


def test_a_reused_pid_is_not_taken_for_the_writer(tmp_path):
    """The name carries the writer's start time: a live process with the same pid but another start time (the
    pid used again) does not keep a dead writer's temporary."""
    me = temps.me()
    stale = tmp_path / f".x.iez-copy.{me.node}-{me.boot}-{me.ns}-{os.getpid()}-{me.start + 1}"
    stale.write_bytes(b"")
    ours = Path(temps.temp_name(str(tmp_path / "y"), "copy"))
    ours.write_bytes(b"")
    swept = temps.sweep([str(tmp_path)])
    assert swept.removed == 1 and not stale.exists() and ours.exists()  # this process's own are never touched


def test_foreign_other_boot_and_old_names(tmp_path, monkeypatch):
    me = temps.me()
    other_host = tmp_path / f".a.iez-copy.{'0' * 8 if me.node != '0' * 8 else '1' * 8}-{me.boot}-{me.ns}-1-1"
    other_ns = tmp_path / f".b.iez-copy.{me.node}-{me.boot}-{me.ns + 1}-1-1"
    other_boot = tmp_path / f".c.iez-rebalance.{me.node}-{'f' * 8 if me.boot != 'f' * 8 else 'e' * 8}-{me.ns}-1-1"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    old_dead = tmp_path / f".d.iez-copy.{dead.stdout.strip()}"
    old_live = tmp_path / f".e.iez-copy.{os.getpid()}"
    old_rebalance = tmp_path / ".f.iez-rebalance.tmp"
    old_held = tmp_path / ".g.iez-rebalance.tmp"
    lookalikes = [tmp_path / n for n in (".h.iez-copy.notes", "i.iez-copy.123", ".j.iez-rebalance.tmp.bak",
                                         ".k.iez-copy.0000000g-00000000-1-1-1")]
    for p in (other_host, other_ns, other_boot, old_dead, old_live, old_rebalance, old_held, *lookalikes):
        p.write_bytes(b"")
    assert not any(temps.is_temporary(p.name) for p in lookalikes)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); print(1, flush=True); "
                               "time.sleep(600)", str(old_held)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "1"
        fresh = temps.sweep([str(tmp_path)])  # everything is fresh: only what can be asked is judged
        assert fresh.removed == 0
        monkeypatch.setattr(temps, "QUIET_S", 0.0)  # as if each had not changed for a minute
        swept = temps.sweep([str(tmp_path)])
    finally:
        holder.kill()
        holder.wait()
    removed = {Path(p).name for p in swept.removed_paths}
    assert removed == {other_boot.name, old_dead.name, old_rebalance.name}
    for p in (other_host, other_ns, old_live, old_held, *lookalikes):
        assert p.exists(), p


def test_a_long_name_fits_and_is_recognised(tmp_path):
    name = "n" * 250
    (tmp_path / name).write_bytes(b"")
    tmp = Path(temps.temp_name(str(tmp_path / name), "rebalance"))
    assert len(os.fsencode(tmp.name)) <= 255 and temps.is_temporary(tmp.name)
    tmp.write_bytes(b"")  # the file system takes it
    assert temps.writer_of(tmp.name) == temps.me()


@pytest.mark.parametrize("mover", ["copy", "stage", "rebalance", "resync"])
def test_every_mover_removes_dead_movers_temporaries_and_keeps_live_ones(tmp_path, mover):
    """Temporaries of both kinds beside the files a mover works on: a killed writer's are removed by the
    mover's next run (which says how many), a live writer's are kept."""
    root, data = emulated_cluster(tmp_path)
    work = data / "work"
    src = data / "src"
    for k in range(3):
        with_layout(src / f"f{k}", [k, k + 4], MiB + k)
    env = {**os.environ, "IEZ_EMULATE": str(root), "IEZ_STATE_DIR": str(tmp_path / "state")}
    env.pop("LD_PRELOAD", None)
    if mover in ("copy", "stage"):
        targets = [work / "src" / f"f{k}" for k in range(3)]
    elif mover == "rebalance":
        targets = [with_layout(work / f"r{k}", [k], MiB + k) for k in range(3)]
    else:
        targets = [work / f"m{k}" for k in range(3)]
        for t in targets:
            t.parent.mkdir(parents=True, exist_ok=True)
            t.write_bytes(os.urandom(MiB))
            os.setxattr(t, XATTR, b"version=3 mirror=1:prefer comp=0:eof:1048576:1:1 "
                                  b"mirror=2:stale comp=0:eof:1048576:1:5")
    (work / "src").mkdir(parents=True, exist_ok=True)
    dead_writer(*targets)
    live = writer(targets[0])
    try:
        assert len(temporaries(work)) == 8
        if mover == "copy":
            done = iez_copy([str(src), str(work), "--json"], root, env={"IEZ_STATE_DIR": str(tmp_path / "state")})
            assert done.returncode == 0, done.stderr
            said = json.loads(done.stdout)["temporaries_removed"]
            assert all(sha(t) == sha(src / t.name) for t in targets)
        elif mover == "stage":
            done = subprocess.run([sys.executable, "-m", "iez.cli", "copy", "--background", "--json", str(src),
                                   str(work)], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
            assert done.returncode == 0, done.stderr
            deadline = time.monotonic() + 120
            log = tmp_path / "state" / "staging.log"
            while "nothing pending" not in (log.read_text() if log.exists() else ""):
                assert time.monotonic() < deadline, log.read_text() if log.exists() else "no staging.log"
                time.sleep(0.2)
            text = log.read_text()
            said = int(text.split("removed ")[1].split()[0]) if "removed " in text else 0
            assert all(sha(t) == sha(src / t.name) for t in targets)
        elif mover == "rebalance":
            plan = {"moves": [{"file": str(t), "from": [k], "to": [k + 4], "stripe_size": MiB, "bytes": MiB + k}
                              for k, t in enumerate(targets)]}
            (tmp_path / "plan.json").write_text(json.dumps(plan))
            done = subprocess.run([sys.executable, "-m", "iez.cli", "rebalance", "apply", str(tmp_path / "plan.json"),
                                   "--json"], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
            assert done.returncode == 0, done.stderr
            out = json.loads(done.stdout)
            assert out["files_moved"] == 3
            said = out["temporaries_removed"]
        else:
            done = subprocess.run([sys.executable, "-m", "iez.cli", "mirror", "resync", "--json", *map(str, targets)],
                                  env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
            assert done.returncode == 0, done.stderr
            said = json.loads(done.stdout)["temporaries_removed"]
        assert said == 6
        left = temporaries(work)
        assert len(left) == 2 and all(temps.writer_of(p.name).pid == live.pid for p in left)
    finally:
        live.kill()
        live.wait()
