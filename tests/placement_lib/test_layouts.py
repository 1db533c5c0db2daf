"""Composite (PFL) and pool layouts in libiez (placement_lib/README.md "Formats", "Skips").

- the C parser and formatters read and write the layout text exactly as
  ``iez.layout.emulated`` does (``layout_tool text`` against ``parse_attr``,
  ``format_attr`` and ``canonical_template``);
- the ``LL_IOC_LOV_SETSTRIPE`` buffer is checked field by field against the
  layout it came from, and ``LL_IOC_LOV_GETSTRIPE`` buffers built here as Lustre
  fills them read back as the right text;
- real programs under ``LD_PRELOAD``: an allocation's version-2 ``layout`` is
  the attribute the file gets; a directory whose default is no longer the learnt
  ``default_layout`` gets the plain call, counted as a skip; traces carry the
  directory's default.
"""

from __future__ import annotations

import csv
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from conftest import LIB_DIR, LAYOUT_XATTR, MIB, _make, counts_rows, layouts_below, pin_layouts, read_layout

from iez.layout.emulated import canonical_template, format_attr, format_components, parse_attr
from iez.layout.lustre import parse_lov_user_md

pytestmark = pytest.mark.slow

TOOL = LIB_DIR / "build" / "layout_tool"

# ---- the text: C and Python agree ----------------------------------------------------------------------
VALID = [
    "version=1 stripe_size=1048576 stripe_count=3 osts=3,7,11",
    "version=1 stripe_size=65536 stripe_count=1 osts=0",
    "version=1 stripe_size=0001048576 stripe_count=02 osts=-0,5",  # Python's int(): leading zeros, -0
    "version=1 stripe_size=1048576 stripe_count=1 osts=4294967295",
    # Data-on-MDT, then a pool's OSTs
    "version=2 comp=0:1048576:1048576:0:mdt comp=1048576:eof:1048576:4:1,2,5,6:pool=flash",
    # a plain layout in a pool is one component over the whole file
    "version=2 comp=0:eof:1048576:4:1,2,5,6:pool=flash",
    "version=2 comp=0:eof:1048576:2:8,3",
    # templates: stripe size left open, OSTs not chosen, every OST (-1)
    "version=2 comp=0:eof:-:-1:-",
    "version=2 comp=0:1048576:-:1:- comp=1048576:67108864:-:4:- comp=67108864:eof:-:-1:-",
    "version=2 comp=0:1048576:-:0:mdt comp=1048576:eof:-:2:-:pool=ssd",
    # placed, then not reached (Lustre chooses if the file grows there)
    "version=2 comp=0:4194304:1048576:2:3,9 comp=4194304:eof:4194304:8:-:pool=disk",
    # overstriping: an OST twice, and the flags in either order
    "version=2 comp=0:4194304:1048576:4:3,3,7,7:overstripe comp=4194304:eof:4194304:2:1,2:pool=disk:overstripe",
    "version=2 comp=0:4194304:1048576:4:3,7,1,2:overstripe:pool=ssd",
    "version=2 comp=0:eof:1048576:1:4:overstripe:overstripe",
    # a pool for every component, one component's own pool
    "version=2 pool=flash comp=0:1048576:1048576:1:9 comp=1048576:eof:1048576:2:-:pool=disk",
    "version=2 pool=a pool=b comp=0:eof:-:1:-",
    "version=2 comp=0:eof:1048576:1:4:pool=x:pool=y",
    "version=2 comp=0:eof:1048576:1:4:pool=A-b_9",
    # Data-on-MDT with count 1, end -1 for eof, a last extent that ends, -0
    "version=2 comp=0:1048576:1048576:1:mdt comp=1048576:-1:2097152:2:4,5",
    "version=2 comp=0:1048576:1048576:0:mdt:overstripe comp=1048576:eof:-:1:-",
    "version=2 comp=0:2097152:1048576:2:0,1",
    "version=2 comp=-0:eof:-:1:-",
]
INVALID = [
    "", " ", "version=1", "version=3 stripe_size=1 stripe_count=1 osts=1", "version=01x stripe_size=1 stripe_count=1 osts=1",
    "version=1 stripe_size=0 stripe_count=1 osts=1",
    "version=1 stripe_size=-65536 stripe_count=1 osts=1",
    "version=1 stripe_size=1048576 stripe_count=2 osts=1",
    "version=1 stripe_size=1048576 stripe_count=1 osts=-1",
    "version=1  stripe_size=1048576 stripe_count=1 osts=1",
    "version=1 stripe_size=1048576 stripe_count=1 osts=1 ",
    "version=1 stripe_size=1048576 stripe_count=2 osts=1,",
    "version=1 stripe_size=1048576 stripe_count=1 osts=",
    "stripe_size=1048576 version=1 stripe_count=1 osts=1",
    "version=1 stripe_size=1e6 stripe_count=1 osts=1",
    "version=1 stripe_size=+65536 stripe_count=1 osts=1",
    "version=1 stripe_size=1048576 stripe_count=1 osts=1 extra=2",
    "version=1 stripe_size=1048576 stripe_count=1 osts=1\n",
    "version=2", "version=2 ", "version=2  comp=0:eof:-:1:-", "version=2 comp=0:eof:-:1:- ",
    "version=2 comp", "version=2 comps=0:eof:-:1:-", "version=2 comp=0:eof:1048576:1",
    "version=2 comp=1:eof:1048576:1:1",  # does not start at 0
    "version=2 comp=0:1048576:1048576:1:1 comp=2097152:eof:1048576:1:2",  # a gap
    "version=2 comp=0:eof:1048576:1:1 comp=1048576:eof:1048576:1:2",  # after the end of the file
    "version=2 comp=0:1048576:-:1:- comp=1048576:1048576:-:1:-",  # an empty extent
    "version=2 comp=0:0:1048576:1:1", "version=2 comp=0:-2:-:1:-", "version=2 comp=0:x:-:1:-",
    "version=2 comp=0:eof:0:1:1",  # stripe size 0
    "version=2 comp=0:eof:-:1:3",  # OSTs chosen without a stripe size
    "version=2 comp=0:eof:1048576:0:-", "version=2 comp=0:eof:1048576:-2:-",
    "version=2 comp=0:eof:1048576:2:3,3",  # an OST twice without overstriping
    "version=2 comp=0:eof:1048576:2:3", "version=2 comp=0:eof:1048576:-1:3",
    "version=2 comp=0:eof:1048576:1:-3", "version=2 comp=0:eof:1048576:1:3,", "version=2 comp=0:eof:1048576:1:",
    "version=2 comp=0:eof:1048576:1: 3",
    "version=2 comp=0:1048576:1048576:1:1 comp=1048576:eof:1048576:0:mdt",  # Data-on-MDT not first
    "version=2 comp=0:1048576:1048576:2:mdt comp=1048576:eof:-:1:-",
    "version=2 comp=0:1048576:1048576:-1:mdt comp=1048576:eof:-:1:-",
    "version=2 comp=0:eof:-:1:-:pool=", "version=2 comp=0:eof:-:1:-:pool=sixteen_chars_xx",
    "version=2 comp=0:eof:-:1:-:pool=a.b", "version=2 pool= comp=0:eof:-:1:-",
    "version=2 comp=0:eof:-:1:- pool=x",  # a pool field after the components
    "version=2 comp=0:eof:-:1:-:mirror", "version=2 comp=0:eof:-:1:-:",
    "version=2 comp=0:eof:-:1:-\t", "version=2 comp=0:eof:-:1:-:pool=caf\u00e9",
]
# Python takes these; no Lustre layout has them, and the library refuses them (README "Formats").
BEYOND_LUSTRE = [
    "version=2 comp=0:eof:-:99999999999999999999999:-",
    "version=2 comp=0:eof:-:65535:-",
    "version=1 stripe_size=1048576 stripe_count=1 osts=4294967296",
    "version=2 comp=0:eof:36893488147419103232:1:-",
    " ".join(["version=2"] + [f"comp={i}:{i + 1}:-:1:-" for i in range(64)] + ["comp=64:eof:-:1:-"]),
]


def python_view(attr: str) -> str:
    """What iez.layout.emulated makes of ``attr``, in layout_tool's line format."""
    try:
        layout = parse_attr(attr, "test")
    except ValueError:
        return "error"
    return "\t".join(["ok", format_attr(layout), canonical_template(layout), format_components(layout.as_components())])


@pytest.fixture(scope="module")
def tool() -> Path:
    _make("build/layout_tool")
    return TOOL


def c_view(tool: Path, *texts: str) -> list[str]:
    done = subprocess.run([str(tool), "text", *texts], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().split("\n")
    assert lines[-1] == ""
    return lines[:-1]


def test_c_and_python_read_and_write_the_layout_text_alike(tool):
    texts = VALID + INVALID
    python = [python_view(t) for t in texts]
    assert [p == "error" for p in python] == [False] * len(VALID) + [True] * len(INVALID)  # the cases are what they say
    assert dict(zip(texts, c_view(tool, *texts))) == dict(zip(texts, python))
    assert [python_view(t) != "error" for t in BEYOND_LUSTRE] == [True] * len(BEYOND_LUSTRE)
    assert c_view(tool, *BEYOND_LUSTRE) == ["error"] * len(BEYOND_LUSTRE)


def test_c_formatting_is_canonical(tool):
    """Formatted text reads back to itself: what the library writes is what iez.layout reads."""
    for line in c_view(tool, *VALID):
        _, formatted, template, v2 = line.split("\t")
        again = c_view(tool, formatted, template, v2)
        assert [a.split("\t")[1] for a in again] == [formatted, template, v2]
        assert format_attr(parse_attr(formatted, "t")) == formatted


def test_malformed_prefixes_and_mutations_are_refused_without_crashing(tool):
    base = "version=2 comp=0:1048576:1048576:0:mdt comp=1048576:eof:1048576:4:1,2,5,6:pool=flash:overstripe"
    texts = [base[:i] for i in range(len(base))] + [base[:i] + "x" + base[i + 1:] for i in range(len(base))]
    assert c_view(tool, *texts) == [python_view(t) for t in texts]


# ---- LL_IOC_LOV_SETSTRIPE: the bytes, field by field ------------------------------------------------------
LOV_USER_MAGIC_V1, LOV_USER_MAGIC_V3 = 0x0BD10BD0, 0x0BD30BD0
LOV_USER_MAGIC_SPECIFIC, LOV_USER_MAGIC_COMP_V1 = 0x0BD50BD0, 0x0BD60BD0
LOV_USER_MAGIC_FOREIGN = 0x0BD70BD0
RAID0, MDT, OVERSTRIPING, RELEASED = 0x1, 0x100, 0x200, 0x80000000
LCME_FL_INIT, LCME_FL_EXTENSION = 0x10, 0x40
LUSTRE_EOF = 2**64 - 1
COMP_HEADER = struct.Struct("<IIIHHH6sQ")  # magic, size, layout_gen, flags, entry_count, mirror_count, pad, pad
COMP_ENTRY = struct.Struct("<IIQQIIIQI")  # id, flags, e_start, e_end, offset, size, layout_gen, timestamp, pad
LUM_V3 = struct.Struct("<II16sIHH16s")  # magic, pattern, oi, stripe_size, stripe_count, stripe_offset, pool
LUM_V1 = struct.Struct("<II16sIHH")
OST_DATA = struct.Struct("<16sII")  # oi, l_ost_gen, l_ost_idx


def lum_bytes(tool: Path, attr: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(tool), "lum", attr], capture_output=True, timeout=60)


def check_sub_lum(buf: bytes, at: int, size: int, comp) -> None:
    """One component's lov_user_md_v3 against the component it says."""
    magic, pattern, oi, stripe_size, count, offset, pool = LUM_V3.unpack_from(buf, at)
    assert oi == bytes(16)
    if comp.dom:
        assert (magic, pattern, count, offset, pool) == (LOV_USER_MAGIC_V3, MDT, 0, 0xFFFF, bytes(16))
        assert stripe_size == (comp.stripe_size or comp.end)
        assert size == LUM_V3.size
        return
    assert pattern == RAID0 | (OVERSTRIPING if comp.overstriping else 0)
    assert stripe_size == (comp.stripe_size or 0)
    assert count == (0xFFFF if comp.stripe_count == -1 else comp.stripe_count)
    assert pool == (comp.pool or "").encode().ljust(16, b"\0")
    if comp.osts:
        assert (magic, offset) == (LOV_USER_MAGIC_SPECIFIC, comp.osts[0])
        objects = [OST_DATA.unpack_from(buf, at + LUM_V3.size + i * OST_DATA.size) for i in range(len(comp.osts))]
        assert objects == [(bytes(16), 0, ost) for ost in comp.osts]
    else:
        assert (magic, offset) == (LOV_USER_MAGIC_V3, 0xFFFF)  # Lustre chooses when it instantiates it
    assert size == LUM_V3.size + len(comp.osts) * OST_DATA.size


SETSTRIPE_CASES = [
    "version=1 stripe_size=4194304 stripe_count=3 osts=5,0,12",
    "version=2 comp=0:eof:1048576:4:1,2,5,6:pool=flash",
    "version=2 comp=0:eof:-:-1:-:pool=flash",
    "version=2 comp=0:1048576:1048576:0:mdt comp=1048576:67108864:1048576:4:1,2,5,6:pool=flash "
    "comp=67108864:eof:4194304:-1:-:pool=flash",
    "version=2 comp=0:1048576:-:0:mdt comp=1048576:eof:2097152:4:3,3,8,8:pool=ssd:overstripe",
    "version=2 comp=0:4194304:1048576:2:7,1 comp=4194304:eof:-:8:-",
]


@pytest.mark.parametrize("attr", SETSTRIPE_CASES)
def test_setstripe_buffer_field_by_field(tool, attr):
    layout = parse_attr(attr, "case")
    done = lum_bytes(tool, attr)
    assert done.returncode == 0, done.stderr
    buf = done.stdout
    comps = layout.as_components()
    whole = len(comps) == 1 and comps[0].start == 0 and comps[0].end == -1 and not comps[0].dom
    if whole:  # a plain layout, with or without a pool: one lov_user_md_v3, as lfs setstripe without -E
        check_sub_lum(buf, 0, len(buf), comps[0])
        return
    magic, size, gen, flags, count, mirrors, pad1, pad2 = COMP_HEADER.unpack_from(buf, 0)
    assert (magic, size, gen, flags, count, mirrors, pad1, pad2) == (
        LOV_USER_MAGIC_COMP_V1, len(buf), 0, 0, len(comps), 0, bytes(6), 0)
    offset = COMP_HEADER.size + len(comps) * COMP_ENTRY.size
    for i, comp in enumerate(comps):
        cid, cflags, start, end, at, length, cgen, stamp, pad = COMP_ENTRY.unpack_from(
            buf, COMP_HEADER.size + i * COMP_ENTRY.size)
        assert (cid, cflags, cgen, stamp, pad) == (0, 0, 0, 0, 0)
        assert (start, end) == (comp.start, LUSTRE_EOF if comp.end == -1 else comp.end)
        assert at == offset
        check_sub_lum(buf, at, length, comp)
        offset += length
    assert offset == len(buf)


@pytest.mark.parametrize("attr", [
    "version=2 comp=0:eof:1000000:1:1",  # not a multiple of 64 KiB
    "version=2 comp=0:eof:4294967296:1:1",  # does not fit lmm_stripe_size
    "version=2 comp=0:eof:-:0:mdt",  # Data-on-MDT to the end of the file: no stripe size to give
    "version=2 comp=0:eof:1048576:1:65535",  # OST index -1 to Lustre
])
def test_layouts_lustre_cannot_hold_get_no_buffer(tool, attr):
    done = lum_bytes(tool, attr)
    assert (done.returncode, done.stdout) == (1, b"")


# ---- LL_IOC_LOV_GETSTRIPE: buffers as Lustre fills them ------------------------------------------------------
def sub_lum(magic: int, pattern: int, stripe_size: int, count: int, osts=(), pool: str = "", offset: int = 0) -> bytes:
    if magic == LOV_USER_MAGIC_V1:
        head = LUM_V1.pack(magic, pattern, bytes(16), stripe_size, count, offset)
    else:
        head = LUM_V3.pack(magic, pattern, bytes(16), stripe_size, count, offset, pool.encode().ljust(16, b"\0"))
    return head + b"".join(OST_DATA.pack(os.urandom(16), 0, o) for o in osts)


def comp_md(entries, mirrors: int = 0) -> bytes:
    """``entries``: (id, flags, start, end, sub_lum bytes)."""
    offset = COMP_HEADER.size + len(entries) * COMP_ENTRY.size
    table, blobs = b"", b""
    for cid, flags, start, end, blob in entries:
        table += COMP_ENTRY.pack(cid, flags, start, end, offset + len(blobs), len(blob), 3, 1700000000, 0)
        blobs += blob
    total = offset + len(blobs)
    return COMP_HEADER.pack(LOV_USER_MAGIC_COMP_V1, total, 7, 0, len(entries), mirrors, bytes(6), 0) + table + blobs


def getstripe(tool: Path, tmp_path: Path, buf: bytes, directory: bool = False) -> str:
    f = tmp_path / "lum.bin"
    f.write_bytes(buf + bytes(65536 - len(buf)))  # the rest of the caller's buffer, as the ioctl leaves it
    done = subprocess.run([str(tool), "getstripe", str(f)] + (["dir"] if directory else []),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.rstrip("\n")


PFL_FILE = comp_md([
    (1, LCME_FL_INIT, 0, MIB, sub_lum(LOV_USER_MAGIC_V3, MDT, MIB, 0)),
    (2, LCME_FL_INIT, MIB, 64 * MIB, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 4, (1, 2, 5, 6), "flash", 1)),
    (3, 0, 64 * MIB, LUSTRE_EOF, sub_lum(LOV_USER_MAGIC_V3, RAID0, 4 * MIB, 0xFFFF, (), "flash", 0xFFFF)),
])
GETSTRIPE_CASES = {
    "pfl-dom-pool-uninstantiated": (PFL_FILE, False,
        "version=2 comp=0:1048576:1048576:0:mdt comp=1048576:67108864:1048576:4:1,2,5,6:pool=flash "
        "comp=67108864:eof:4194304:-1:-:pool=flash"),
    "plain-v1": (sub_lum(LOV_USER_MAGIC_V1, RAID0, MIB, 3, (3, 7, 11)), False,
        "version=1 stripe_size=1048576 stripe_count=3 osts=3,7,11"),
    "plain-v3-pool": (sub_lum(LOV_USER_MAGIC_V3, RAID0, 4 * MIB, 2, (9, 4), "ssd"), False,
        "version=2 comp=0:eof:4194304:2:9,4:pool=ssd"),
    "overstriped": (sub_lum(LOV_USER_MAGIC_V3, RAID0 | OVERSTRIPING, MIB, 4, (2, 2, 5, 5)), False,
        "version=2 comp=0:eof:1048576:4:2,2,5,5:overstripe"),
    # HSM released (no objects anywhere), and a component created but not instantiated with count 0
    "hsm-released": (comp_md([
        (1, LCME_FL_INIT, 0, LUSTRE_EOF, sub_lum(LOV_USER_MAGIC_V3, RAID0 | RELEASED, MIB, 2, (1, 2)))]), False,
        "version=2 comp=0:eof:1048576:2:-"),
    "uninstantiated-default-count": (comp_md([
        (1, LCME_FL_INIT, 0, MIB, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1, (3,))),
        (2, 0, MIB, LUSTRE_EOF, sub_lum(LOV_USER_MAGIC_V3, RAID0, 0, 0))]), False,
        "version=2 comp=0:1048576:1048576:1:3 comp=1048576:eof:-:1:-"),
    # a mirrored (FLR) file: ids carry the mirror id in bits 30..16; the text (version 3) says every mirror
    "first-mirror": (comp_md([
        ((1 << 16) | 1, LCME_FL_INIT, 0, LUSTRE_EOF, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1, (4,), "flash")),
        ((2 << 16) | 2, LCME_FL_INIT, 0, LUSTRE_EOF, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1, (9,), "disk")),
    ], mirrors=1), False, "version=3 mirror=1 comp=0:eof:1048576:1:4:pool=flash mirror=2 comp=0:eof:1048576:1:9:pool=disk"),
    # directory defaults: no objects; stripe size 0 and count 0 are the file system's defaults
    "dir-plain": (sub_lum(LOV_USER_MAGIC_V1, RAID0, 0, 4, offset=0xFFFF), True, "version=2 comp=0:eof:-:4:-"),
    # stripe count 0: the file system's default count, 1 unless changed (as iez.layout.lustre reads it)
    "dir-plain-fs-defaults": (sub_lum(LOV_USER_MAGIC_V3, RAID0, 0, 0, pool="flash", offset=0xFFFF), True,
        "version=2 comp=0:eof:-:1:-:pool=flash"),
    "dir-pfl": (comp_md([
        (0, 0, 0, MIB, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1, offset=0xFFFF)),
        (0, 0, MIB, LUSTRE_EOF, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 0xFFFF, offset=0xFFFF)),
    ]), True, "version=2 comp=0:1048576:1048576:1:- comp=1048576:eof:1048576:-1:-"),
}


# iez.layout.lustre keeps no overstriping flag on a plain layout.
PYTHON_READS_OTHERWISE = {"overstriped"}


@pytest.mark.parametrize("case", sorted(GETSTRIPE_CASES))
def test_getstripe_buffers_read_as_the_layout_text(tool, tmp_path, case):
    buf, directory, want = GETSTRIPE_CASES[case]
    status, formatted, template, v2 = getstripe(tool, tmp_path, buf, directory).split("\t")
    assert (status, template if directory else formatted) == ("ok", want)
    if not directory:  # the file's text reads in Python as the same layout
        assert format_attr(parse_attr(formatted, case)) == formatted
        assert template == canonical_template(parse_attr(formatted, case))
        assert v2 == format_components(parse_attr(formatted, case).as_components())
    if case in PYTHON_READS_OTHERWISE:
        return
    # iez.layout.lustre reads the same buffer as the same layout (a directory's: the same template)
    python = parse_lov_user_md(buf + bytes(65536 - len(buf)), case, directory=directory)
    assert (canonical_template(python) if directory else format_attr(python)) == want


def test_getstripe_refuses_what_the_text_cannot_say(tool, tmp_path):
    sel = comp_md([(1, LCME_FL_INIT, 0, 64 * MIB, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1, (1,))),
                   (2, LCME_FL_EXTENSION, 64 * MIB, LUSTRE_EOF, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1))])
    foreign = struct.pack("<IIII", LOV_USER_MAGIC_FOREIGN, 4, 0xDA05, 0) + b"link"
    gap = comp_md([(1, 0, 0, MIB, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1)),
                   (2, 0, 2 * MIB, LUSTRE_EOF, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1))])
    raid1 = sub_lum(LOV_USER_MAGIC_V3, 0x2, MIB, 1, (1,))
    bad_pool = sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1, (1,), "a.b")
    wide = sub_lum(LOV_USER_MAGIC_V3, RAID0 | OVERSTRIPING, MIB, 0xFFE0, ())  # "32 stripes per OST"
    # a file's plain layout without objects (created, none yet; HSM released): no layout to tell
    no_objects = sub_lum(LOV_USER_MAGIC_V1, RAID0, MIB, 0)
    released = sub_lum(LOV_USER_MAGIC_V3, RAID0 | RELEASED, MIB, 2, (1, 2))
    for buf in (sel, foreign, gap, raid1, bad_pool, wide, no_objects, released):
        assert getstripe(tool, tmp_path, buf) == "error"
    # entries pointing outside the layout, and a layout longer than the buffer: refused, never read past
    broken = bytearray(PFL_FILE)
    struct.pack_into("<I", broken, COMP_HEADER.size + COMP_ENTRY.size + 24, len(PFL_FILE) - 8)
    f = tmp_path / "short.bin"
    for buf in (bytes(broken), PFL_FILE[: len(PFL_FILE) - 1]):
        f.write_bytes(buf)
        done = subprocess.run([str(tool), "getstripe", str(f)], capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout) == (0, "error\n")


# ---- emulation under real programs -------------------------------------------------------------------------
def pin_rows(db: str, rows: dict) -> None:
    """``path: (layout, default_layout)`` stored as iez stores a policy's allocation: the version-2 text in
    ``layout`` (the plain columns hold a decoy the library must not use), the learnt default beside it."""
    pin_layouts(db, {p: (MIB, [99]) for p in rows})
    from iez.config import database_url
    from iez.db.engine import make_engine

    engine = make_engine(database_url(db))
    try:
        with engine.begin() as conn:
            for path, (layout, default) in rows.items():
                conn.execute(text("UPDATE allocations SET layout = :layout, default_layout = :default "
                                  "WHERE path = :path AND state <> 'stale'"),
                             {"layout": layout, "default": default, "path": str(path)})
    finally:
        engine.dispose()


@pytest.fixture(params=["plain", "sanitized"])
def any_runner(request):
    """The plain build and the ASan+UBSan one (whose reports on stderr fail the tests that expect none)."""
    return request.getfixturevalue("runner" if request.param == "plain" else "san_runner")


PFL_POOL = "version=2 comp=0:1048576:1048576:0:mdt comp=1048576:eof:1048576:4:1,2,5,6:pool=flash"
POOL_PLAIN = "version=2 comp=0:eof:4194304:2:9,4:pool=ssd"
OVERSTRIPED = "version=2 comp=0:4194304:1048576:4:3,3,7,7:overstripe comp=4194304:eof:4194304:2:1,2:pool=disk"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_pool_and_pfl_allocations_become_exactly_their_version2_attribute(backend, any_runner, shared_db,
                                                                         state_dir, tmp_path):
    runner = any_runner
    db = shared_db(backend)
    work = tmp_path / "work"
    work.mkdir()
    wanted = {work / "dd.out": PFL_POOL, work / "py.out": POOL_PLAIN, work / "over.out": OVERSTRIPED}
    pin_rows(db, {p: (t, None) for p, t in wanted.items()})
    dd = runner.iez(["dd", "if=/dev/zero", f"of={work / 'dd.out'}", "bs=4096", "count=3", "status=none"], db)
    assert (dd.returncode, dd.stderr) == (0, b"")
    script = "import sys\nfor p in sys.argv[1:]:\n    open(p, 'wb').write(b'x' * 10)\n"
    py = runner.iez([sys.executable, "-c", script, work / "py.out", work / "over.out"], db)
    assert (py.returncode, py.stderr) == (0, b"")
    assert layouts_below(work) == {str(p): t for p, t in wanted.items()}
    assert (work / "dd.out").stat().st_size == 3 * 4096 and (work / "py.out").read_bytes() == b"x" * 10
    assert sorted((r["hits"], r["misses"], r["errors"], r["skips"]) for r in counts_rows(state_dir)) == [
        ("1", "0", "0", "0"), ("2", "0", "0", "0")]


T1 = "version=2 comp=0:1048576:-:1:- comp=1048576:eof:-:4:-:pool=flash"  # the default iez learnt under
T2 = "version=2 comp=0:eof:-:8:-"  # what the user set since


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_a_changed_directory_default_gets_the_plain_call_and_a_skip(backend, any_runner, shared_db, state_dir,
                                                                   tmp_path):
    runner = any_runner
    db = shared_db(backend)
    work = tmp_path / "work"
    dirs = {name: work / name for name in ("same", "none", "unchecked", "respelled", "changed", "set-since",
                                           "unreadable")}
    for d in dirs.values():
        d.mkdir(parents=True)
    attrs = {
        "same": T1,
        "unchecked": T2,  # default_layout NULL: learnt without looking, nothing to compare
        "respelled": "version=2 comp=00:01048576:-:1:- comp=1048576:eof:-:4:-:pool=flash",  # the same template
        "changed": T2,
        "set-since": T1,  # learnt without a default, one was set since
        "unreadable": "version=2 comp=0:eof:garbage",
    }
    for name, attr in attrs.items():
        os.setxattr(dirs[name], LAYOUT_XATTR, attr.encode())
    learnt = {"same": canonical_template(parse_attr(T1, "t")), "none": "", "unchecked": None,
              "respelled": canonical_template(parse_attr(T1, "t")), "changed": canonical_template(parse_attr(T1, "t")),
              "set-since": "", "unreadable": ""}
    pin_rows(db, {dirs[n] / "f.dat": (PFL_POOL, learnt[n]) for n in dirs})
    script = "import sys\nfor p in sys.argv[1:]:\n    open(p, 'w').write('data')\n"
    paths = [dirs[n] / "f.dat" for n in dirs] + [work / "same" / "not-allocated.dat"]
    done = runner.iez([sys.executable, "-c", script, *paths], db)
    assert (done.returncode, done.stderr) == (0, b"")
    assert all(p.read_text() == "data" for p in paths)  # every file is there, placed or not
    placed = {str(dirs[n] / "f.dat"): PFL_POOL for n in ("same", "none", "unchecked", "respelled")}
    assert {p: t for p, t in layouts_below(work).items()} == placed
    (row,) = counts_rows(state_dir)
    assert (row["hits"], row["misses"], row["errors"], row["skips"]) == ("4", "1", "0", "3")


@pytest.mark.timeout(120)
def test_a_plain_row_with_a_learnt_default_is_checked_too(runner, shared_db, state_dir, tmp_path):
    """default_layout applies to plain allocations as well: the directory's default decides, not the layout."""
    db = shared_db("sqlite")
    work = tmp_path / "work"
    work.mkdir()
    os.setxattr(work, LAYOUT_XATTR, T2.encode())
    expected = pin_layouts(db, {work / "a.dat": (MIB, [1, 2]), work / "b.dat": (MIB, [3])})
    from iez.config import database_url
    from iez.db.engine import make_engine

    engine = make_engine(database_url(db))
    with engine.begin() as conn:
        conn.execute(text("UPDATE allocations SET default_layout = :d WHERE path = :p"),
                     {"d": canonical_template(parse_attr(T2, "t")), "p": str(work / "a.dat")})
        conn.execute(text("UPDATE allocations SET default_layout = :d WHERE path = :p"),
                     {"d": "", "p": str(work / "b.dat")})
    engine.dispose()
    done = runner.iez(["touch", work / "a.dat", work / "b.dat"], db)
    assert (done.returncode, done.stderr) == (0, b"")
    assert read_layout(work / "a.dat") == expected[str(work / "a.dat")]
    assert read_layout(work / "b.dat") is None
    (row,) = counts_rows(state_dir)
    assert (row["hits"], row["skips"]) == ("1", "1")


TRACE_HEADER = ["path", "bytes_written", "file_size", "stripe_count", "stripe_size", "rank", "comm_size",
                "open_time", "pid", "host", "app", "job", "layout", "dir_layout"]


@pytest.mark.timeout(120)
def test_traces_record_the_directory_default_when_the_file_was_first_opened(libiez, tmp_path):
    out, traces = tmp_path / "out", tmp_path / "traces"
    (out / "pfl").mkdir(parents=True)
    (out / "plain").mkdir()
    (out / "bare").mkdir()
    # set as lfs setstripe -d would leave it, and as a version-1 layout (its template is the canonical text)
    pfl = "version=2 comp=0:1048576:1048576:1:- comp=1048576:eof:-:-1:-:pool=flash"
    os.setxattr(out / "pfl", LAYOUT_XATTR, pfl.encode())
    os.setxattr(out / "plain", LAYOUT_XATTR, b"version=1 stripe_size=2097152 stripe_count=2 osts=4,5")
    # the default changes after the file was first opened: the trace keeps the first
    script = (f"import os\nf = open({str(out / 'pfl' / 'a.dat')!r}, 'w'); f.write('abc')\n"
              f"os.setxattr({str(out / 'pfl')!r}, {LAYOUT_XATTR!r}, b'version=2 comp=0:eof:-:2:-')\nf.close()\n"
              f"open({str(out / 'plain' / 'b.dat')!r}, 'w').write('b')\n"
              f"open({str(out / 'bare' / 'c,d.dat')!r}, 'w').write('c')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("IEZ_") and k != "LD_PRELOAD"}
    env.update(LD_PRELOAD=str(libiez), IEZ_MODE="trace", IEZ_TRACE_DIR=str(traces), IEZ_INCLUDE=str(out),
               IEZ_STATE_DIR=str(tmp_path / "state"))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    (trace,) = traces.glob("iez-trace.*.csv")
    with trace.open(newline="") as fh:
        reader = csv.reader(fh)
        assert next(reader) == TRACE_HEADER
        rows = {Path(r[0]).name: dict(zip(TRACE_HEADER, r)) for r in reader}
    assert {name: (r["layout"], r["dir_layout"]) for name, r in rows.items()} == {
        "a.dat": ("", canonical_template(parse_attr(pfl, "t"))),
        "b.dat": ("", "version=2 comp=0:eof:2097152:2:-"),
        "c,d.dat": ("", ""),  # no default; no layout off Lustre
    }
    assert rows["a.dat"]["bytes_written"] == "3"


@pytest.mark.timeout(120)
def test_refused_attributes_put_version2_layouts_in_the_sidecar_log(runner, shared_db, state_dir, tmp_path):
    """Where the attribute is refused (a namespace the kernel does not know), the version-2 text goes to the
    sidecar log iez reads, and a directory can have no default there."""
    from iez.layout.emulated import read_sidecar

    db = shared_db("sqlite")
    work = tmp_path / "work"
    work.mkdir()
    pin_rows(db, {work / "pfl.dat": (PFL_POOL, ""), work / "learnt-with-default.dat": (POOL_PLAIN, T1)})
    done = runner.iez(["touch", work / "pfl.dat", work / "learnt-with-default.dat"], db,
                      IEZ_LAYOUT_XATTR="bogus.iez.layout")
    assert (done.returncode, done.stderr) == (0, b"")
    assert {p: format_attr(layout) for p, layout in read_sidecar(state_dir / "layouts.log").items()} == {
        str(work / "pfl.dat"): PFL_POOL}
    (row,) = counts_rows(state_dir)
    assert (row["hits"], row["skips"], row["errors"]) == ("1", "1", "0")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_a_malformed_layout_row_is_an_error_and_the_plain_call(backend, runner, shared_db, state_dir, tmp_path):
    db = shared_db(backend)
    work = tmp_path / "work"
    work.mkdir()
    pin_rows(db, {work / "bad.dat": ("version=2 comp=0:eof:1048576:2:3,3", None)})  # an OST twice
    done = runner.iez([sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('ok')", work / "bad.dat"], db)
    assert (done.returncode, done.stderr) == (0, b"")
    assert (work / "bad.dat").read_text() == "ok" and layouts_below(work) == {}
    (row,) = counts_rows(state_dir)
    assert (row["hits"], row["misses"], row["errors"], row["skips"]) == ("0", "0", "1", "0")
