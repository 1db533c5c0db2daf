"""Mirrored layouts through the tools: ``iez alloc add --layout`` with mirrors and ``iez alloc show --json``
(SQLite and MariaDB), a mirrored directory default (``iez layout set-default``, ``iez layout show --json``),
and ``iez usage`` counting every mirror's bytes."""

from __future__ import annotations

import json
import os

import pytest

from conftest import iez_cli

pytestmark = pytest.mark.slow

MIB = 1 << 20
COPY1 = [{"start": 0, "end": 4 * MIB, "stripe_size": MIB, "osts": [0, 1]},
         {"start": 4 * MIB, "end": -1, "stripe_size": MIB, "stripe_count": 4}]
COPY2 = [{"start": 0, "end": -1, "stripe_size": MIB, "osts": [4, 5]}]


def test_alloc_add_with_mirrors_round_trips_through_the_db(db):
    layout = {"mirrors": [COPY1, COPY2], "preferred_mirror": 1}
    added = iez_cli("alloc", "add", "--db", db, "--file", "/l/m", "--layout", json.dumps(layout), "--json")
    assert added.returncode == 0, added.stderr
    shown = iez_cli("alloc", "show", "--db", db, "--file", "/l/m", "--json")
    assert shown.returncode == 0, shown.stderr
    got = json.loads(shown.stdout)
    assert got["osts"] == [0, 1] and got["stripe_count"] == 2  # the first mirror, what old readers take
    assert [[c["osts"] for c in m] for m in got["mirrors"]] == [[[0, 1], []], [[4, 5]]]
    assert got["components"] == got["mirrors"][0]
    assert got["preferred_mirror"] == 1
    text = iez_cli("alloc", "show", "--db", db, "--file", "/l/m")
    assert "mirror 2 preferred: osts 4 5" in text.stdout


def test_alloc_add_refuses_mirrors_sharing_an_ost(db):
    layout = {"mirrors": [COPY2, COPY2]}
    done = iez_cli("alloc", "add", "--db", db, "--file", "/l/m", "--layout", json.dumps(layout))
    assert done.returncode != 0
    assert "mirrors 1 and 2 both use OST 4: one failure would take both copies" in done.stderr


def test_a_mirrored_directory_default_is_set_and_shown(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    env = {"IEZ_STATE_DIR": str(tmp_path / "state"), "IEZ_LAYOUT_XATTR": ""}
    template = {"mirrors": [[{"end": -1, "stripe_count": 2}], [{"end": -1, "stripe_count": 2, "pool": "disk"}]]}
    done = iez_cli("layout", "set-default", str(d), "--layout", json.dumps(template), "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert os.getxattr(d, "user.iez.layout").decode() == (
        "version=3 mirror=1 comp=0:eof:-:2:- mirror=2 comp=0:eof:-:2:-:pool=disk")
    shown = iez_cli("layout", "show", str(d), "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    got = json.loads(shown.stdout)
    assert got["default"] is True and len(got["mirrors"]) == 2
    assert got["mirrors"][1][0]["pool"] == "disk"


def test_usage_counts_every_mirrors_bytes(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    f = d / "m.bin"
    f.write_bytes(b"x" * (2 * MIB))
    os.setxattr(f, "user.iez.layout",
                b"version=3 mirror=1:prefer comp=0:eof:1048576:2:0,1 mirror=2:stale comp=0:eof:1048576:1:5")
    done = iez_cli("usage", str(d), "--json", env={"IEZ_STATE_DIR": str(tmp_path / "state"), "IEZ_LAYOUT_XATTR": ""})
    assert done.returncode == 0, done.stderr
    per_ost = {row["index"]: row["bytes"] for row in json.loads(done.stdout)["osts"]}
    assert per_ost == {0: MIB, 1: MIB, 5: 2 * MIB}
