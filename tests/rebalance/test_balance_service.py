"""iez balance (issue 24, item 1), as real processes on emulated clusters: the service, started with defaults on
a pool at 88 % beside a new empty OSS, brings it under the low-water mark by itself at its share (a job writing
beside it keeps >= 70 % of its speed alone), pauses while an OST of the pool is degraded and resumes, survives two
kill -9s while moving and goes idle with every file's bytes and metadata as they were; --once --json shapes
(idle, moved, paused degraded, paused busy); --dry-run moves nothing; config errors are one line."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rebalance_helpers import MiB, digests, fill, make_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "move"))
from move_helpers import compare, decorate, snapshot, temporaries  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
IEZ = [sys.executable, "-m", "iez.cli"]
OST_MIB = 16


def env_for(tmp: Path, **extra) -> dict:
    env = {**os.environ, "IEZ_STATE_DIR": str(tmp / "state")}
    for k in ("LD_PRELOAD", "IEZ_EMULATE", "IEZ_MOVER_PRELOADED", "IEZ_BALANCE_CONFIG"):
        env.pop(k, None)
    return {**env, **extra}


def iez(tmp: Path, *args, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run([*IEZ, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env_for(tmp), cwd=REPO)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def new_oss_cluster(tmp: Path, mib_s: float = 8.0, seed: int = 3) -> Path:
    """Pool disk: OSTs 0-3 (oss0) 88 % full of files, OSTs 4-7 (oss1, new) empty."""
    root = make_cluster(tmp, [{"index": j, "mib": OST_MIB, "pools": ["disk"]} for j in range(8)], per_oss=4,
                        mib_s=mib_s)
    fill(root, {j: 0.88 for j in range(4)}, OST_MIB, seed=seed, pools={j: "disk" for j in range(4)},
         sizes=(128 * 1024, 1 * MiB))
    return root


def ost_fills(tmp: Path, root: Path) -> dict[int, float]:
    plan = json.loads(iez(tmp, "rebalance", "plan", "--cluster", root, "--json", "--improve-s", "0", check=False).stdout)
    return {o["index"]: o["fill_before"] for o in plan["osts"]}


def journal_done(state: Path) -> int:
    path = state / "balance" / "pass.journal"
    try:
        return sum(1 for line in path.read_text().splitlines() if '"event":"done"' in line)
    except FileNotFoundError:
        return 0


def balance_status(state: Path) -> dict:
    try:
        return json.loads((state / "balance-status.json").read_text())
    except (OSError, ValueError):
        return {}


def pool_status(state: Path) -> dict:
    return next(iter(balance_status(state).get("pools", [])), {})


def status_json(db: Path, balance_file: Path) -> dict:
    """``iez status --json`` run in this process (no interpreter to start while the service moves)."""
    import contextlib
    import io

    from iez.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["status", "--db", str(db), "--balance-status-file", str(balance_file), "--json"]) == 0
    return json.loads(out.getvalue())


def wait_for(what: str, predicate, proc: subprocess.Popen | None = None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    log = getattr(proc, "log", None)
    while not predicate():
        said = f"\nstatus: {getattr(proc, 'status', lambda: {})()}\nlog: {log.read_text()[-3000:] if log else ''}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}{said}"
        assert proc is None or proc.poll() is None, f"iez balance exited waiting for {what}{said}"
        time.sleep(0.05)


WRITER = """
import os, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
block = b"\\1" * (256 << 10)
fd = os.open(path, os.O_WRONLY)
start = time.monotonic()
done = 0
while time.monotonic() < start + seconds:
    done += os.write(fd, block)
os.close(fd)
print(done / (time.monotonic() - start))
"""


def job_speed(tmp: Path, root: Path, path: Path, osts: list[int], seconds: float = 2.0) -> float:
    """Bytes/s a plain job (no I/O class) writes into a file striped over ``osts`` of the emulated cluster."""
    from iez.runtime import find_library

    with open(path, "wb") as handle:
        os.setxattr(handle.fileno(), "user.iez.layout",
                    f"version=1 stripe_size={MiB} stripe_count={len(osts)} osts={','.join(map(str, osts))}".encode())
    env = env_for(tmp, IEZ_EMULATE=str(root), LD_PRELOAD=str(find_library()), IEZ_MODE="off")
    done = subprocess.run([sys.executable, "-c", WRITER, str(path), str(seconds)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


def test_the_service_balances_a_new_oss_by_itself_at_its_share_through_two_kills(tmp_path):
    from iez.emulate.cluster import set_state

    root = new_oss_cluster(tmp_path)
    state = tmp_path / "state"
    rng = random.Random(24)
    files = sorted(p for p in (root / "data").rglob("*") if p.is_file())
    for k, path in enumerate(files):
        decorate(path, k, rng)
    before = {path: snapshot(path) for path in files}
    assert min(ost_fills(tmp_path, root)[j] for j in range(4)) >= 0.87
    iez(tmp_path, "db", "upgrade", "--db", tmp_path / "iez.db")
    jobs = tmp_path / "job"
    jobs.mkdir()
    alone = job_speed(tmp_path, root, jobs / "alone", [4, 5, 6, 7])
    argv = [*IEZ, "balance", "--root", str(root)]  # every setting its default

    runs = []

    def start() -> subprocess.Popen:
        log = tmp_path / f"balance-{len(runs) + 1}.log"
        with open(log, "w") as err:
            proc = subprocess.Popen(argv, env=env_for(tmp_path), cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
        proc.log, proc.status = log, lambda: balance_status(state)
        runs.append(proc)
        return proc

    def kill_while_moving(proc: subprocess.Popen, after_done: int) -> None:
        wait_for(f"{after_done} moves done", lambda: journal_done(state) >= after_done, proc)
        time.sleep(rng.uniform(0.05, 0.4))
        assert proc.poll() is None and pool_status(state).get("state") == "moving"
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    # run 1: moving at its share while a job writes beside it; iez status shows it; killed -9
    proc = start()
    wait_for("the first move", lambda: journal_done(state) >= 1, proc)
    moved_before = journal_done(state)
    beside = job_speed(tmp_path, root, jobs / "beside", [4, 5, 6, 7])
    moved_during = journal_done(state) - moved_before
    shown = status_json(tmp_path / "iez.db", state / "balance-status.json")["balance"]
    assert shown["running"] and shown["pools"][0]["pool"] == "disk"
    assert shown["pools"][0]["state"] == "moving" and shown["pools"][0]["bytes_left"] > 0, shown
    assert shown["pools"][0]["eta_s"] is not None and shown["pools"][0]["eta_s"] > 0
    kill_while_moving(proc, journal_done(state) + 1)
    first_kill = journal_done(state)
    total = len(json.loads((state / "balance" / "pass.json").read_text())["moves"])
    assert total - first_kill >= 10, (first_kill, total)  # enough left for the rest of the story

    # run 2: it finishes the interrupted plan first; an OST of the pool degraded pauses it, active resumes it
    proc = start()
    wait_for("a move after the restart", lambda: journal_done(state) > first_kill, proc)
    set_state(root, "6", "degraded")  # what iez cluster set does, without an interpreter's start
    wait_for("paused", lambda: pool_status(state).get("state") == "paused", proc, timeout=60)
    assert pool_status(state)["reason"].startswith("degraded") and "6 degraded" in pool_status(state)["reason"]
    held = journal_done(state)
    time.sleep(1.5)
    assert journal_done(state) == held  # nothing moves while paused
    set_state(root, "6", "active")
    kill_while_moving(proc, held + 2)
    assert (state / "balance" / "pass.json").exists()

    # run 3: to the end, then idle
    proc = start()
    wait_for("idle after the pass", lambda: pool_status(state).get("state") == "idle"
             and not pool_status(state).get("in_pass") and balance_status(state).get("pid") == proc.pid, proc,
             timeout=240)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert balance_status(state)["action"] == "stopped"

    fills = ost_fills(tmp_path, root)
    assert max(fills.values()) <= 0.80, fills
    assert min(fills[j] for j in range(4, 8)) > 0.2, fills  # the new OSS took its part
    after = sorted(p for p in (root / "data").rglob("*") if p.is_file() and not p.name.startswith("."))
    assert after == files  # nothing lost, nothing duplicated
    result = compare([(before[p], p) for p in files])
    assert (result["lost"], result["corrupted"], result["attributes_changed"]) == (0, 0, 0), result
    assert temporaries(root / "data") == []
    moved = [json.loads(line) for line in (state / "balance" / "last-pass.journal").read_text().splitlines()[1:]]
    assert sum(r["event"] == "done" for r in moved) >= 5
    assert pool_status(state)["passes"] == 1
    assert moved_during >= 1, "the balancer moved nothing while the job wrote"
    ratio = beside / alone
    print(f"job alone {alone / MiB:.2f} MiB/s, beside the balancer {beside / MiB:.2f} MiB/s ({ratio:.0%}); "
          f"{moved_during} moves done meanwhile; fills after {sorted(fills.items())}")
    assert ratio >= 0.70, (alone, beside)


def small_cluster(tmp: Path, fills: dict[int, float], states: dict[int, str] | None = None) -> Path:
    """8 fast OSTs (200 MiB/s) with files to ``fills``, no pools."""
    tmp.mkdir(parents=True, exist_ok=True)
    root = make_cluster(tmp, [{"index": j, "mib": OST_MIB, "state": (states or {}).get(j, "active")}
                              for j in range(8)], per_oss=4)
    fill(root, fills, OST_MIB, seed=5, sizes=(128 * 1024, 1 * MiB))
    return root


def once(tmp: Path, root: Path, *extra) -> dict:
    done = iez(tmp, "balance", "--once", "--json", "--root", root, *extra)
    return json.loads(done.stdout)


def test_once_json_idle_moved_and_paused_for_a_degraded_ost(tmp_path):
    balanced = small_cluster(tmp_path / "a", {j: 0.5 for j in range(8)})
    out = once(tmp_path / "a", balanced)
    assert out["action"] == "idle" and out["bytes_moved"] == 0 and out["reason"] is None
    assert out["spread_before"] == out["spread_after"] <= 0.15
    assert out["pools"][0]["state"] == "idle" and out["pools"][0]["reason"].startswith("balanced")

    uneven = small_cluster(tmp_path / "b", {j: 0.2 + 0.1 * j for j in range(8)})  # 0.2 .. 0.9
    sha = digests(uneven)
    iez(tmp_path / "b", "cluster", "set", "--root", uneven, "--ost", 3, "--state", "degraded")
    paused = once(tmp_path / "b", uneven)
    assert paused["action"] == "paused" and paused["reason"].startswith("degraded"), paused
    assert "3 degraded" in paused["reason"] and paused["bytes_moved"] == 0
    assert paused["pools"][0]["state"] == "paused"
    assert digests(uneven) == sha
    iez(tmp_path / "b", "cluster", "set", "--root", uneven, "--ost", 3, "--state", "active")
    moved = once(tmp_path / "b", uneven)
    assert moved["action"] == "moved" and moved["bytes_moved"] > 0 and moved["files_moved"] > 0
    assert moved["spread_before"] > 0.6 and moved["spread_after"] <= 0.10 + 1e-9, moved
    assert moved["pools"][0]["state"] == "idle" and moved["pools"][0]["reason"].startswith("done")
    assert max(ost_fills(tmp_path / "b", uneven).values()) <= 0.80
    assert sorted(digests(uneven).values()) == sorted(sha.values())
    again = once(tmp_path / "b", uneven)
    assert again["action"] == "idle" and again["bytes_moved"] == 0


def test_once_json_paused_while_jobs_keep_a_source_ost_busy(tmp_path):
    root = small_cluster(tmp_path, {j: 0.2 + 0.1 * j for j in range(8)})
    sha = digests(root)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    emulation = subprocess.Popen([*IEZ, "cluster", "emulate", "--cluster", str(tmp_path / "cluster-desc.json"),
                                  "--root", str(root), "--data", str(root / "data"), "--mds", endpoint,
                                  "--interval", "0.5", "--insecure"], env=env_for(tmp_path), cwd=REPO,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        iez(tmp_path, "cluster", "set", "--root", root, "--ost", 7, "--load", 60)  # jobs on the fullest OST
        time.sleep(1.5)
        out = once(tmp_path, root, "--busy-mib-s", 30)
        assert out["action"] == "paused" and out["reason"].startswith("busy"), out
        assert "OST 7 at" in out["reason"] and out["bytes_moved"] == 0
        assert digests(root) == sha
        # the same load under a higher threshold: it moves
        out = once(tmp_path, root, "--busy-mib-s", 100)
        assert out["action"] == "moved" and out["bytes_moved"] > 0, out
    finally:
        emulation.terminate()
        emulation.wait(30)


def test_dry_run_says_what_it_would_move_and_moves_nothing(tmp_path):
    root = small_cluster(tmp_path, {j: 0.2 + 0.1 * j for j in range(8)})
    sha = digests(root)
    inodes = {p: p.stat().st_ino for p in (root / "data").rglob("*") if p.is_file()}
    out = once(tmp_path, root, "--dry-run")
    assert out["dry_run"] and out["action"] == "moved" and out["moves"], out
    assert out["bytes_moved"] == sum(m["bytes"] for m in out["moves"]) > 0
    assert out["spread_after"] <= 0.10 + 1e-9 < out["spread_before"]
    assert digests(root) == sha
    assert {p: p.stat().st_ino for p in inodes} == inodes
    assert not (tmp_path / "state" / "balance" / "pass.json").exists()
    assert not (tmp_path / "state" / "balance-status.json").exists()


@pytest.mark.parametrize("text, key", [
    ("[balance]\nhigh_water = 1.5\n", "high_water"),
    ("[balance]\nlow_water = 0.9\nhigh_water = 0.85\n", "low_water"),
    ("[balance]\nhihg_water = 0.9\n", "hihg_water"),
    ("[balance]\nshare = \"a lot\"\n", "share"),
    ("[balance]\ninterval = \n", "line 2"),
    ("[balanse]\nshare = 0.3\n", "balanse"),
])
def test_config_errors_are_one_line_naming_the_file_and_key(tmp_path, text, key):
    config = tmp_path / "balance.toml"
    config.write_text(text)
    done = iez(tmp_path, "balance", "--once", "--config", config, "--root", tmp_path, check=False)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(config) in lines[0] and key in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_flags_override_the_config_and_a_bad_flag_is_named(tmp_path):
    root = small_cluster(tmp_path, {j: 0.5 for j in range(8)})
    config = tmp_path / "balance.toml"
    config.write_text(f'[balance]\nroot = "{root}"\nhigh_water = 0.4\nlow_water = 0.3\n')
    paused = iez(tmp_path, "balance", "--once", "--json", "--config", config, "--dry-run")
    assert json.loads(paused.stdout)["pools"][0]["reason"].startswith("nothing to move: mean fill")
    out = json.loads(iez(tmp_path, "balance", "--once", "--json", "--config", config, "--high-water", 0.9,
                         "--low-water", 0.85, "--dry-run").stdout)
    assert out["action"] == "idle"
    done = iez(tmp_path, "balance", "--once", "--config", config, "--share", 0, check=False)
    assert done.returncode == 2 and "--share 0.0" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_service_serves_its_state_as_prometheus_metrics_and_stops_on_sigterm(tmp_path):
    import urllib.request

    root = small_cluster(tmp_path, {j: 0.5 for j in range(8)})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*IEZ, "balance", "--root", str(root), "--interval", "0.5", "--metrics-bind",
                             f"127.0.0.1:{port}"], env=env_for(tmp_path), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        state = tmp_path / "state"
        wait_for("the first look", lambda: pool_status(state).get("state") == "idle", proc, timeout=60)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "iez_balance_up 1.0" in text
        assert 'iez_balance_pool_state{pool="",state="idle"} 1.0' in text
        assert 'iez_balance_pool_paused{pool=""} 0.0' in text and "iez_balance_bytes_moved_total" in text
        second = iez(tmp_path, "balance", "--once", "--root", root, check=False)
        assert second.returncode == 2 and "another iez balance" in second.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.stderr.read()
    assert balance_status(tmp_path / "state")["action"] == "stopped"


def test_through_the_db_the_live_view_is_the_mds_measured_load(tmp_path):
    """--db: OSTs and loads from the interaction DB, as an MDS learnt them from the emulated servers' agents."""
    import sqlite3

    root = small_cluster(tmp_path, {j: 0.2 + 0.1 * j for j in range(8)})
    db = tmp_path / "live.db"
    iez(tmp_path, "db", "upgrade", "--db", db)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    procs = [subprocess.Popen([*IEZ, "mds", "--db", str(db), "--bind", endpoint, "--interval", "1", "--insecure",
                               "--status-file", str(tmp_path / "mds-status.json"), "--cpu-max", "100",
                               "--mem-max", "100"], env=env_for(tmp_path), cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL),
             subprocess.Popen([*IEZ, "cluster", "emulate", "--cluster", str(tmp_path / "cluster-desc.json"),
                               "--root", str(root), "--data", str(root / "data"), "--mds", endpoint,
                               "--interval", "1", "--insecure"], env=env_for(tmp_path), cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]

    def stored(sql: str):
        try:
            with sqlite3.connect(db) as conn:
                return conn.execute(sql).fetchone()
        except sqlite3.Error:
            return None

    try:
        wait_for("8 OSTs in the DB", lambda: (stored("SELECT COUNT(*) FROM osts") or [0])[0] == 8, timeout=60)
        sha = digests(root)
        iez(tmp_path, "cluster", "set", "--root", root, "--ost", 7, "--load", 60)
        wait_for("the MDS storing OST 7's load", lambda: ((stored(
            "SELECT load_bytes_s FROM osts WHERE ost_index = 7") or [0])[0] or 0) > 30 * MiB, timeout=60)
        out = once(tmp_path, root, "--db", db, "--busy-mib-s", 30)
        assert out["action"] == "paused" and out["reason"].startswith("busy") and "OST 7 at" in out["reason"], out
        assert digests(root) == sha
        iez(tmp_path, "cluster", "set", "--root", root, "--ost", 7, "--load", 0)
        iez(tmp_path, "cluster", "set", "--root", root, "--ost", 2, "--state", "readonly")
        wait_for("the MDS storing OST 2 readonly", lambda: (stored(
            "SELECT state FROM osts WHERE ost_index = 2") or [""])[0] == "readonly", timeout=60)
        out = once(tmp_path, root, "--db", db, "--busy-mib-s", 1000)
        assert out["action"] == "paused" and out["reason"].startswith("degraded") and "2 readonly" in out["reason"]
        iez(tmp_path, "cluster", "set", "--root", root, "--ost", 2, "--state", "active")
        wait_for("OST 2 active again", lambda: (stored("SELECT state FROM osts WHERE ost_index = 2") or [""])[0]
                 == "active", timeout=60)
        out = once(tmp_path, root, "--db", db, "--busy-mib-s", 1000)
        assert out["action"] == "moved" and out["bytes_moved"] > 0, out
        assert sorted(digests(root).values()) == sorted(sha.values())
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
