"""``iez layout show``, ``iez layout set-default`` and ``iez usage`` on real files and directories carrying
pooled and composite (PFL, Data-on-MDT) emulated layouts, run as the command."""

from __future__ import annotations

import json
import os

import pytest

from conftest import iez_cli
from layout_helpers import iez, make

MIB = 1 << 20
KIB = 1 << 10
PFL = ("version=2 comp=0:1048576:1048576:0:mdt comp=1048576:4194304:1048576:2:1,2 "
       "comp=4194304:eof:1048576:4:3,4,5,6")


def ok_json(tmp_path, *args) -> dict:
    proc = iez(tmp_path, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# ---- layout show ---------------------------------------------------------------------------------------

def test_show_prints_a_composite_layouts_components(tmp_path):
    f = make(tmp_path / "pfl", 3 * MIB, "version=2 comp=0:1048576:1048576:0:mdt "
             "comp=1048576:67108864:1048576:4:1,2,5,6:pool=flash comp=67108864:eof:-:-1:-:pool=flash:overstripe")
    assert ok_json(tmp_path, "layout", "show", f) == {
        "file": f, "source": "emulated", "stripe_size": MIB, "stripe_count": 4, "osts": [1, 2, 5, 6],
        "components": [
            {"start": 0, "end": MIB, "stripe_size": MIB, "stripe_count": 0, "osts": [], "pattern": "mdt"},
            {"start": MIB, "end": 64 * MIB, "stripe_size": MIB, "stripe_count": 4, "osts": [1, 2, 5, 6],
             "pool": "flash"},
            {"start": 64 * MIB, "end": -1, "stripe_size": None, "stripe_count": -1, "osts": [], "pool": "flash",
             "overstriping": True}]}
    text = iez(tmp_path, "layout", "show", f)
    assert text.returncode == 0
    assert text.stdout.splitlines() == [
        f"{f}: composite layout, 3 components (emulated)",
        "  [0, 1048576) Data-on-MDT stripe_size 1048576",
        "  [1048576, 67108864) stripe_size 1048576 stripe_count 4 osts 1 2 5 6 pool flash",
        "  [67108864, EOF) stripe_size - stripe_count -1 osts - (not chosen) pool flash overstriping"]


def test_show_prints_a_plain_layouts_pool(tmp_path):
    f = make(tmp_path / "pooled", MIB, "version=2 comp=0:eof:4194304:2:3,7:pool=ssd")
    assert ok_json(tmp_path, "layout", "show", f) == {"file": f, "source": "emulated", "stripe_size": 4 * MIB,
                                                      "stripe_count": 2, "osts": [3, 7], "pool": "ssd"}
    assert iez(tmp_path, "layout", "show", f).stdout.strip() == f"{f}: stripe_size 4194304 stripe_count 2 osts 3 7 " \
                                                                "pool ssd (emulated)"


def test_show_of_a_directory_without_a_default_says_so(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    shown = iez(tmp_path, "layout", "show", str(d), "--json")
    assert shown.returncode == 1 and shown.stdout == ""
    assert shown.stderr.strip() == f"iez layout: {d} is a directory without a default layout"


# ---- layout set-default ----------------------------------------------------------------------------------

def test_set_default_then_show_the_directory(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    template = {"pool": "flash", "components": [
        {"end": MIB, "pattern": "mdt"},
        {"end": 64 * MIB, "stripe_count": 4, "stripe_size": MIB},
        {"end": -1, "stripe_count": -1, "pool": "disk"}]}
    setd = ok_json(tmp_path, "layout", "set-default", str(d), "--layout", json.dumps(template))
    expected = {"file": str(d), "source": "emulated", "default": True, "stripe_size": 0, "stripe_count": 0,
                "osts": [], "components": [
                    {"start": 0, "end": MIB, "stripe_size": MIB, "stripe_count": 0, "osts": [], "pattern": "mdt"},
                    {"start": MIB, "end": 64 * MIB, "stripe_size": MIB, "stripe_count": 4, "osts": [],
                     "pool": "flash"},
                    {"start": 64 * MIB, "end": -1, "stripe_size": None, "stripe_count": -1, "osts": [],
                     "pool": "disk"}]}
    assert setd == expected
    assert ok_json(tmp_path, "layout", "show", str(d)) == expected
    # what the placement library reads as the directory's default (the template in layout text version 2)
    assert os.getxattr(d, "user.iez.layout").decode() == (
        "version=2 comp=0:1048576:1048576:0:mdt comp=1048576:67108864:1048576:4:-:pool=flash "
        "comp=67108864:eof:-:-1:-:pool=disk")
    text = iez(tmp_path, "layout", "show", str(d))
    assert text.stdout.splitlines()[0] == f"{d}: default layout, 3 components (emulated)"


def test_set_default_from_options_replaces_and_clear_removes_it(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    first = ok_json(tmp_path, "layout", "set-default", str(d), "--stripe-count", "-1")
    assert first["components"] == [{"start": 0, "end": -1, "stripe_size": None, "stripe_count": -1, "osts": []}]
    second = ok_json(tmp_path, "layout", "set-default", str(d), "--stripe-count", "4", "--stripe-size", "4M",
                     "--pool", "flash")
    assert second["pool"] == "flash"
    assert second["components"] == [{"start": 0, "end": -1, "stripe_size": 4 * MIB, "stripe_count": 4, "osts": [],
                                     "pool": "flash"}]
    assert os.getxattr(d, "user.iez.layout") == b"version=2 comp=0:eof:4194304:4:-:pool=flash"
    cleared = iez(tmp_path, "layout", "set-default", str(d), "--clear")
    assert cleared.returncode == 0 and cleared.stdout.strip() == f"{d}: default layout cleared (user.iez.layout)"
    assert "user.iez.layout" not in os.listxattr(d)
    assert iez(tmp_path, "layout", "show", str(d)).returncode == 1
    again = ok_json(tmp_path, "layout", "set-default", str(d), "--clear")  # none left: still fine
    assert again == {"file": str(d), "default": None, "how": "user.iez.layout"}


def test_set_default_honours_iez_layout_xattr(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    env = {"IEZ_STATE_DIR": str(state), "IEZ_LAYOUT_XATTR": "user.site.layout"}
    assert iez_cli("layout", "set-default", str(d), "--stripe-count", "2", env=env).returncode == 0
    assert os.listxattr(d) == ["user.site.layout"]
    assert json.loads(iez_cli("layout", "show", str(d), "--json", env=env).stdout)["components"][0]["stripe_count"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--stripe-count", "2", "--stripe-size", "100000"],
     "--stripe-size: stripe size 100000 must be a positive multiple of 65536"),
    (["--stripe-count", "0"], "--stripe-count 0: give 1 or more stripes, or -1 for every OST"),
    (["--stripe-count", "2", "--pool", "no pool"], "--pool: pool 'no pool' is not a Lustre pool name"),
    (["--stripe-count", "2001"], "stripe count 2001 is above Lustre's 2000"),
    (["--layout", "{oops"], "--layout: not valid JSON (Expecting property name enclosed in double quotes"),
    (["--layout", '{"components": [{"end": 1000000, "stripe_count": 1}, {"end": -1, "stripe_count": 2}]}'],
     "--layout: component 0 [0, 1000000): end 1000000 is not a multiple of 64 KiB (65536), as Lustre requires"),
    (["--layout", '{"components": [{"end": 3145728, "stripe_count": 1, "stripe_size": 2097152}, '
                  '{"end": -1, "stripe_count": 2}]}'],
     "--layout: component 0 [0, 3145728): end 3145728 is not a multiple of the stripe size 2097152"),
    (["--layout", '{"pool": "flash", "components": [{"end": 1048576, "pattern": "mdt", "pool": "x"}, '
                  '{"end": -1, "stripe_count": 2}]}'],
     "--layout: component 0 [0, 1048576): a Data-on-MDT component cannot have a pool"),
    (["--layout", '{"components": [{"end": -1, "pattern": "mdt"}]}'],
     "a Data-on-MDT component must end before the end of the file"),
    (["--layout", '{"components": [{"end": -1, "stripe_count": 2, "osts": [1, 2]}]}'],
     "--layout: a default layout names no OSTs"),
    (["--layout", '{"components": [{"end": -1, "stripe_count": 2}], "mirrors": [[]]}'],
     "--layout: mirror 1: components must be a non-empty list"),
    (["--layout", '{"stripe_count": 2, "stripe_size": 1048576, "colour": "red"}'], "unknown field 'colour'"),
    (["--layout", '{"components": [{"end": -1, "stripe_count": 2}]}', "--pool", "flash"],
     "--stripe-size and --pool go with --stripe-count"),
    (["--clear", "--pool", "flash"], "--clear takes no --stripe-size or --pool"),
])
def test_set_default_refuses_what_lustre_would_naming_it(tmp_path, args, message):
    d = tmp_path / "run"
    d.mkdir()
    done = iez(tmp_path, "layout", "set-default", str(d), *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("iez layout: error: ") and message in done.stderr, done.stderr
    assert os.listxattr(d) == []


def test_set_default_needs_a_directory(tmp_path):
    f = make(tmp_path / "file", 1)
    done = iez(tmp_path, "layout", "set-default", f, "--stripe-count", "2")
    assert done.returncode == 2
    assert done.stderr.strip() == f"iez layout: error: {f} is not a directory (a default layout belongs to a directory)"
    gone = iez(tmp_path, "layout", "set-default", str(tmp_path / "gone"), "--stripe-count", "2")
    assert gone.returncode == 2 and "No such file or directory" in gone.stderr and str(tmp_path / "gone") in gone.stderr
    neither = iez(tmp_path, "layout", "set-default", str(tmp_path))
    assert neither.returncode == 2
    assert "one of the arguments --layout --stripe-count --clear is required" in neither.stderr


# ---- usage -------------------------------------------------------------------------------------------

def test_usage_charges_each_component_to_its_own_osts(tmp_path):
    d = tmp_path / "run"
    # 3.5 MiB over PFL: [0, 1M) on the MDT; [1M, 4M) over OSTs 1,2 at 1 MiB by file offset: unit 1 (1M-2M) on
    # stripe 1 = OST 2, unit 2 on OST 1, half of unit 3 on OST 2; [4M, EOF) not reached: OSTs 3-6 hold nothing.
    make(d / "a", 3 * MIB + MIB // 2, PFL)
    # 512 KiB over the same layout: all of it on the MDT.
    make(d / "small", 512 * KIB, PFL)
    # 10 MiB: [0, 1M) on OST 7; [1M, EOF) at 4 MiB over 1,8 starts inside unit 0: 3 MiB on OST 1, unit 1 (4 MiB)
    # on OST 8, 2 MiB of unit 2 on OST 1.
    make(d / "sub" / "b", 10 * MIB, "version=2 comp=0:1048576:1048576:1:7 comp=1048576:eof:4194304:2:1,8")
    # a plain layout in a pool: RAID-0, 2 MiB on OST 3, 1 MiB on OST 4.
    make(d / "c", 3 * MIB, "version=2 comp=0:eof:1048576:2:3,4:pool=flash")
    out = ok_json(tmp_path, "usage", str(d))
    per_ost = {o["index"]: o["bytes"] for o in out["osts"]}
    assert per_ost == {1: MIB + 5 * MIB, 2: MIB + MIB // 2, 3: 2 * MIB, 4: MIB, 5: 0, 6: 0, 7: MIB, 8: 4 * MIB}
    assert out["mdt_bytes"] == MIB + 512 * KIB
    assert (out["files"], out["placed_files"]) == (4, 4)
    total = 6 * MIB + 1.5 * MIB + 2 * MIB + MIB + MIB + 4 * MIB
    assert out["mean_bytes"] == pytest.approx(total / 8)
    assert out["max_bytes"] == 6 * MIB
    assert out["ost_cost"] == pytest.approx(6 * MIB / (total / 8))
    # bytes per OST and on the MDT add up to the files' sizes
    assert sum(per_ost.values()) + out["mdt_bytes"] == 3 * MIB + MIB // 2 + 512 * KIB + 10 * MIB + 3 * MIB


def test_usage_of_plain_layouts_reports_no_mdt_bytes(tmp_path):
    d = tmp_path / "run"
    make(d / "a", 2 * MIB, "version=1 stripe_size=1048576 stripe_count=2 osts=0,1")
    out = ok_json(tmp_path, "usage", str(d))
    assert out["mdt_bytes"] == 0 and out["osts"] == [{"index": 0, "bytes": MIB}, {"index": 1, "bytes": MIB}]
