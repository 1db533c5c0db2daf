"""Shared pieces of the OSS agent tests: the real lctl fixtures, the installed console
script, and ways to run it as a real process.

A helper module rather than a conftest.py: other suites import ``conftest`` by name
(``from conftest import fresh_db``), and a second conftest module here would shadow
theirs. Test modules import the fixtures they use from here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(os.environ.get("IEZ_LUSTRE_PARAMS", Path(__file__).resolve().parents[1] / "data" / "lustre-params"))
FIXTURES = sorted(DATA.glob("*.txt"))

# Facts read off each file by hand: name -> (index, kbytestotal, kbytesavail, read_bytes, write_bytes)
FACTS = {
    "lustre-2.15-ex8761-lctl.txt": {
        "fs-OST0000": (0, 4108388, 4037172, None, None),
        "fs-OST0001": (1, 4108388, 4037172, None, None),
    },
    "lustre-2.14.0-ddn133.txt": {
        "ai400x2-OST0000": (0, 35016088872, 31477515820, 58370831220736, 47288584560640),
        "ai400x2-OST0001": (1, 35016088872, 31406306552, 71484548943872, 54592520048640),
    },
    "lustre-2.14.0-ddn145-stats.txt": {
        "fs-OST0000": (0, 4108388, 4038040, None, None),
        "fs-OST0001": (1, 4108388, 4038040, None, None),
    },
    "exascaler-6.2.0-params.txt": {
        "fs-OST0000": (0, 4108388, 4037332, None, None),
        "fs-OST0001": (1, 4108388, 4037332, None, None),
    },
    "osd.txt": {  # two file systems; fs-OST0003 and exa01-OST0013 have no capacity lines
        "fs-OST0000": (0, 4108388, 4037288, None, None),
        "fs-OST0010": (16, 4108388, 4037288, None, None),
    },
    "osd-active.txt": {  # ai400x2-OST0003 has only osd stats
        "ai400x2-OST0000": (0, 3461006668, 3258994352, None, None),
        "ai400x2-OST0001": (1, 3461006668, 3259399856, None, None),
    },
}

# What a version-2 message says of an OST whose source printed no state switch
UNKNOWN_STATE = {"state": "active", "degraded": None, "no_precreate": None, "readonly": None}

# The OSTs of the proc_tree fixture, as a message lists them (fs-OST0000 has its switches, all off)
TREE_OSTS = [
    {"name": "fs-OST0000", "index": 0, "kbytes_total": 4108388, "kbytes_avail": 4037172,
     "read_bytes": 5000000, "write_bytes": 7000000,
     "state": "active", "degraded": False, "no_precreate": False, "readonly": False},
    {"name": "fs-OST000a", "index": 10, "kbytes_total": 2000000, "kbytes_avail": 1500000,
     "read_bytes": None, "write_bytes": None, **UNKNOWN_STATE},
]


def agent_command() -> list[str]:
    """The installed ``iez-agent`` console script (``pip install -e .``)."""
    script = Path(sys.executable).parent / "iez-agent"
    if script.exists():
        return [str(script)]
    found = shutil.which("iez-agent")
    assert found, "iez-agent is not installed: run pip install -e ."
    return [found]


@pytest.fixture
def run_agent():
    """Run ``iez-agent ARGS`` to completion; returns the CompletedProcess (text)."""

    def run(*args: str, timeout: float = 20, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        full_env = {k: v for k, v in os.environ.items() if k != "IEZ_AGENT_CONFIG"}
        full_env.update(env or {})
        return subprocess.run([*agent_command(), *args], capture_output=True, text=True, timeout=timeout,
                              env=full_env, check=False)

    return run


@pytest.fixture
def spawn_agent():
    """Start ``iez-agent ARGS`` in the background; every process is stopped at the end."""
    procs: list[subprocess.Popen] = []

    def spawn(*args: str) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if k != "IEZ_AGENT_CONFIG"}
        proc = subprocess.Popen([*agent_command(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


@pytest.fixture
def proc_tree(tmp_path: Path) -> Path:
    """A parameter tree like a two-OST OSS: capacity of fs-OST0000 in the obdfilter
    layout, of fs-OST000a in the osd-ldiskfs layout, stats under obdfilter, and an
    MDT that must be ignored."""
    root = tmp_path / "lustre"
    ost0 = root / "obdfilter" / "fs-OST0000"
    ost0.mkdir(parents=True)
    (ost0 / "kbytestotal").write_text("4108388\n")
    (ost0 / "kbytesavail").write_text("4037172\n")
    (ost0 / "stats").write_text(
        "snapshot_time             1709306082.170995043 secs.nsecs\n"
        "read_bytes                10 samples [bytes] 4096 1048576 5000000 9000000000000\n"
        "write_bytes               20 samples [bytes] 4096 1048576 7000000 9000000000000\n"
        "statfs                    142531 samples [usecs] 0 26666 634747 714999967\n")
    osd = root / "osd-ldiskfs" / "fs-OST000a"
    osd.mkdir(parents=True)
    for flag in ("degraded", "readonly", "no_precreate"):  # sysfs switches, as on Lustre 2.14+
        (ost0 / flag).write_text("0\n")
    (osd / "kbytestotal").write_text("2000000\n")
    (osd / "kbytesavail").write_text("1500000")  # no final newline
    (root / "obdfilter" / "fs-OST000a").mkdir()
    (root / "obdfilter" / "fs-OST000a" / "stats").write_text(
        "snapshot_time             1709306082.170995043 secs.nsecs\n")
    mdt = root / "osd-ldiskfs" / "fs-MDT0000"
    mdt.mkdir(parents=True)
    (mdt / "kbytestotal").write_text("2602832\n")
    (mdt / "kbytesavail").write_text("2365496\n")
    return root
