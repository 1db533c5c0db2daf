"""``iez usage`` and ``iez layout show`` on real files carrying emulated layouts, run as the command."""

from __future__ import annotations

import json
import os

import pytest

from layout_helpers import iez, make

MIB = 1 << 20


def usage_json(tmp_path, *args) -> dict:
    proc = iez(tmp_path, "usage", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_bytes_per_ost_follow_raid0_arithmetic(tmp_path):
    d = tmp_path / "run"
    # 3.5 MiB at 1 MiB over 2,5: stripes 0,1,0 full, half of the 4th chunk on stripe 1.
    make(d / "a", 3 * MIB + MIB // 2, "version=1 stripe_size=1048576 stripe_count=2 osts=2,5")
    # 5 MiB + 100 over 0,1,2: one full round (1 MiB each), then 1 MiB, 1 MiB, 100 bytes.
    make(d / "sub" / "deep" / "b", 5 * MIB + 100, "version=1 stripe_size=1048576 stripe_count=3 osts=0,1,2")
    make(d / "sub" / "plain", 12345)
    out = usage_json(tmp_path, str(d))
    assert out["dir"] == str(d)
    assert (out["files"], out["placed_files"], out["unplaced_files"], out["unplaced_bytes"]) == (3, 2, 1, 12345)
    assert out["osts"] == [
        {"index": 0, "bytes": 2 * MIB},
        {"index": 1, "bytes": 2 * MIB},
        {"index": 2, "bytes": 2 * MIB + MIB + 100},
        {"index": 5, "bytes": MIB + MIB // 2},
    ]
    total = 2 * MIB + 2 * MIB + 3 * MIB + 100 + MIB + MIB // 2
    assert out["max_bytes"] == 3 * MIB + 100
    assert out["mean_bytes"] == pytest.approx(total / 4)
    assert out["ost_cost"] == pytest.approx((3 * MIB + 100) / (total / 4))


def test_pool_and_capacity_give_utilisation_and_count_empty_osts(tmp_path):
    d = tmp_path / "run"
    make(d / "a", 3 * MIB + MIB // 2, "version=1 stripe_size=1048576 stripe_count=2 osts=2,5")
    out = usage_json(tmp_path, str(d), "--osts", "8", "--ost-size", "16M")
    assert [o["index"] for o in out["osts"]] == list(range(8))
    by_index = {o["index"]: o for o in out["osts"]}
    assert by_index[2] == {"index": 2, "bytes": 2 * MIB, "util": pytest.approx(2 / 16)}
    assert by_index[5]["util"] == pytest.approx(1.5 / 16)
    assert by_index[0] == {"index": 0, "bytes": 0, "util": 0.0}
    # max / mean over all eight OSTs, the six empty ones included
    assert out["mean_bytes"] == pytest.approx(3.5 * MIB / 8)
    assert out["ost_cost"] == pytest.approx(2 / (3.5 / 8))
    without_size = usage_json(tmp_path, str(d), "--osts", "8")
    assert "util" not in without_size["osts"][0]
    assert without_size["ost_cost"] == pytest.approx(out["ost_cost"])


def test_symlinks_are_not_followed_and_hard_links_count_once(tmp_path):
    d, outside = tmp_path / "run", tmp_path / "outside"
    make(outside / "big", 8 * MIB, "version=1 stripe_size=1048576 stripe_count=1 osts=9")
    placed = make(d / "a", 2 * MIB, "version=1 stripe_size=1048576 stripe_count=1 osts=1")
    os.link(placed, d / "a.hardlink")
    os.symlink(outside / "big", d / "file-link")
    os.symlink(outside, d / "dir-link")
    out = usage_json(tmp_path, str(d))
    assert out["files"] == 1 and out["osts"] == [{"index": 1, "bytes": 2 * MIB}]
    assert out["ost_cost"] == 1.0


def test_sidecar_log_places_files_without_the_attribute(tmp_path):
    d = tmp_path / "run"
    logged = make(d / "logged", 4 * MIB)
    make(d / "plain", 10)
    state = tmp_path / "state"
    state.mkdir()
    (state / "layouts.log").write_text(f"version=1 stripe_size=2097152 stripe_count=2 osts=3,4\t{logged}\n")
    out = usage_json(tmp_path, str(d))
    assert out["placed_files"] == 1 and out["unplaced_files"] == 1
    assert out["osts"] == [{"index": 3, "bytes": 2 * MIB}, {"index": 4, "bytes": 2 * MIB}]
    shown = iez(tmp_path, "layout", "show", logged, "--json")
    assert json.loads(shown.stdout) == {"file": logged, "stripe_size": 2097152, "stripe_count": 2,
                                        "osts": [3, 4], "source": "emulated"}


def test_no_bytes_means_no_ost_cost(tmp_path):
    d = tmp_path / "run"
    make(d / "empty-placed", 0, "version=1 stripe_size=1048576 stripe_count=1 osts=4")
    make(d / "plain", 77)
    out = usage_json(tmp_path, str(d))
    assert out["osts"] == [{"index": 4, "bytes": 0}]
    assert out["ost_cost"] is None and out["max_bytes"] == 0
    assert usage_json(tmp_path, str(tmp_path / "run" / ".."))["ost_cost"] is None


def test_an_ost_outside_the_pool_is_a_one_line_error(tmp_path):
    d = tmp_path / "run"
    make(d / "a", MIB, "version=1 stripe_size=1048576 stripe_count=1 osts=6")
    proc = iez(tmp_path, "usage", str(d), "--osts", "4")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"iez usage: error: layouts below {d} use OST 6, outside --osts 4 (OSTs 0..3)"


def test_a_malformed_attribute_is_reported_not_guessed(tmp_path):
    d = tmp_path / "run"
    bad = make(d / "bad", MIB, "version=1 stripe_size=1048576 stripe_count=3 osts=1,2")
    make(d / "good", MIB, "version=1 stripe_size=1048576 stripe_count=1 osts=0")
    shown = iez(tmp_path, "layout", "show", bad)
    assert shown.returncode == 2 and "Traceback" not in shown.stderr
    assert shown.stderr.strip() == (f"iez layout: error: {bad}: layout attribute "
                                    "'version=1 stripe_size=1048576 stripe_count=3 osts=1,2': "
                                    "stripe_count=3 but osts lists 2 OSTs")
    proc = iez(tmp_path, "usage", str(d), "--json")
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert (out["files"], out["placed_files"], out["skipped_files"]) == (2, 1, 1)
    assert out["osts"] == [{"index": 0, "bytes": MIB}]
    assert f"iez usage: skipped: {bad}: layout attribute" in proc.stderr


def test_layout_show_prints_the_contract_and_fails_without_a_layout(tmp_path):
    placed = make(tmp_path / "p", 1, "version=1 stripe_size=1048576 stripe_count=3 osts=3,7,11")
    plain = make(tmp_path / "q", 1)
    shown = iez(tmp_path, "layout", "show", placed, "--json")
    assert shown.returncode == 0
    assert json.loads(shown.stdout) == {"file": placed, "stripe_size": 1048576, "stripe_count": 3,
                                        "osts": [3, 7, 11], "source": "emulated"}
    text = iez(tmp_path, "layout", "show", placed)
    assert text.stdout.strip() == f"{placed}: stripe_size 1048576 stripe_count 3 osts 3 7 11 (emulated)"
    missing = iez(tmp_path, "layout", "show", plain, "--json")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.strip() == f"iez layout: {plain} has no layout (neither Lustre nor an emulated one)"
    gone = iez(tmp_path, "layout", "show", str(tmp_path / "gone"))
    assert gone.returncode == 2 and str(tmp_path / "gone") in gone.stderr


def test_usage_table_and_missing_directory(tmp_path):
    d = tmp_path / "run"
    make(d / "a", 3 * MIB + MIB // 2, "version=1 stripe_size=1048576 stripe_count=2 osts=2,5")
    table = iez(tmp_path, "usage", str(d), "--ost-size", "10M")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == f"{d}: 1 files, 1 placed, 0 without a layout (0 B)"
    assert lines[2].split() == ["2", str(2 * MIB), "2.0", "MiB", "20.00%"]
    assert lines[3].split() == ["5", str(3 * MIB // 2), "1.5", "MiB", "15.00%"]
    assert lines[-1].startswith("OSTCost 1.143 ")
    gone = iez(tmp_path, "usage", str(tmp_path / "gone"))
    assert gone.returncode == 2 and "No such file or directory" in gone.stderr and str(tmp_path / "gone") in gone.stderr


def test_a_small_ideal_job_scores_1_over_the_osts_it_used_beside_the_pool_figure(tmp_path):
    """Issue 30 item 8: two 1 MiB files, one per OST, on a pool of 16: ideally placed, yet max / mean over the
    pool is 8. The job's figure is taken over the OSTs holding its bytes; the text says which is which."""
    d = tmp_path / "run"
    make(d / "a", MIB, "version=1 stripe_size=1048576 stripe_count=1 osts=3")
    make(d / "b", MIB, "version=1 stripe_size=1048576 stripe_count=1 osts=11")
    out = usage_json(tmp_path, str(d), "--osts", "16")
    assert out["ost_cost"] == pytest.approx(8.0) and out["used_osts"] == 2 and out["ost_cost_used"] == 1.0
    make(d / "c", 2 * MIB, "version=1 stripe_size=1048576 stripe_count=1 osts=3")  # OST 3 now holds 3 of 4 MiB
    out = usage_json(tmp_path, str(d), "--osts", "16")
    assert out["ost_cost_used"] == pytest.approx(3 / 2)
    text = iez(tmp_path, "usage", str(d), "--osts", "16").stdout
    assert "OSTCost 1.500 over the 2 OSTs holding" in text and "12.000 over the pool" in text
    assert "use 2 of the pool's 16 OSTs" in text
