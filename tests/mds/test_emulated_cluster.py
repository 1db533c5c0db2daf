"""Three real agents on an emulated cluster, the MDS and the DB: the whole control loop over loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import fresh_db, iez_cli
from iez.config import database_url
from iez.db.engine import make_engine, read, write_session
from iez.db.requests import RequestIn, upsert_requests
from iez.emulate.cluster import EmulationKeys, ensure_keys
from mds_helpers import mds_factory  # noqa: F401 (fixture)
from waiting import wait_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def start_agent(root: Path, k: int, endpoint: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "agents.cli", "--root", str(root / f"oss{k}"), "--oss-id",
                             f"oss{k}", "--mds", endpoint, "--interval", "1", "--fsname", "iezfs",
                             *EmulationKeys(root / "keys").agent_options(f"oss{k}")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def agent_pids(root: Path, k: int) -> list[int]:
    out = subprocess.run(["pgrep", "-f", "--", f"--root {root}/oss{k} --oss-id oss{k} "], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_agents_mds_and_db_on_an_emulated_cluster(tmp_path, mds_factory):
    db = fresh_db("sqlite", tmp_path, "e2e")
    root = tmp_path / "cluster"
    # the MDS starts first, with the keys the emulation then finds and uses (authenticated as on a real cluster)
    mds = mds_factory(db, *ensure_keys(root, ["oss0", "oss1", "oss2"]).mds_options()).start()
    emulate = subprocess.Popen([sys.executable, "-m", "iez.cli", "cluster", "emulate", "--root", str(root),
                                "--oss", "3", "--osts-per-oss", "5", "--ost-size", "1G", "--mds", mds.endpoint,
                                "--interval", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        status = mds.wait(lambda s: sorted(s["osses"]["fresh"]) == ["oss0", "oss1", "oss2"] and s["osts"] == 15,
                          timeout=30, what="three agents")
        # a job's requests arrive: the MDS allocates them on the live view
        engine = make_engine(database_url(db))
        data = root / "data"
        with write_session(engine) as s:
            upsert_requests(s, "writer", [RequestIn(str(data / f"part.{i}"), 96 * 2**20, 3, rank=i) for i in range(5)])
        mds.wait(lambda s: s["allocation"]["files"] == 5, what="allocation")

        # the application writes them through the preload library; the trees, the agents and the MDS follow
        subprocess.run(["make", "-s", "-C", str(ROOT / "placement_lib")], check=True, stdout=subprocess.DEVNULL)
        env = {**os.environ, "LD_PRELOAD": str(ROOT / "placement_lib/build/libiez.so"), "IEZ_DB": db,
               "IEZ_STATE_DIR": str(tmp_path / "state"), "IEZ_INCLUDE": str(data)}
        writer = "import sys\nfor i in range(5):\n    open(f'{sys.argv[1]}/part.{i}', 'wb').write(b'x' * (96 << 20))\n"
        subprocess.run([sys.executable, "-c", writer, str(data)], env=env, check=True)
        usage = subprocess.run(["iez", "usage", str(data), "--json", "--osts", "15"], capture_output=True, text=True,
                               check=True)
        assert '"placed_files": 5' in usage.stdout
        status = mds.wait(lambda s: s["reservations_ended"] >= 15, timeout=20, what="reservations caught up")
        from sqlalchemy import func, select
        from iez.db.models import OstRow, Reservation
        left = read(engine, lambda c: c.scalar(select(func.count()).select_from(Reservation)))
        assert left == 0  # every stripe written: nothing stays reserved until the time-out
        used_kb = read(engine, lambda c: c.scalar(select(func.sum(OstRow.kbytes_total - OstRow.kbytes_avail))))
        assert used_kb == 5 * 96 * 1024

        # kill one agent: its OSS goes stale within three intervals; a new agent brings it back
        pids = agent_pids(root, 1)
        assert pids, "the emulator's agent for oss1 is not running"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        status = mds.wait(lambda s: "oss1" in s["osses"]["stale"], timeout=40, what="oss1 stale")
        # stale once three 1 s intervals and the 10 s margin (a report in flight, iez.freshness) pass without a
        # message, found by the MDS's 1 s check
        silent = status["osses"]["stale_since"]["oss1"] - status["osses"]["last_seen"]["oss1"]
        assert 13.0 < silent <= 13.0 + 1.5
        assert sorted(status["osses"]["fresh"]) == ["oss0", "oss2"]  # the others, still reporting, stay in
        assert "oss1 missed 3 report intervals" in mds.log.read_text()
        agent = start_agent(root, 1, mds.endpoint)
        try:
            mds.wait(lambda s: sorted(s["osses"]["fresh"]) == ["oss0", "oss1", "oss2"], timeout=15, what="oss1 back")
        finally:
            agent.terminate()
            agent.wait(timeout=10)
        engine.dispose()
    finally:
        emulate.send_signal(signal.SIGTERM)
        out, err = emulate.communicate(timeout=30)
    assert emulate.returncode == 0, err
    assert not agent_pids(root, 0) and not agent_pids(root, 2)  # the emulator stopped the agents it started


def live_osts(db: str) -> dict[int, tuple]:
    done = iez_cli("status", "--db", db, "--json")
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    if not view["oss"] or not all(o["fresh"] for o in view["oss"]):
        return {}
    return {o["index"]: (o["state"], tuple(o["pools"])) for o in view["osts"]}


def test_an_admins_change_on_a_running_emulation_reaches_iez_status(tmp_path, mds_factory):
    """Real agents on trees made from a description, the MDS reading the emulated MDS tree, and an administrator
    changing a state, a pool and an osp parameter: iez status shows each within a few intervals."""
    db = fresh_db("sqlite", tmp_path, "admin")
    desc = tmp_path / "cluster.json"
    desc.write_text(json.dumps({"oss": [
        {"id": "oss0", "osts": [{"index": 0, "kbytes_total": 1 << 20, "kbytes_avail": 1 << 20, "pools": ["flash"]},
                                {"index": 1, "kbytes_total": 1 << 20, "kbytes_avail": 900000, "pools": ["flash"],
                                 "state": "degraded"}]},
        {"id": "oss1", "osts": [{"index": 2, "kbytes_total": 1 << 21, "kbytes_avail": 1 << 21, "pools": ["disk"]},
                                {"index": 3, "kbytes_total": 1 << 21, "kbytes_avail": 1 << 20, "pools": ["disk"],
                                 "state": "inactive"}]}]}))
    root = tmp_path / "root"
    made = iez_cli("cluster", "emulate", "--cluster", str(desc), "--root", str(root), "--no-agents")
    assert made.returncode == 0, made.stderr
    mds = mds_factory(db, "--lustre-params", str(root / "mds"), *EmulationKeys(root / "keys").mds_options()).start()
    emulate = subprocess.Popen([sys.executable, "-m", "iez.cli", "cluster", "emulate", "--cluster", str(desc),
                                "--root", str(root), "--mds", mds.endpoint, "--interval", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        before = {0: ("active", ("flash",)), 1: ("degraded", ("flash",)), 2: ("active", ("disk",)),
                  3: ("inactive", ("disk",))}
        wait_for(lambda: live_osts(db) == before, 30, "the description's states and pools in iez status")
        status = mds.wait(lambda s: s["ost_states"] == {"degraded": [1], "inactive": [3]}, what="MDS status")
        assert status["lustre"]["pools"] == {"disk": [2, 3], "flash": [0, 1]}

        for change in (("--ost", "2", "--state", "readonly"), ("--pool", "flash", "--add-osts", "2"),
                       ("--param", "osp.*-OST0003-*.active=1")):
            done = iez_cli("cluster", "set", "--root", str(root), *change)
            assert done.returncode == 0, done.stderr
        changed = time.monotonic()
        after = {0: ("active", ("flash",)), 1: ("degraded", ("flash",)), 2: ("readonly", ("disk", "flash")),
                 3: ("active", ("disk",))}
        wait_for(lambda: live_osts(db) == after, 20, "the administrator's changes in iez status")
        # agents and the MDS read every 1 s; the MDS stores what it received at least every 5 s
        assert time.monotonic() - changed < 15
        mds.wait(lambda s: s["ost_states"] == {"degraded": [1], "readonly": [2]}, what="the MDS's view")
    finally:
        emulate.send_signal(signal.SIGTERM)
        out, err = emulate.communicate(timeout=30)
    assert emulate.returncode == 0, err
