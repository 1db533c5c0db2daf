"""Background staging (seed 004): ``iez stage submit`` (what ``iez copy --background`` does) returns at once, a
detached stager drains the journal through the emulated cluster at its share, ``iez stage status`` shows the
progress, and a kill -9 of the stager in the middle followed by ``iez stage resume`` ends with every file copied
exactly once (sha256 equal, no temporary file left, bytes counted once)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "emulate"))
from test_bandwidth_emulation import cluster, lib, with_layout  # noqa: E402,F401 (lib is a fixture)
from waiting import wait_for  # noqa: E402

pytestmark = pytest.mark.slow

MiB = 1 << 20


def sources(data: Path, n: int, size: int) -> Path:
    src = data / "src"
    src.mkdir()
    for i in range(n):
        f = with_layout(src / f"f{i:03d}", [i % 4])
        f.write_bytes(os.urandom(size))
    return src


def iez(args: list[str], env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "iez.cli", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=REPO)


def status(env: dict) -> list[dict]:
    done = iez(["stage", "status", "--all", "--json"], env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_copied(src: Path, dst: Path) -> None:
    names = sorted(p.name for p in src.iterdir())
    assert sorted(p.name for p in dst.iterdir()) == names  # nothing more: no temporary file left
    for name in names:
        assert digest(dst / name) == digest(src / name), name


def test_a_background_movement_returns_at_once_and_drains(lib, tmp_path):  # noqa: F811
    root, data = cluster(tmp_path, ost_mib_s=40)
    src = sources(data, 12, 2 * MiB)
    dst = data / "dst"
    env = {**os.environ, "IEZ_EMULATE": str(root), "IEZ_STATE_DIR": str(tmp_path / "state")}
    start = time.monotonic()
    done = iez(["stage", "submit", str(src), str(dst), "--json"], env)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - start < 10  # the interpreter's start, not the copy
    out = json.loads(done.stdout)
    assert out["files"] == 12 and out["bytes"] == 24 * MiB and out["problems"] == []
    wait_for(lambda: status(env)[0]["state"] == "done", 120, "the movement to finish")
    movement = status(env)[0]
    assert movement["done_files"] == 12 and movement["done_bytes"] == 24 * MiB and movement["progress"] == 1.0
    check_copied(src, dst)
    log = (tmp_path / "state" / "staging.log").read_text()
    assert "12 files copied" in log
    assert iez(["stage", "status"], env).stdout.strip() == "no movements"  # nothing in flight any more


def test_a_killed_stager_resumes_without_loss_or_duplicate(lib, tmp_path):  # noqa: F811
    root, data = cluster(tmp_path, ost_mib_s=20)
    src = sources(data, 24, 2 * MiB)
    dst = data / "dst"
    state = tmp_path / "state"
    env = {**os.environ, "IEZ_EMULATE": str(root), "IEZ_STATE_DIR": str(state)}
    assert iez(["stage", "submit", str(src), str(dst)], env).returncode == 0
    wait_for(lambda: 3 <= status(env)[0]["done_files"], 120, "a few files copied")
    pid = int((state / "staging.lock").read_text())
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2],
             30, "the stager to die")
    movement = status(env)[0]
    assert movement["state"] == "running" and movement["done_files"] < 24  # cut off in the middle
    # iez status shows the movement in flight beside the cluster's view
    db = str(tmp_path / "iez.db")
    assert iez(["db", "upgrade", "--db", db], env).returncode == 0
    view = iez(["status", "--db", db, "--json"], env)
    assert view.returncode == 0, view.stderr
    assert [(m["id"], m["done_files"]) for m in json.loads(view.stdout)["movements"]] == \
        [(movement["id"], movement["done_files"])]
    resumed = iez(["stage", "resume"], env)
    assert resumed.returncode == 0 and "stager started" in resumed.stdout, resumed.stdout + resumed.stderr
    wait_for(lambda: status(env)[0]["state"] == "done", 180, "the resumed movement to finish")
    movement = status(env)[0]
    assert movement["done_files"] == 24 and movement["done_bytes"] == 48 * MiB and movement["failed"] == 0
    check_copied(src, dst)
    with sqlite3.connect(state / "staging.db") as conn:
        assert conn.execute("SELECT state, COUNT(*) FROM files GROUP BY state").fetchall() == [("done", 24)]


def test_cancel_and_bad_requests(tmp_path):
    env = {**os.environ, "IEZ_STATE_DIR": str(tmp_path / "state")}
    (tmp_path / "a").write_bytes(b"x")
    bad = iez(["stage", "submit", str(tmp_path / "a"), str(tmp_path / "out"), "--share", "0"], env)
    assert bad.returncode == 2 and "--share 0.0 is outside (0, 1]" in bad.stderr
    missing = iez(["stage", "submit", str(tmp_path / "nope"), str(tmp_path / "out")], env)
    assert missing.returncode == 1 and "nope: No such file or directory" in missing.stderr
    assert iez(["stage", "cancel", "99"], env).stderr.strip().endswith("no movement 99 in " +
                                                                       str(tmp_path / "state" / "staging.db"))
