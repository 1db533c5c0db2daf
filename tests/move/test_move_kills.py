"""`iez copy` under kill -9 (issue 27, items 4 and 5), as the testers ran it: 24 sparse, striped files carrying
every attribute cp -a keeps (setuid/setgid/sticky bits, owner, ACL, user./trusted. attributes,
security.capability, atime older than mtime) copied into an emulated cluster, the copy killed with SIGKILL at a
random point 20 times, then run to the end. Nothing is lost or corrupted, no attribute changes, no temporary is
left, the complete run's --json says how many it removed (those the last killed run left: each run removes the
ones before it), and the sources are as they were (their atime too)."""

from __future__ import annotations

import pytest

from move_helpers import copy_under_kills

pytestmark = pytest.mark.slow


def test_twenty_kills_then_a_complete_copy(tmp_path):
    r = copy_under_kills(tmp_path, kills=20, seed=27)
    assert r["exit"] == 0, r["stderr"]
    assert r["killed"] >= 15, r  # the kills land while the copy runs
    assert (r["files_tried"], r["lost"], r["corrupted"]) == (24, 0, 0), r
    assert r["attributes_changed"] == 0, r["examples"]
    assert r["temporaries_before_the_complete_run"] > 0, r
    assert r["temporaries_removed_said"] == r["temporaries_before_the_complete_run"], r
    assert r["temporaries_left"] == 0, r
    assert r["sources_changed"] == 0, r
