"""iez rebalance plan/apply with composite (PFL, Data-on-MDT, uninstantiated, pooled), overstriped and mirrored
files: they are planned and moved (no longer files_fixed), each keeping its layout but for the objects moved
off the full OSTs, mirrors in distinct OSSs, bytes and attributes unchanged; files changed or removed after
the plan are skipped and said."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import layout_kinds as lk
from test_drain import check_intact, iez, objects

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "move"))

from move_helpers import compare, temporaries  # noqa: E402


def planned(tmp_path, root) -> tuple[dict, Path]:
    done = iez(tmp_path, "rebalance", "plan", "--cluster", root, "--json", "--improve-s", "0.5", "--target", "0.05")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "plan.json"
    path.write_text(done.stdout)
    return json.loads(done.stdout), path


@pytest.mark.slow
def test_pfl_mirrored_and_overstriped_files_are_planned_and_moved_keeping_their_layouts(tmp_path):
    # one balancing domain (no pool): a file whose OSTs lie in several pools' domains is left to iez drain
    root = lk.cluster(tmp_path, per_ost_mib=32, flash=False)
    snaps = lk.tree(root, n=4, drained=0, plain=False, pooled=False)  # OST 0 (and 6, 7) full, 1, 2, 5 empty
    before = {p: lk.layout_of(p) for p in snaps}
    plan, path = planned(tmp_path, root)
    assert plan["files_fixed"] == 0 and plan["reached"] and plan["spread_before"] > 0.1
    assert plan["moves"] and all("layout" in m for m in plan["moves"])
    kinds = {Path(m["file"]).name.rsplit("-", 1)[0] for m in plan["moves"]}
    assert {"pfl-dom", "mirror", "over"} & kinds and len(kinds) >= 3, kinds
    out = json.loads(iez(tmp_path, "rebalance", "apply", path, "--json", check=0).stdout)
    assert out["files_moved"] == len(plan["moves"]) and out["skipped"] == []
    moved = {m["file"]: m for m in plan["moves"]}
    for p, lay in before.items():
        after = lk.layout_of(p)
        if str(p) not in moved:
            assert after == lay
            continue
        assert [o for _, _, o in objects(after)] == moved[str(p)]["to"]
        full = {o for (_, _, o), (_, _, n) in zip(objects(lay), objects(after)) if o != n}
        if len(full) == 1:  # objects moved off one OST: everything else as it was (check_intact's rules)
            check_intact(lay, after, full.pop())
        assert [[(c.start, c.end, c.stripe_size, c.stripe_count, c.pool, c.dom, bool(c.osts)) for c in m]
                for m in after.copies()] == [[(c.start, c.end, c.stripe_size, c.stripe_count, c.pool, c.dom,
                                               bool(c.osts)) for c in m] for m in lay.copies()]
        if after.mirrors:
            oss = [{o // 2 for c in m for o in c.osts} for m in after.mirrors]
            assert not oss[0] & oss[1]
    result = compare([(s, p) for p, s in snaps.items()])
    assert (result["lost"], result["corrupted"], result["attributes_changed"]) == (0, 0, 0), result["examples"]
    assert temporaries(root / "data") == []
    replan = json.loads(iez(tmp_path, "rebalance", "plan", "--cluster", root, "--json", "--target", "0.05").stdout)
    assert replan["spread_before"] <= 0.05 + 1e-6 and replan["moves"] == []


@pytest.mark.slow
def test_a_mirrored_or_pfl_file_changed_or_removed_after_the_plan_is_skipped_and_said(tmp_path):
    root = lk.cluster(tmp_path, per_ost_mib=32, flash=False)
    lk.tree(root, n=4, drained=0, plain=False, pooled=False, decorate_files=False)
    plan, path = planned(tmp_path, root)
    files = [m["file"] for m in plan["moves"]]
    assert len(files) >= 3
    changed, removed = files[0], files[1]
    with open(changed, "r+b") as handle:
        handle.write(b"changed after the plan")
    os.unlink(removed)
    out = json.loads(iez(tmp_path, "rebalance", "apply", path, "--json", check=0).stdout)
    reasons = {s["file"]: s["reason"] for s in out["skipped"]}
    assert "changed since the plan" in reasons[changed] and "gone since the plan" in reasons[removed]
    assert out["files_moved"] == len(files) - 2
    assert [o for _, _, o in objects(lk.layout_of(Path(changed)))] == plan["moves"][0]["from"]
    assert not Path(removed).exists() and temporaries(root / "data") == []


def test_the_planner_keeps_mirrors_in_distinct_domains_and_components_distinct():
    from iez.layout.emulated import parse_attr
    from iez.rebalance.inventory import entry
    from iez.rebalance.plan import Ost, plan_domain

    MiB = 1 << 20
    dom = {0: "oss0", 1: "oss0", 2: "oss1", 3: "oss1"}
    files = []
    for k in range(6):  # mirror 1 on OST 0 (full), mirror 2 on OST 2: OST 3 is emptiest but in mirror 2's OSS
        layout = parse_attr(f"version=3 mirror=1 comp=0:eof:{MiB}:1:0 mirror=2 comp=0:eof:{MiB}:1:2", "f")
        f, _ = entry(f"/m{k}", 4 * MiB, k + 1, 0, 1, layout, {0, 1, 2, 3})
        files.append(f)
    over = parse_attr(f"version=2 comp=0:eof:{MiB}:2:0,1", "g")  # a PFL-style component: its OSTs stay distinct
    g, _ = entry("/g", 8 * MiB, 99, 0, 1, over, {0, 1, 2, 3})
    osts = [Ost(0, 100 * MiB, 60 * MiB), Ost(1, 100 * MiB, 30 * MiB), Ost(2, 100 * MiB, 40 * MiB),
            Ost(3, 100 * MiB, 0)]
    plan = plan_domain(osts, files + [g], target=0.2, domains=dom, improve_s=0.3)
    assert plan.moves and plan.algorithm == "greedy"  # composite/mirrored files: the greedy alone
    for m in plan.moves:
        assert m.file.valid(m.to, dom)
        if m.file.mirrors:
            assert {dom[m.to[0]]} != {dom[m.to[1]]}, m.to
            assert m.to[0] != 3 or dom[m.to[1]] != "oss1"
        else:
            assert len(set(m.to)) == 2


def test_without_the_domains_the_same_plan_would_put_both_mirrors_on_one_oss():
    """The constraint above is what keeps them apart: with each OST its own domain, the emptiest OST (3) takes
    mirror 1 beside mirror 2 on OST 2 (OSS 1)."""
    from iez.layout.emulated import parse_attr
    from iez.rebalance.inventory import entry
    from iez.rebalance.plan import Ost, plan_domain

    MiB = 1 << 20
    layout = parse_attr(f"version=3 mirror=1 comp=0:eof:{MiB}:1:0 mirror=2 comp=0:eof:{MiB}:1:2", "f")
    files = [entry(f"/m{k}", 4 * MiB, k + 1, 0, 1, layout, {0, 1, 2, 3})[0] for k in range(6)]
    osts = [Ost(0, 100 * MiB, 60 * MiB), Ost(1, 100 * MiB, 30 * MiB), Ost(2, 100 * MiB, 40 * MiB),
            Ost(3, 100 * MiB, 0)]
    blind = plan_domain(osts, files, target=0.2, improve_s=0.2)
    assert any(m.to == (3, 2) for m in blind.moves)
    dom = {0: "oss0", 1: "oss0", 2: "oss1", 3: "oss1"}
    kept = plan_domain(osts, files, target=0.2, domains=dom, improve_s=0.2)
    assert kept.moves and all(dom[m.to[0]] != dom[m.to[1]] for m in kept.moves)
