"""The apply journal: a record cut short by a kill is dropped and the next starts on its own line; a journal
belongs to one plan; a rename that happened just before a kill is recognised by the inode."""

from __future__ import annotations

import json
import os
import random

import pytest
from rebalance_helpers import KiB, write_file

from iez.layout.model import Layout
from iez.move.migrate import Identity, migrate
from iez.move.migrate import tmp_path as copy_name
from iez.rebalance.apply import apply, load_plan
from iez.rebalance.journal import COPIED, DONE, Journal


def test_a_record_cut_short_is_dropped_and_the_next_starts_on_its_own_line(tmp_path):
    path = tmp_path / "j"
    first = Journal(path, "abc")
    first.record("/a", DONE, ino=1)
    first.close()
    with open(path, "ab") as handle:
        handle.write(b'{"file":"/b","ev')  # the kill cut this append short
    second = Journal(path, "abc")
    assert second.state("/a")["event"] == DONE and second.state("/b") is None
    second.record("/b", DONE, ino=2)
    second.close()
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines][-1] == {"file": "/b", "event": DONE, "ino": 2}
    with pytest.raises(ValueError, match="another plan"):
        Journal(path, "def")


def test_a_rename_done_before_the_kill_is_recognised_and_not_repeated(tmp_path):
    rng = random.Random(1)
    data = tmp_path / "data"
    write_file(data / "f", 300 * KiB, (0,), rng)
    st = os.stat(data / "f")
    move = {"file": str(data / "f"), "from": [0], "to": [1], "bytes": st.st_size, "stripe_size": 64 * KiB,
            "pool": None, "ino": st.st_ino, "mtime_ns": st.st_mtime_ns}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"moves": [move]}))
    _, sha = load_plan(str(plan))
    journal = Journal(tmp_path / "plan.json.journal", sha)
    # what a run killed between the rename and its "done" record leaves: the copy renamed, "copied" last
    journal.record(move["file"], "start", to=[1])
    new = migrate(move["file"], Layout(64 * KiB, (1,)), Identity(st.st_ino, st.st_size, st.st_mtime_ns),
                  copied=lambda ino: journal.record(move["file"], COPIED, ino=ino))
    journal.close()
    report = apply(str(plan))
    assert report.moved == 1 and report.skipped == []
    assert os.stat(move["file"]).st_ino == new  # not copied a second time
    assert not os.path.exists(copy_name(move["file"]))
