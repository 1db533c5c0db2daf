"""kill -9 of the active MDS service at random points while requests arrive: every request allocated exactly
once, and the standby (which ingested the agents' reports all along) takes over within 2 report intervals.

Real processes: two ``iez mds --standby`` on one DB, an agent's two-endpoint publisher
(:class:`agents.publisher.Publishers`), a writer storing requests throughout. The run itself is
``benchmarks/mds_failover.py`` (10 kills there, with the figures; 3 here).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from conftest import BACKENDS, fresh_db

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from mds_failover import drill  # noqa: E402

pytestmark = pytest.mark.slow

INTERVAL = 2.0


def check(result: dict) -> None:
    print(result)
    assert result["requests"] > 0 and result["writer_errors"] == 0
    # every request stored (those stored just before a kill included) allocated exactly once
    assert result["allocated_once"] == result["requests"], result
    assert result["allocated_twice_or_more"] == 0 and result["never_allocated"] == 0 and result["unknown_rows"] == 0
    assert len(result["takeovers"]) == result["kills"]
    # failover within 2 report intervals of the death, with the view the standby kept warm
    assert result["claimed_max_intervals"] <= 2.0, result["takeovers"]
    assert result["warm_views"] == result["kills"], result["takeovers"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_9_of_the_active_mds_loses_and_duplicates_no_allocation(backend, tmp_path):
    db = fresh_db(backend, tmp_path, "failover")
    check(drill(db, tmp_path, kills=3, interval=INTERVAL, seed=7))


@pytest.mark.skipif(shutil.which("unshare") is None or not hasattr(__import__("os"), "geteuid")
                    or __import__("os").geteuid() != 0, reason="PID namespaces (unshare) need root")
def test_a_standby_on_another_node_takes_over_when_the_lease_goes_stale(tmp_path):
    """Each service in a PID namespace of its own: the standby cannot see the holder's process die, so it
    takes over on the lease's staleness alone (3 lease intervals of half a report interval)."""
    db = fresh_db("sqlite", tmp_path, "failover_remote")
    result = drill(db, tmp_path, kills=2, interval=INTERVAL, seed=3, cross_node=True)
    check(result)
    assert min(t["claimed_intervals"] for t in result["takeovers"]) >= 1.0  # it did wait for staleness
