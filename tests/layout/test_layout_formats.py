"""Layout formats: the emulated attribute, the sidecar log and Lustre's lov_user_md, on real files and bytes."""

from __future__ import annotations

import os
import struct
import subprocess
import warnings

import pytest

from iez.layout import Layout, layout_of
from iez.layout.emulated import (LayoutWarning, Sidecar, escape_path, format_attr, parse_attr, read_sidecar,
                                 read_xattr, unescape_path, xattr_name)
from iez.layout.lustre import LL_SUPER_MAGIC, _statfs_type, is_lustre, parse_lov_user_md


def set_attr(path, text: str, name: str = "user.iez.layout") -> None:
    os.setxattr(path, name, text.encode())


# ---- the attribute text ---------------------------------------------------------------------------

def test_attribute_text_round_trips():
    text = "version=1 stripe_size=1048576 stripe_count=3 osts=3,7,11"
    layout = parse_attr(text, "/f")
    assert layout == Layout(1048576, (3, 7, 11)) and layout.stripe_count == 3
    assert format_attr(layout) == text
    assert parse_attr(text.encode(), "/f") == layout


@pytest.mark.parametrize("text, reason", [
    ("version=4 stripe_size=1048576 stripe_count=1 osts=0", "unknown layout version 4"),
    ("version=2 stripe_size=1048576 stripe_count=1 osts=0", "expected comp=START:END"),
    ("version=1 stripe_size=1048576 stripe_count=3 osts=3,7", "stripe_count=3 but osts lists 2 OSTs"),
    ("version=1 stripe_size=0 stripe_count=1 osts=0", "stripe_size=0 must be positive"),
    ("version=1 stripe_size=-65536 stripe_count=1 osts=0", "stripe_size=-65536 must be positive"),
    ("version=1 stripe_size=1048576 stripe_count=2 osts=3,-1", "OST index -1 is negative"),
    ("version=1 stripe_size=1048576 stripe_count=2 osts=3,,4", "comma-separated OST indices"),
    ("version=1 stripe_size=1M stripe_count=1 osts=0", "stripe_size='1M' is not a whole number"),
    ("version=1 stripe_count=1 stripe_size=1048576 osts=0", "expected 'version=1"),
    ("version=1  stripe_size=1048576 stripe_count=1 osts=0", "expected 'version=1"),
    ("version=1 stripe_size=1048576 stripe_count=1 osts=0\n", "comma-separated OST indices"),
    ("garbage", "expected 'version=1"),
    ("", "expected 'version=1"),
])
def test_malformed_attribute_text_is_a_clear_error_naming_the_file(text, reason):
    with pytest.raises(ValueError) as err:
        parse_attr(text, "/scratch/out.0")
    assert str(err.value).startswith("/scratch/out.0: layout attribute")
    assert reason in str(err.value)


def test_non_ascii_attribute_is_refused():
    with pytest.raises(ValueError, match="/f: layout attribute is not ASCII"):
        parse_attr(b"version=1 stripe_size=1048576 stripe_count=1 osts=\xff", "/f")


# ---- the extended attribute ------------------------------------------------------------------------

def test_xattr_is_read_from_a_real_file_and_absent_is_none(tmp_path):
    placed, plain = tmp_path / "placed", tmp_path / "plain"
    placed.write_bytes(b"x")
    plain.write_bytes(b"x")
    set_attr(placed, "version=1 stripe_size=65536 stripe_count=2 osts=4,1")
    assert read_xattr(str(placed)) == Layout(65536, (4, 1))
    assert read_xattr(str(plain)) is None


def test_missing_file_raises_oserror_naming_it(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError) as err:
        read_xattr(str(missing))
    assert err.value.filename == str(missing)
    with pytest.raises(FileNotFoundError) as err:
        layout_of(str(missing))
    assert str(missing) in str(err.value)


def test_attribute_name_comes_from_iez_layout_xattr(tmp_path, monkeypatch):
    assert xattr_name({}) == "user.iez.layout"
    assert xattr_name({"IEZ_LAYOUT_XATTR": "user.site.layout"}) == "user.site.layout"
    f = tmp_path / "f"
    f.write_bytes(b"")
    set_attr(f, "version=1 stripe_size=1048576 stripe_count=1 osts=9", name="user.site.layout")
    monkeypatch.setenv("IEZ_STATE_DIR", str(tmp_path / "state"))
    assert layout_of(str(f)) is None  # default name: nothing there
    monkeypatch.setenv("IEZ_LAYOUT_XATTR", "user.site.layout")
    assert layout_of(str(f)) == {"file": str(f), "stripe_size": 1048576, "stripe_count": 1, "osts": [9],
                                 "source": "emulated"}


def test_malformed_xattr_is_an_error_naming_the_file(tmp_path):
    f = tmp_path / "bad"
    f.write_bytes(b"")
    set_attr(f, "version=1 stripe_size=1048576 stripe_count=4 osts=1,2")
    with pytest.raises(ValueError, match=f"^{f}: layout attribute .*stripe_count=4 but osts lists 2 OSTs"):
        layout_of(str(f))


# ---- the sidecar log -----------------------------------------------------------------------------

def test_path_escapes_round_trip():
    weird = "/scratch/a\tb\nc\\d e"
    assert escape_path(weird) == b"/scratch/a\\tb\\nc\\\\d e"
    assert unescape_path(escape_path(weird)) == weird
    with pytest.raises(ValueError, match="bad escape"):
        unescape_path(b"/a\\x")
    with pytest.raises(ValueError, match="bad escape"):
        unescape_path(b"/a\\")


def test_sidecar_last_line_wins_and_escaped_paths_match(tmp_path):
    log = tmp_path / "layouts.log"
    weird = "/scratch/a\tb\nc\\d"
    log.write_bytes(
        b"version=1 stripe_size=1048576 stripe_count=1 osts=1\t/scratch/x\n"
        b"version=1 stripe_size=2097152 stripe_count=2 osts=4,5\t" + escape_path(weird) + b"\n"
        b"version=1 stripe_size=65536 stripe_count=2 osts=8,9\t/scratch/x\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a clean log warns about nothing
        entries = read_sidecar(log)
    assert entries == {"/scratch/x": Layout(65536, (8, 9)), weird: Layout(2097152, (4, 5))}
    assert Sidecar(log).lookup("/scratch/./y/../x") == Layout(65536, (8, 9))


def test_sidecar_malformed_lines_warn_with_line_numbers_and_a_truncated_tail_is_skipped(tmp_path):
    log = tmp_path / "layouts.log"
    log.write_bytes(
        b"version=1 stripe_size=1048576 stripe_count=1 osts=1\t/s/a\n"   # 1 good
        b"no tab here\n"                                                  # 2 no TAB
        b"version=1 stripe_size=1048576 stripe_count=1 osts=2\trelative\n"  # 3 not absolute
        b"version=1 stripe_size=1048576 stripe_count=1 osts=3\t/s/b\n"    # 4 good, then broken below
        b"version=9 stripe_size=1048576 stripe_count=1 osts=3\t/s/b\n"    # 5 bad layout: /s/b unknown now
        b"version=1 stripe_size=1048576 stripe_count=1 osts=7\t/s/c")     # truncated: no newline
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        entries = read_sidecar(log)
    messages = [str(w.message) for w in caught]
    assert all(issubclass(w.category, LayoutWarning) for w in caught)
    assert len(messages) == 3
    assert messages[0].startswith(f"{log}: line 2: expected the layout text, one TAB")
    assert messages[1].startswith(f"{log}: line 3: path 'relative' is not absolute")
    assert messages[2].startswith(f"{log}: line 5: layout attribute") and "unknown layout version 9" in messages[2]
    assert entries == {"/s/a": Layout(1048576, (1,)), "/s/b": None}


def test_missing_sidecar_is_empty(tmp_path):
    assert read_sidecar(tmp_path / "none.log") == {}


def test_layout_of_prefers_the_attribute_then_the_sidecar(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("IEZ_STATE_DIR", str(state))
    monkeypatch.delenv("IEZ_LAYOUT_XATTR", raising=False)
    both, logged, none = tmp_path / "both", tmp_path / "logged", tmp_path / "none"
    for f in (both, logged, none):
        f.write_bytes(b"")
    set_attr(both, "version=1 stripe_size=1048576 stripe_count=1 osts=1")
    (state / "layouts.log").write_text(
        f"version=1 stripe_size=1048576 stripe_count=1 osts=2\t{both}\n"
        f"version=1 stripe_size=4194304 stripe_count=3 osts=6,0,2\t{logged}\n")
    assert layout_of(str(both))["osts"] == [1]
    assert layout_of(str(logged)) == {"file": str(logged), "stripe_size": 4194304, "stripe_count": 3,
                                      "osts": [6, 0, 2], "source": "emulated"}
    assert layout_of(str(none)) is None


# ---- Lustre ----------------------------------------------------------------------------------------

def lum(magic: int, stripe_size: int, osts: list[int], pattern: int = 1, pool: bytes | None = None,
        stripe_count: int | None = None) -> bytes:
    """A lov_user_md as lustre_user.h lays it out (packed, little-endian)."""
    count = len(osts) if stripe_count is None else stripe_count
    out = struct.pack("<II", magic, pattern) + struct.pack("<QQ", 0x1234, 0)  # lmm_oi
    out += struct.pack("<IHH", stripe_size, count, 0)
    assert len(out) == 32
    if pool is not None:
        out += pool.ljust(16, b"\0")
    for i, ost in enumerate(osts):
        out += struct.pack("<QQII", 0x100000000 + i, 0, 7, ost)  # ost_id, l_ost_gen, l_ost_idx
    return out


def test_lustre_v1_layout_parses():
    assert parse_lov_user_md(lum(0x0BD10BD0, 1 << 20, [3, 7, 11]), "/l/f") == Layout(1 << 20, (3, 7, 11))


@pytest.mark.parametrize("magic", [0x0BD30BD0, 0x0BD50BD0])
def test_lustre_v3_layout_parses_after_the_pool_name(magic):
    raw = lum(magic, 4 << 20, [12, 0], pool=b"flash") + bytes(4096)  # bytes past the layout are ignored
    assert parse_lov_user_md(raw, "/l/f") == Layout(4 << 20, (12, 0), "flash")
    assert parse_lov_user_md(lum(magic, 4 << 20, [12, 0], pool=b""), "/l/f") == Layout(4 << 20, (12, 0))


def test_lustre_overstriping_keeps_repeated_osts():
    assert parse_lov_user_md(lum(0x0BD10BD0, 1 << 20, [5, 5, 6], pattern=0x201), "/l/f").osts == (5, 5, 6)


@pytest.mark.parametrize("raw, reason", [
    (lum(0x0BD10BD0, 1 << 20, [1, 2, 3])[:-24], "says 3 stripes (104 bytes) but only 80 bytes"),
    (lum(0x0BD30BD0, 1 << 20, [1], pool=b"p")[:60], "says 1 stripes (72 bytes) but only 60 bytes"),
    (lum(0x0BD10BD0, 1 << 20, [1])[:20], "shorter than a lov_user_md header"),
    (lum(0xD00BD10B, 1 << 20, [1]), "unknown Lustre layout magic 0xD00BD10B"),
    (lum(0x0BD10BD0, 1 << 20, [1], pattern=0x002), "pattern 0x2 is not RAID-0 or Data-on-MDT"),
    (lum(0x0BD10BD0, 1 << 20, [1], pattern=0x100), "plain Lustre layout with the Data-on-MDT pattern"),
    (lum(0x0BD30BD0, 1 << 20, [1], pool=b"bad pool"), "pool 'bad pool' is not a Lustre pool name"),
    (lum(0x0BD10BD0, 0, [1]), "stripe size 0"),
])
def test_lustre_bad_buffers_are_errors_naming_the_file(raw, reason):
    with pytest.raises(ValueError) as err:
        parse_lov_user_md(raw, "/l/f")
    assert str(err.value).startswith("/l/f: ") and reason in str(err.value)


def test_lustre_file_without_objects_has_no_layout():
    assert parse_lov_user_md(lum(0x0BD10BD0, 1 << 20, [], stripe_count=0), "/l/f") is None
    assert parse_lov_user_md(lum(0x0BD10BD0, 1 << 20, [1], pattern=0x80000001), "/l/f") is None  # released


def test_statfs_type_is_the_kernels_and_this_is_not_lustre(tmp_path):
    shown = subprocess.run(["stat", "-f", "-c", "%t", str(tmp_path)], capture_output=True, text=True, check=True)
    assert _statfs_type(str(tmp_path)) == int(shown.stdout.strip(), 16)
    assert _statfs_type(str(tmp_path)) != LL_SUPER_MAGIC
    assert is_lustre(str(tmp_path)) is False
    with pytest.raises(FileNotFoundError) as err:
        is_lustre(str(tmp_path / "missing"))
    assert err.value.filename == str(tmp_path / "missing")
