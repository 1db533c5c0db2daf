"""iez rebalance apply: the files end with the planned layouts and unchanged contents; a kill -9 mid-way and
a rerun move every file exactly once and leave no temporary file; open and changed files are skipped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from rebalance_helpers import MiB, digests, fill, make_cluster

pytestmark = pytest.mark.slow

IEZ = [sys.executable, "-m", "iez.cli"]


def iez(*args, env=None, check=True) -> subprocess.CompletedProcess:
    done = subprocess.run([*IEZ, *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    if check:
        assert done.returncode == 0, done.stderr
    return done


def planned(tmp_path, root) -> tuple[dict, str]:
    done = iez("rebalance", "plan", "--cluster", root, "--json", "--improve-s", "0.5")
    path = tmp_path / "plan.json"
    path.write_text(done.stdout)
    return json.loads(done.stdout), str(path)


def cluster(tmp_path, mib_s=200.0):
    root = make_cluster(tmp_path, [{"index": j, "mib": 16} for j in range(8)], mib_s=mib_s)
    fill(root, {j: 0.2 + 0.1 * j for j in range(8)}, 16, seed=7)
    return root


def leftovers(root) -> list[str]:
    """Any mover's temporary (``.NAME.iez-rebalance.WRITER``, the old ``.NAME.iez-rebalance.tmp``...)."""
    from iez.move.temps import is_temporary

    return [p.name for p in (root / "data").rglob(".*") if is_temporary(p.name)]


def journal_records(path) -> list[dict]:
    return [json.loads(line) for line in open(path) if line.strip()][1:]


def test_apply_gives_the_planned_layouts_and_keeps_contents(tmp_path):
    root = cluster(tmp_path)
    sha = digests(root)
    plan, path = planned(tmp_path, root)
    assert plan["moves"] and plan["spread_after"] <= 0.10
    out = json.loads(iez("rebalance", "apply", path, "--json").stdout)
    assert out["files_moved"] == len(plan["moves"]) and out["bytes_moved"] == plan["bytes_moved"]
    assert out["skipped"] == []
    for m in plan["moves"]:
        shown = json.loads(iez("layout", "show", m["file"], "--json").stdout)
        assert shown["osts"] == m["to"] and shown["stripe_size"] == m["stripe_size"]
    assert digests(root) == sha
    assert leftovers(root) == []
    # what the files now put on each OST is the plan's fill after (no pre-existing fill on these OSTs)
    usage = json.loads(iez("usage", root / "data", "--json", "--osts", 8).stdout)
    fills = {o["index"]: o["fill_after"] for o in plan["osts"]}
    for o in usage["osts"]:
        assert abs(o["bytes"] / (16 * MiB) - fills[o["index"]]) < 1e-5
    replan = json.loads(iez("rebalance", "plan", "--cluster", root, "--json").stdout)
    assert replan["spread_before"] <= 0.10 and replan["moves"] == []
    again = json.loads(iez("rebalance", "apply", path, "--json").stdout)
    assert again["files_moved"] == 0 and again["already_done"] == len(plan["moves"])


def test_kill_9_mid_apply_then_rerun_moves_every_file_exactly_once(tmp_path):
    root = cluster(tmp_path, mib_s=4.0)  # slow OSTs under IEZ_EMULATE: the apply takes seconds
    sha = digests(root)
    plan, path = planned(tmp_path, root)
    journal = tmp_path / "journal"
    env = {**os.environ, "IEZ_EMULATE": str(root)}
    proc = subprocess.Popen([*IEZ, "rebalance", "apply", path, "--journal", str(journal)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if journal.exists() and sum(r["event"] == "done" for r in journal_records(journal)) >= 3:
            break
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    records = journal_records(journal)
    done_before = {r["file"] for r in records if r["event"] == "done"}
    assert 3 <= len(done_before) < len(plan["moves"])  # killed in the middle
    started = time.monotonic()
    out = json.loads(iez("rebalance", "apply", path, "--journal", journal, "--json", env=env).stdout)
    elapsed = time.monotonic() - started
    assert out["already_done"] + out["files_moved"] == len(plan["moves"]) and out["skipped"] == []
    assert out["already_done"] >= len(done_before)
    records = journal_records(journal)
    for m in plan["moves"]:
        dones = [r for r in records if r["file"] == m["file"] and r["event"] == "done"]
        assert len(dones) == 1, m["file"]  # renamed over the original once
        assert os.stat(m["file"]).st_ino == dones[0]["ino"]
        assert json.loads(iez("layout", "show", m["file"], "--json").stdout)["osts"] == m["to"]
    assert digests(root) == sha
    assert leftovers(root) == []
    # the rerun's I/O ran under the emulated bandwidth: each OST took its bytes at 4 MiB/s at most
    rest = [m for m in plan["moves"] if m["file"] not in done_before]
    onto: dict[int, int] = {}
    for m in rest:
        for j in set(m["to"]) - set(m["from"]):
            onto[j] = onto.get(j, 0) + m["bytes"] // len(m["to"])
    assert elapsed >= 0.8 * max(onto.values()) / (4 * MiB)


def test_open_for_writing_and_changed_files_are_skipped(tmp_path):
    root = cluster(tmp_path)
    plan, path = planned(tmp_path, root)
    assert len(plan["moves"]) >= 3
    held, changed = plan["moves"][0]["file"], plan["moves"][1]["file"]
    with open(changed, "ab") as handle:
        handle.write(b"appended after the plan")
    sha = digests(root)
    writer = subprocess.Popen([sys.executable, "-c", "import sys, time\nf = open(sys.argv[1], 'r+b')\n"
                               "print('open', flush=True)\ntime.sleep(60)", held], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "open"
        out = json.loads(iez("rebalance", "apply", path, "--json").stdout)
    finally:
        writer.kill()
        writer.wait()
    reasons = {s["file"]: s["reason"] for s in out["skipped"]}
    assert set(reasons) == {held, changed}
    assert f"open for writing (pid {writer.pid})" in reasons[held]
    assert "changed since the plan" in reasons[changed]
    assert out["files_moved"] == len(plan["moves"]) - 2
    for m in plan["moves"][:2]:
        assert json.loads(iez("layout", "show", m["file"], "--json").stdout)["osts"] == m["from"]
    assert digests(root) == sha
    assert leftovers(root) == []


def test_apply_errors_are_one_line(tmp_path):
    done = iez("rebalance", "apply", tmp_path / "missing.json", check=False)
    assert done.returncode == 2 and "no such plan" in done.stderr
    (tmp_path / "bad.json").write_text("{}")
    done = iez("rebalance", "apply", tmp_path / "bad.json", check=False)
    assert done.returncode == 2 and "not a rebalance plan" in done.stderr and "Traceback" not in done.stderr
