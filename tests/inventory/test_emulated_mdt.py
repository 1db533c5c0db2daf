"""The emulated MDT: ``iez cluster emulate`` writes Lustre changelog records for what happens in its data
directory, and ``iez inventory follow --once --cluster`` brings the inventory to the tree."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest
from invtools import held, put, tree
from invtools import cluster, engine, inv_db  # noqa: F401 - fixtures

from iez.inventory.emulated_mdt import changelog_path
from iez.inventory.readers import last_index

pytestmark = pytest.mark.slow


def iez(*args: str, db: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "iez.cli", *args, "--db", db], capture_output=True, text=True,
                          timeout=timeout)


def test_files_created_renamed_and_removed_in_an_emulated_cluster_follow_into_the_inventory(inv_db, engine, cluster,
                                                                                            tmp_path):
    rng = random.Random(5)
    data = cluster / "data"
    put(data / "old" / "keep", 4000, (0,), rng)
    put(data / "old" / "gone", 3000, (1,), rng)
    put(data / "old" / "moving", 2000, (2,), rng)
    seeded = iez("inventory", "scan", "--cluster", str(cluster), "--json", db=inv_db)
    assert seeded.returncode == 0, seeded.stderr
    assert json.loads(seeded.stdout)["files"] == 3
    emulator = subprocess.Popen([sys.executable, "-m", "iez.cli", "cluster", "emulate", "--root", str(cluster),
                                 "--oss", "2", "--osts-per-oss", "2", "--ost-size", "64M", "--insecure",
                                 "--mds", "tcp://127.0.0.1:1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, env={**os.environ, "IEZ_DB": inv_db})
    try:
        for line in emulator.stdout:
            if line.startswith("MDT changelog:"):
                break
        else:
            raise AssertionError("the emulator never said where its MDT changelog is")
        put(data / "new" / "a", 5000, (3,), rng)
        os.rename(data / "old" / "moving", data / "new" / "moved")
        os.unlink(data / "old" / "gone")
        log = changelog_path(cluster, "iezfs")
        deadline = time.monotonic() + 10
        while (last_index(log) or 0) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # a poll or two more: the records of the last events
        done = iez("inventory", "follow", "--once", "--cluster", str(cluster), "--json", db=inv_db)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["records"] >= 5 and report["rescans"] == 0
        assert held(engine) == tree(data)
        assert set(held(engine)) == {f"{data}/old/keep", f"{data}/new/a", f"{data}/new/moved"}
        shown = json.loads(iez("inventory", "show", "--json", db=inv_db).stdout)
        assert shown["files"] == 3 and shown["changelogs"][0]["position"] == report["position"]
        assert {o["ost"] for o in shown["per_ost"]} == {0, 2, 3}
    finally:
        emulator.terminate()
        emulator.wait(timeout=20)
