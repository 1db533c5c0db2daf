"""Plans read the inventory: from a seeded inventory the plan is the walk's plan; a large inventory loads only
candidates and still reaches the target; an unseeded root is walked, and the plan says which it used."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rebalance"))
from rebalance_helpers import fill, make_cluster  # noqa: E402

from invtools import engine, inv_db  # noqa: F401, E402 - fixtures
from iez.inventory import source  # noqa: E402
from iez.inventory.scan import scan  # noqa: E402
from iez.rebalance.inventory import from_cluster  # noqa: E402
from iez.rebalance.pools import build  # noqa: E402


def moves(plan) -> list[tuple]:
    return [(m.file.path, m.file.osts, m.to, m.bytes) for m in plan.moves]


@pytest.fixture
def filled(tmp_path) -> Path:
    root = make_cluster(tmp_path, [{"index": j, "mib": 16} for j in range(8)])
    fill(root, {j: 0.15 + 0.1 * j for j in range(8)}, 16, seed=3)
    return root


@pytest.mark.slow
def test_a_plan_from_the_seeded_inventory_is_the_walks_plan(inv_db, engine, filled, monkeypatch):
    monkeypatch.setenv("IEZ_DB", inv_db)
    monkeypatch.setenv("IEZ_INVENTORY", "off")
    walked = from_cluster(str(filled))
    assert walked.source["inventory"] == "walk"
    monkeypatch.delenv("IEZ_INVENTORY")
    assert from_cluster(str(filled)).source["inventory"] == "walk"  # not seeded yet: walked
    scan(engine, [str(filled / "data")], workers=2)
    stored = from_cluster(str(filled))
    assert stored.source["inventory"] == "store"
    assert sorted(stored.files, key=lambda f: f.path) == sorted(walked.files, key=lambda f: f.path)
    assert [(o.index, o.used) for o in stored.osts] == [(o.index, o.used) for o in walked.osts]
    assert stored.files_fixed == walked.files_fixed
    a, b = build(walked, 0.1, improve_s=0), build(stored, 0.1, improve_s=0)
    assert b.reached and moves(b) == moves(a)


@pytest.mark.slow
def test_a_large_inventory_loads_only_candidates_and_reaches_the_target(inv_db, engine, filled, monkeypatch):
    monkeypatch.setenv("IEZ_DB", inv_db)
    scan(engine, [str(filled / "data")], workers=1)
    whole = from_cluster(str(filled))
    monkeypatch.setattr(source, "FULL_LOAD_FILES", 0)  # as if it held millions of files
    some = from_cluster(str(filled))
    assert some.source["inventory"] == "store"
    assert 0 < len(some.files) < len(whole.files)
    assert [(o.index, o.used) for o in some.osts] == [(o.index, o.used) for o in whole.osts]  # totals in SQL
    mean = sum(o.used for o in whole.osts) / sum(o.capacity for o in whole.osts)
    assert all(any(o.fill > mean for o in whole.osts if o.index in f.osts) for f in some.files)
    full, partial = build(whole, 0.1, improve_s=0), build(some, 0.1, improve_s=0)
    assert partial.reached
    assert sum(m.bytes for m in partial.moves) <= 1.1 * sum(m.bytes for m in full.moves)
