"""`iez rebalance apply` under kill -9 with resume (issue 27, items 4 and 5), as the testers ran it: every file
of an unevenly filled emulated cluster carries every attribute cp -a keeps (setuid/setgid/sticky bits, owner,
ACL, user./trusted. attributes, security.capability, atime older than mtime; every other large file a hole),
the apply killed with SIGKILL at a random point 20 times (each run resuming from the journal), then run to
the end. No planned file is lost, corrupted or changed in any attribute, no temporary is left, the complete
run's --json says how many it removed, and the files the plan did not move are untouched."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "move"))

from move_helpers import rebalance_under_kills  # noqa: E402

pytestmark = pytest.mark.slow


def test_twenty_kills_then_a_complete_apply(tmp_path):
    r = rebalance_under_kills(tmp_path, kills=20, seed=27)
    assert r["exit"] == 0, r["stderr"]
    assert r["killed"] >= 10, r
    assert r["files_tried"] >= 10 and (r["lost"], r["corrupted"]) == (0, 0), r
    assert r["attributes_changed"] == 0, r["examples"]
    assert r["skipped"] == 0 and r["files_moved"] + r["already_done"] == r["files_tried"], r
    assert r["temporaries_removed_said"] == r["temporaries_before_the_complete_run"], r
    assert r["temporaries_left"] == 0, r
    assert r["not_planned_changed"] == 0, r
