"""Lustre's composite (PFL) layouts, pools and Data-on-MDT, read from byte buffers built field by field as
``lustre_user.h`` lays them out, and the defaults iez hands to Lustre (``lfs setstripe`` or ``lustre.lov``)."""

from __future__ import annotations

import json
import os
import stat
import struct

import pytest

from iez.layout.lustre import (CLEAR_DEFAULT, lfs_setstripe_args, pack_template, parse_lov_user_md,
                               set_default)
from iez.layout.model import Layout
from iez.model import Component

MIB = 1 << 20
EOF64 = 0xFFFFFFFFFFFFFFFF
V1, V3, SPECIFIC, COMP, SEL = 0x0BD10BD0, 0x0BD30BD0, 0x0BD50BD0, 0x0BD60BD0, 0x0BD80BD0
RAID0, MDT, OVERSTRIPE, RELEASED = 0x1, 0x100, 0x200, 0x80000000
INIT, EXTENSION, PARITY = 0x10, 0x40, 0x80


def lmm(magic: int, pattern: int, stripe_size: int, count: int, osts: list[int] = (), pool: bytes | None = None,
        offset: int = 0xFFFF) -> bytes:
    """lov_user_md_v1/v3: magic, pattern, lmm_oi (16), stripe_size, stripe_count, offset, [pool (16)], objects."""
    out = struct.pack("<I", magic) + struct.pack("<I", pattern) + bytes(range(16))
    out += struct.pack("<I", stripe_size) + struct.pack("<H", count) + struct.pack("<H", offset)
    if magic != V1:
        out += (pool or b"").ljust(16, b"\0")
    for i, ost in enumerate(osts):
        out += struct.pack("<Q", 0x2000 + i) + struct.pack("<Q", 0) + struct.pack("<I", 3) + struct.pack("<I", ost)
    return out


def comp(entries: list[tuple[int, int, int, bytes]], mirrors: int = 0, ec: int = 0, size_delta: int = 0) -> bytes:
    """lov_comp_md_v1 (32-byte header) + one 48-byte lov_comp_md_entry_v1 per (flags, start, end, blob)."""
    offset = 32 + 48 * len(entries)
    size = offset + sum(len(e[3]) for e in entries)
    head = (struct.pack("<I", COMP) + struct.pack("<I", size + size_delta) + struct.pack("<I", 7)
            + struct.pack("<H", 0) + struct.pack("<H", len(entries)) + struct.pack("<H", mirrors)
            + struct.pack("<B", ec) + bytes(13))
    assert len(head) == 32
    table, blobs = b"", b""
    for n, (flags, start, end, blob) in enumerate(entries):
        entry = (struct.pack("<I", n + 1) + struct.pack("<I", flags) + struct.pack("<Q", start)
                 + struct.pack("<Q", end) + struct.pack("<I", offset) + struct.pack("<I", len(blob))
                 + struct.pack("<I", 1) + struct.pack("<Q", 0) + bytes(4))
        assert len(entry) == 48
        table += entry
        blobs += blob
        offset += len(blob)
    return head + table + blobs


def test_a_pfl_file_with_dom_pool_and_an_uninstantiated_component():
    raw = comp([
        (INIT, 0, MIB, lmm(V1, MDT, MIB, 0)),
        (INIT, MIB, 64 * MIB, lmm(V3, RAID0, MIB, 4, [1, 2, 5, 6], b"flash")),
        (0, 64 * MIB, EOF64, lmm(V3, RAID0, 4 * MIB, 0xFFFF, [], b"flash")),
    ])
    layout = parse_lov_user_md(raw, "/l/pfl")
    assert layout.components == (
        Component(0, MIB, 0, MIB, None, (), dom=True),
        Component(MIB, 64 * MIB, 4, MIB, "flash", (1, 2, 5, 6)),
        Component(64 * MIB, -1, -1, 4 * MIB, "flash"),
    )
    # the contract's JSON: placed OSTs in order, the first placed component's stripe size
    assert layout.to_json() == {
        "stripe_size": MIB, "stripe_count": 4, "osts": [1, 2, 5, 6],
        "components": [
            {"start": 0, "end": MIB, "stripe_size": MIB, "stripe_count": 0, "osts": [], "pattern": "mdt"},
            {"start": MIB, "end": 64 * MIB, "stripe_size": MIB, "stripe_count": 4, "osts": [1, 2, 5, 6],
             "pool": "flash"},
            {"start": 64 * MIB, "end": -1, "stripe_size": 4 * MIB, "stripe_count": -1, "osts": [],
             "pool": "flash"}]}


def test_every_component_placed_shares_the_pool_and_overstriping_keeps_repeated_osts():
    raw = comp([
        (INIT, 0, 4 * MIB, lmm(SPECIFIC, RAID0, MIB, 2, [7, 3], b"ssd")),
        (INIT, 4 * MIB, EOF64, lmm(V3, RAID0 | OVERSTRIPE, 2 * MIB, 4, [3, 3, 7, 7], b"ssd")),
    ])
    layout = parse_lov_user_md(raw, "/l/f")
    assert layout.pool == "ssd" and layout.osts == (7, 3, 3, 3, 7, 7) and layout.stripe_size == MIB
    assert layout.components[1] == Component(4 * MIB, -1, 4, 2 * MIB, "ssd", (3, 3, 7, 7), overstriping=True)


def test_released_and_uninstantiated_components_hold_no_osts():
    raw = comp([
        (INIT, 0, 8 * MIB, lmm(V1, RAID0 | RELEASED, MIB, 2)),
        (0, 8 * MIB, EOF64, lmm(V1, RAID0, MIB, 3)),
    ])
    layout = parse_lov_user_md(raw, "/l/f")
    assert layout.osts == () and layout.stripe_size == 0
    assert [c.stripe_count for c in layout.components] == [2, 3]
    assert all(not c.osts for c in layout.components)


def test_a_directory_default_is_a_template_whatever_the_flags_say():
    plain = parse_lov_user_md(lmm(V3, RAID0, 0, 0, [], b"flash"), "/l/dir", directory=True)
    assert plain.components == (Component(0, -1, 1, None, "flash"),)  # count 0: the fs default (1); size 0: open
    every = parse_lov_user_md(lmm(V1, RAID0, 4 * MIB, 0xFFFF), "/l/dir", directory=True)
    assert every.components == (Component(0, -1, -1, 4 * MIB),)
    pfl = parse_lov_user_md(comp([(0, 0, MIB, lmm(V3, MDT, MIB, 0)),
                                  (INIT, MIB, EOF64, lmm(V3, RAID0, MIB, 4, [], b"disk"))]), "/l/dir", directory=True)
    assert pfl.components == (Component(0, MIB, 0, MIB, dom=True), Component(MIB, -1, 4, MIB, "disk"))
    assert pfl.osts == () and pfl.to_json()["stripe_count"] == 0


@pytest.mark.parametrize("raw, reason", [
    (comp([(INIT, 0, EOF64, lmm(V1, RAID0, MIB, 1, [0]))], mirrors=4),
     "/l/f: mirrored (FLR) Lustre layout has 5 mirrors; iez reads up to 4"),
    (comp([(INIT, 0, EOF64, lmm(V1, RAID0, MIB, 1, [0]))], ec=1), "/l/f: erasure-coded Lustre layouts"),
    (comp([(INIT, 0, MIB, lmm(V1, RAID0, MIB, 1, [0])), (EXTENSION, MIB, EOF64, lmm(V1, RAID0, 64, 0))]),
     "/l/f: component 1: self-extending (SEL) Lustre layouts are not supported"),
    (comp([(INIT | PARITY, 0, EOF64, lmm(V1, RAID0, MIB, 1, [0]))]), "/l/f: component 0: erasure-coded"),
    (struct.pack("<I", SEL) + bytes(60), "/l/f: self-extending (SEL) Lustre layouts are not supported"),
    (comp([(INIT, 0, EOF64, lmm(V1, RAID0, MIB, 1, [0]))], size_delta=8), "says 144 bytes but only 136 were returned"),
    (comp([(INIT, 0, EOF64, lmm(V1, RAID0, MIB, 2, [0, 1]))])[:-24], "Lustre composite layout says"),
    (comp([]), "/l/f: Lustre composite layout has no component"),
    (comp([(INIT, 0, MIB, lmm(V1, RAID0, MIB, 1, [0])), (INIT, 2 * MIB, EOF64, lmm(V1, RAID0, MIB, 1, [1]))]),
     "a component starts at 2097152, where the one before ends at 1048576"),
    (comp([(INIT, 0, EOF64, lmm(V1, RAID0, MIB, 3, [0, 1]))]), "/l/f: component 0: Lustre layout says 3 stripes"),
    (comp([(INIT, 0, EOF64, lmm(V1, RAID0, MIB, 2, [4, 4]))]), "/l/f: component 0: component [0, EOF): an OST "
                                                                "appears twice without overstriping"),
    (comp([(0, 0, EOF64, lmm(V1, RAID0, MIB, 0xFFFE))]), "/l/f: component 0: stripe count 0xFFFE"),
    (comp([(INIT, 0, EOF64, lmm(V1, 0x2, MIB, 1, [0]))]), "component 0: Lustre layout pattern 0x2 is not RAID-0"),
    (comp([(INIT, 0, EOF64, lmm(V3, RAID0, MIB, 1, [0], b"no/slash"))]), "pool 'no/slash' is not a Lustre pool"),
    (comp([(INIT, MIB, EOF64, lmm(V1, MDT, MIB, 0))]), "only the first component can be Data-on-MDT"),
])
def test_composite_layouts_iez_cannot_model_or_that_are_broken_are_refused_by_name(raw, reason):
    with pytest.raises(ValueError) as err:
        parse_lov_user_md(raw, "/l/f")
    assert str(err.value).startswith("/l/f: ") and reason in str(err.value), str(err.value)


def test_a_component_table_pointing_outside_the_layout_is_refused():
    raw = bytearray(comp([(INIT, 0, EOF64, lmm(V1, RAID0, MIB, 1, [0]))]))
    struct.pack_into("<I", raw, 32 + 24, 4000)  # lcme_offset of entry 0
    with pytest.raises(ValueError, match=r"^/l/f: component 0: its lov_user_md at bytes 4000\.\.4056 lies outside"):
        parse_lov_user_md(raw, "/l/f")


# ---- what iez hands to Lustre ------------------------------------------------------------------------

def test_a_plain_default_packs_as_one_lov_user_md_v3_field_by_field():
    raw = pack_template([Component(0, -1, -1, 4 * MIB, "flash", overstriping=False)])
    assert len(raw) == 48
    magic, pattern = struct.unpack_from("<II", raw, 0)
    assert (magic, pattern) == (V3, RAID0)
    assert raw[8:24] == bytes(16)  # lmm_oi
    assert struct.unpack_from("<IHH", raw, 24) == (4 * MIB, 0xFFFF, 0xFFFF)  # size, count -1, offset -1
    assert raw[32:48] == b"flash".ljust(16, b"\0")
    open_size = pack_template([Component(0, -1, 2, None, None, overstriping=True)])
    assert struct.unpack_from("<IIxxxxxxxxxxxxxxxxIHH16s", open_size) == (V3, RAID0 | OVERSTRIPE, 0, 2, 0xFFFF,
                                                                           bytes(16))


def test_a_pfl_default_packs_as_lov_comp_md_v1_field_by_field_and_reads_back():
    template = (Component(0, MIB, 0, MIB, dom=True), Component(MIB, 64 * MIB, 4, MIB, "flash"),
                Component(64 * MIB, -1, -1, None, "disk"))
    raw = pack_template(template)
    assert len(raw) == 32 + 3 * 48 + 3 * 48
    assert struct.unpack_from("<IIIHHHB", raw, 0) == (COMP, len(raw), 0, 0, 3, 0, 0)
    blobs = []
    for n, (start, end) in enumerate([(0, MIB), (MIB, 64 * MIB), (64 * MIB, EOF64)]):
        ident, flags, s, e, offset, size = struct.unpack_from("<IIQQII", raw, 32 + 48 * n)
        assert (flags, s, e, size) == (0, start, end, 48)
        assert offset == 32 + 3 * 48 + 48 * n
        blobs.append(raw[offset:offset + size])
    assert struct.unpack_from("<II", blobs[0]) == (V3, MDT)
    assert struct.unpack_from("<IHH", blobs[0], 24) == (MIB, 0, 0xFFFF)  # DoM: one stripe its size, count 0
    assert struct.unpack_from("<IHH16s", blobs[1], 24) == (MIB, 4, 0xFFFF, b"flash".ljust(16, b"\0"))
    assert struct.unpack_from("<IHH16s", blobs[2], 24) == (0, 0xFFFF, 0xFFFF, b"disk".ljust(16, b"\0"))
    assert parse_lov_user_md(raw, "/l/dir", directory=True) == Layout.from_components(template)


def test_clearing_a_default_is_lustres_all_defaults_v1():
    assert len(CLEAR_DEFAULT) == 32
    assert struct.unpack("<II16sIHH", CLEAR_DEFAULT) == (V1, 0, bytes(16), 0, 0, 0xFFFF)


def test_lfs_setstripe_options_spell_out_each_component():
    assert lfs_setstripe_args([Component(0, -1, 4, None, "flash")]) == ["-c", "4", "-p", "flash"]
    assert lfs_setstripe_args([Component(0, -1, -1, 4 * MIB)]) == ["-c", "-1", "-S", str(4 * MIB)]
    assert lfs_setstripe_args([
        Component(0, MIB, 0, MIB, dom=True), Component(MIB, 64 * MIB, 4, MIB, "flash"),
        Component(64 * MIB, 1 << 30, 8, MIB, overstriping=True), Component(1 << 30, -1, -1, 4 * MIB, "disk"),
    ]) == ["-E", str(MIB), "-L", "mdt",
           "-E", str(64 * MIB), "-c", "4", "-S", str(MIB), "-p", "flash",
           "-E", str(1 << 30), "-C", "8", "-S", str(MIB), "-p", "",
           "-E", "-1", "-c", "-1", "-S", str(4 * MIB), "-p", "disk"]
    with pytest.raises(ValueError, match="component 1 leaves its stripe size open after one of 1048576 bytes"):
        lfs_setstripe_args([Component(0, MIB, 1, MIB), Component(MIB, -1, 2)])


def fake_lfs(tmp_path, exit_code: int = 0) -> str:
    """An ``lfs`` on PATH that records its arguments (no Lustre client here), exiting ``exit_code``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "lfs"
    script.write_text("#!/usr/bin/env python3\nimport json, os, sys\n"
                      f"open({str(tmp_path / 'argv.json')!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
                      f"if {exit_code}: print('lfs setstripe: cannot set default: Invalid argument', "
                      f"file=sys.stderr)\nsys.exit({exit_code})\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(bin_dir)


def test_set_default_runs_lfs_setstripe_when_lfs_is_there(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_lfs(tmp_path) + os.pathsep + os.environ["PATH"])
    d = str(tmp_path / "d")
    assert set_default(d, [Component(0, MIB, 1, MIB), Component(MIB, -1, 4, MIB, "flash")]) == "lfs setstripe"
    assert set_default(d, None) == "lfs setstripe"
    calls = [json.loads(line) for line in (tmp_path / "argv.json").read_text().splitlines()]
    assert calls == [["setstripe", "-E", str(MIB), "-c", "1", "-S", str(MIB), "-E", "-1", "-c", "4", "-S", str(MIB),
                      "-p", "flash", d], ["setstripe", "-d", d]]


def test_a_failing_lfs_is_one_error_naming_the_command_and_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_lfs(tmp_path, exit_code=22) + os.pathsep + os.environ["PATH"])
    with pytest.raises(OSError) as err:
        set_default("/l/d", [Component(0, -1, 2)])
    assert str(err.value) == ("setstripe -c 2 /l/d failed (exit 22): lfs setstripe: cannot set default: "
                              "Invalid argument")


def test_layout_show_plumbing_on_lustre_reads_lustre_lov_for_files_and_directories(tmp_path, monkeypatch):
    """No Lustre client here: ``statfs`` and the ``lustre.lov`` attribute answer as a Lustre client would."""
    from iez.layout import lustre as lustre_module
    from iez.layout.read import LayoutReader

    pfl, plain_dir, bare = tmp_path / "pfl", tmp_path / "dir", tmp_path / "bare"
    pfl.write_bytes(b"")
    bare.write_bytes(b"")
    plain_dir.mkdir()
    answers = {str(pfl): comp([(INIT, 0, 4 * MIB, lmm(V3, RAID0, MIB, 2, [8, 9], b"flash")),
                               (0, 4 * MIB, EOF64, lmm(V3, RAID0, MIB, 0xFFFF, [], b"flash"))]),
               str(plain_dir): lmm(V3, RAID0, 0, 4, [], b"disk")}
    real_getxattr = os.getxattr

    def getxattr(path, name, *args, **kwargs):
        if name != "lustre.lov":
            return real_getxattr(path, name, *args, **kwargs)
        if str(path) not in answers:
            raise OSError(61, "No data available", str(path))  # ENODATA: no layout (yet)
        return answers[str(path)]

    monkeypatch.setattr(lustre_module, "is_lustre", lambda path: True)
    monkeypatch.setattr(os, "getxattr", getxattr)
    reader = LayoutReader()
    assert reader.describe(str(pfl)) == {
        "file": str(pfl), "source": "lustre", "stripe_size": MIB, "stripe_count": 2, "osts": [8, 9],
        "pool": "flash", "components": [
            {"start": 0, "end": 4 * MIB, "stripe_size": MIB, "stripe_count": 2, "osts": [8, 9], "pool": "flash"},
            {"start": 4 * MIB, "end": -1, "stripe_size": MIB, "stripe_count": -1, "osts": [], "pool": "flash"}]}
    assert reader.describe(str(plain_dir)) == {
        "file": str(plain_dir), "source": "lustre", "default": True, "stripe_size": 0, "stripe_count": 0,
        "osts": [], "pool": "disk",
        "components": [{"start": 0, "end": -1, "stripe_size": None, "stripe_count": 4, "osts": [], "pool": "disk"}]}
    assert reader.describe(str(bare)) is None
