"""The live load is measured, not configured: a real process re-reading a file on one emulated OST and a
background load set with `iez cluster set --load` on another reach the emulated servers' counters, the agents,
the MDS's view and `iez status`; idle OSTs show about 0 and cluster.json carries no load for the first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import fresh_db
from iez.emulate.cluster import ensure_keys
from mds_helpers import mds_factory  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "placement_lib" / "build" / "libiez.so"
MiB = 1 << 20
pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

REREAD = r"""
import sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
end = time.monotonic() + seconds
with open(path, "rb", buffering=0) as f:
    while time.monotonic() < end:
        f.seek(0)
        while f.read(1 << 20):
            pass
"""


def status_view(db: str, state: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "iez.cli", "status", "--json", "--db", db], capture_output=True,
                          text=True, env={**os.environ, "IEZ_STATE_DIR": str(state)}, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def status(db: str, state: Path) -> dict:
    return {o["index"]: o["load_mib_s"] for o in status_view(db, state)["osts"]}


def test_a_real_reader_and_a_background_load_show_in_status_and_idle_osts_do_not(tmp_path, mds_factory):
    subprocess.run(["make", "-s", "-C", str(ROOT / "placement_lib")], check=True, stdout=subprocess.DEVNULL)
    db = fresh_db("sqlite", tmp_path, "live")
    root, data = tmp_path / "cluster", tmp_path / "cluster" / "data"
    desc = {"oss": [{"id": f"oss{k}", "bandwidth_mib_s": 1000, "osts": [
        {"index": i, "kbytes_total": 1 << 20, "kbytes_avail": 1 << 20, "bandwidth_mib_s": 40}
        for i in (2 * k, 2 * k + 1)]} for k in range(2)]}
    (tmp_path / "desc.json").write_text(json.dumps(desc))
    mds = mds_factory(db, *ensure_keys(root, ["oss0", "oss1"]).mds_options()).start()
    emulate = subprocess.Popen([sys.executable, "-m", "iez.cli", "cluster", "emulate", "--root", str(root),
                                "--cluster", str(tmp_path / "desc.json"), "--mds", mds.endpoint, "--interval", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    reader = None
    try:
        mds.wait(lambda s: s["osts"] == 4 and len(s["osses"]["fresh"]) == 2, timeout=30, what="two agents")
        target = data / "input.dat"
        target.write_bytes(b"r" * (8 * MiB))
        os.setxattr(target, "user.iez.layout", b"version=1 stripe_size=1048576 stripe_count=1 osts=0")
        reader = subprocess.Popen([sys.executable, "-c", REREAD, str(target), "60"],
                                  env={**os.environ, "LD_PRELOAD": str(LIB), "IEZ_MODE": "off",
                                       "IEZ_EMULATE": str(root), "IEZ_STATE_DIR": str(tmp_path / "state")})
        subprocess.run([sys.executable, "-m", "iez.cli", "cluster", "set", "--root", str(root), "--ost", "2",
                        "--load", "25"], check=True, capture_output=True)

        # the window is three 1 s intervals: within a few more the full rates are seen
        deadline, loads = time.monotonic() + 40, {}
        while time.monotonic() < deadline:
            loads = status(db, tmp_path / "state")
            if loads.get(0, 0) > 40 * 0.85 and loads.get(2, 0) > 25 * 0.85:
                break
            time.sleep(1)
        assert loads[0] == pytest.approx(40, rel=0.15), loads  # the reader gets its OST's 40 MiB/s, all of it
        assert loads[2] == pytest.approx(25, rel=0.15), loads
        assert loads[1] < 0.5 and loads[3] < 0.5, loads
        # the MDS's own view agrees with iez status (one rule, iez.traffic)
        seen = mds.wait(lambda s: "0" in s.get("loads_mib_s", {}) and "2" in s["loads_mib_s"], timeout=10,
                        what="the MDS's loads")["loads_mib_s"]
        assert seen["0"] == pytest.approx(40, rel=0.15) and seen["2"] == pytest.approx(25, rel=0.15)
        assert "1" not in seen and "3" not in seen
        # iez status names the active MDS (the DB's record, iez.mds.lease)
        active = status_view(db, tmp_path / "state")["mds"]
        assert active["active"] is True and active["pid"] == mds.proc.pid and active["generation"] >= 1, active
        # the description holds the physics only: no configured load on the OST the reader keeps busy
        described = json.loads((root / "cluster.json").read_text())
        by_index = {o["index"]: o for oss in described["oss"] for o in oss["osts"]}
        assert by_index[0]["load_mib_s"] == 0 and by_index[2]["load_mib_s"] == 25

        # the reader stops and the load is dropped: both fall back to about 0 after the window
        reader.terminate()
        reader.wait(10)
        subprocess.run([sys.executable, "-m", "iez.cli", "cluster", "set", "--root", str(root), "--ost", "2",
                        "--load", "0"], check=True, capture_output=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            loads = status(db, tmp_path / "state")
            if loads[0] < 0.5 and loads[2] < 0.5:
                break
            time.sleep(1)
        assert loads[0] < 0.5 and loads[2] < 0.5, loads
    finally:
        if reader is not None and reader.poll() is None:
            reader.kill()
        emulate.terminate()
        emulate.wait(20)
