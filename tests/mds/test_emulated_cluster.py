"""Three real agents on an emulated cluster, the MDS and the DB: the whole control loop over loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import fresh_db
from iez.config import database_url
from iez.db.engine import make_engine, read, write_session
from iez.db.requests import RequestIn, upsert_requests
from mds_helpers import mds_factory  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(240)


def start_agent(root: Path, k: int, endpoint: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "agents.cli", "--root", str(root / f"oss{k}"), "--oss-id",
                             f"oss{k}", "--mds", endpoint, "--interval", "1", "--fsname", "iezfs"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def agent_pids(root: Path, k: int) -> list[int]:
    out = subprocess.run(["pgrep", "-f", "--", f"--root {root}/oss{k} --oss-id oss{k} "], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_agents_mds_and_db_on_an_emulated_cluster(tmp_path, mds_factory):
    db = fresh_db("sqlite", tmp_path, "e2e")
    mds = mds_factory(db).start()
    root = tmp_path / "cluster"
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
        status = mds.wait(lambda s: "oss1" in s["osses"]["stale"], timeout=15, what="oss1 stale")
        # stale once three 1 s intervals pass without a message, found by the MDS's 1 s check
        silent = status["osses"]["stale_since"]["oss1"] - status["osses"]["last_seen"]["oss1"]
        assert 3.0 < silent <= 3.0 + 1.5
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
