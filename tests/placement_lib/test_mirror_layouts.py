"""Mirrored (FLR) layouts in libiez (issue 17): the version-3 text read and written by C and Python alike, the
LL_IOC_LOV_SETSTRIPE buffer of a mirrored layout, GETSTRIPE buffers of mirrored files, and a real program
under LD_PRELOAD whose file gets its mirrored layout with every mirror but the first marked stale."""

from __future__ import annotations

import sys

import pytest

from conftest import MIB, counts_rows, layouts_below

from iez.layout.emulated import format_attr, parse_attr
from test_layouts import (COMP_ENTRY, COMP_HEADER, LCME_FL_INIT, LOV_USER_MAGIC_COMP_V1, LOV_USER_MAGIC_V3,
                          LUSTRE_EOF, RAID0, c_view, check_sub_lum, comp_md, getstripe, lum_bytes, pin_rows,
                          python_view, sub_lum, tool)  # noqa: F401 (tool is a fixture)

LCME_FL_STALE, LCME_FL_PREF_RD = 0x1, 0x2
LCM_FL_RDONLY = 0x1

MIRRORED_VALID = [
    "version=3 mirror=1:prefer comp=0:eof:1048576:2:0,1 mirror=2:stale comp=0:eof:1048576:2:4,5",
    "version=3 mirror=1 comp=0:eof:1048576:1:3 mirror=2 comp=0:eof:1048576:1:7",  # no copy preferred
    "version=3 mirror=1 comp=0:eof:-:2:- mirror=2 comp=0:eof:-:2:-",  # a template
    # PFL copies with their own extents and pools, three and four mirrors, the flags in either order
    "version=3 mirror=1:stale comp=0:1048576:1048576:0:mdt comp=1048576:eof:1048576:2:1,2:pool=flash "
    "mirror=2:prefer comp=0:4194304:1048576:1:8 comp=4194304:eof:4194304:2:9,10:pool=disk",
    "version=3 mirror=1 comp=0:eof:1048576:1:1 mirror=2:stale:prefer comp=0:eof:1048576:1:2 "
    "mirror=3:stale comp=0:eof:1048576:1:3",
    "version=3 mirror=1 pool=ssd comp=0:eof:1048576:1:1 mirror=2 comp=0:eof:1048576:1:2 mirror=3 "
    "comp=0:eof:1048576:1:3 mirror=4 comp=0:eof:1048576:1:4",
    "version=3 mirror=01 comp=0:eof:1048576:1:1 mirror=2 comp=0:eof:1048576:1:1",  # the same OST: Lustre's choice
]
MIRRORED_INVALID = [
    "version=3", "version=3 ", "version=3 comp=0:eof:1048576:1:1",  # no mirror
    "version=3 mirror=1 comp=0:eof:1048576:1:1",  # one mirror
    "version=3 mirror=2 comp=0:eof:1048576:1:1 mirror=1 comp=0:eof:1048576:1:2",  # IDs out of order
    "version=3 mirror=1 mirror=2 comp=0:eof:1048576:1:2",  # a mirror without components
    "version=3 mirror=1 comp=0:eof:1048576:1:1 mirror=2",
    "version=3 mirror=1:stale comp=0:eof:1048576:1:1 mirror=2:stale comp=0:eof:1048576:1:2",  # every copy stale
    "version=3 mirror=1:prefer comp=0:eof:1048576:1:1 mirror=2:prefer comp=0:eof:1048576:1:2",  # two preferred
    "version=3 mirror=1:stale:stale comp=0:eof:1048576:1:1 mirror=2 comp=0:eof:1048576:1:2",
    "version=3 mirror=1:hot comp=0:eof:1048576:1:1 mirror=2 comp=0:eof:1048576:1:2",
    "version=3 mirror=1: comp=0:eof:1048576:1:1 mirror=2 comp=0:eof:1048576:1:2",
    "version=3 mirror=1 comp=0:eof:1048576:1:1  mirror=2 comp=0:eof:1048576:1:2",  # an empty field
    "version=3 mirror=1 comp=0:eof:1048576:1:1 mirror=2 comp=0:eof:1048576:1:2 ",
    "version=3 mirror=1 comp=0:1048576:1048576:1:1 mirror=2 comp=1048576:eof:1048576:1:2",  # from 0, each copy
    "version=3 mirror=1 comp=0:eof:1048576:1:1 mirror=2 comp=0:eof:1048576:1:2 mirror=3 comp=0:eof:1048576:1:3 "
    "mirror=4 comp=0:eof:1048576:1:4 mirror=5 comp=0:eof:1048576:1:5",  # more than 4
    "version=3 mirror=-1 comp=0:eof:1048576:1:1 mirror=2 comp=0:eof:1048576:1:2",
    "version=2 mirror=1 comp=0:eof:1048576:1:1",  # version 2 has no mirrors
    "version=1 stripe_size=1048576 stripe_count=1 osts=1 mirror=2",
]


def test_c_and_python_read_and_write_mirrored_text_alike(tool):
    texts = MIRRORED_VALID + MIRRORED_INVALID
    python = [python_view(t) for t in texts]
    assert [p == "error" for p in python] == [False] * len(MIRRORED_VALID) + [True] * len(MIRRORED_INVALID)
    assert dict(zip(texts, c_view(tool, *texts))) == dict(zip(texts, python))
    for line in c_view(tool, *MIRRORED_VALID):  # what C writes reads back to itself, in C and in Python
        _, formatted, template, v2 = line.split("\t")
        assert [a.split("\t")[1] for a in c_view(tool, formatted, template, v2)] == [formatted, template, v2]
        assert format_attr(parse_attr(formatted, "t")) == formatted
        assert formatted.startswith("version=3 ") and template.startswith("version=3 ") and v2.startswith("version=2 ")


def test_the_first_canonical_text_round_trips_exactly(tool):
    text = MIRRORED_VALID[0]
    assert format_attr(parse_attr(text, "t")) == text
    assert c_view(tool, text)[0].split("\t")[1] == text


@pytest.mark.parametrize("attr", [MIRRORED_VALID[0], MIRRORED_VALID[3]])
def test_setstripe_buffer_of_a_mirrored_layout_carries_mirror_ids_and_prefer(tool, attr):
    layout = parse_attr(attr, "case")
    done = lum_bytes(tool, attr)
    assert done.returncode == 0, done.stderr
    buf = done.stdout
    entries = [(k + 1, c) for k, mirror in enumerate(layout.mirrors) for c in mirror]
    magic, size, gen, flags, count, mirrors, pad1, pad2 = COMP_HEADER.unpack_from(buf, 0)
    assert (magic, size, gen, flags, count, mirrors) == (LOV_USER_MAGIC_COMP_V1, len(buf), 0, LCM_FL_RDONLY,
                                                         len(entries), len(layout.mirrors) - 1)
    offset = COMP_HEADER.size + len(entries) * COMP_ENTRY.size
    for i, (mirror, comp) in enumerate(entries):
        cid, cflags, start, end, at, length, *_ = COMP_ENTRY.unpack_from(buf, COMP_HEADER.size + i * COMP_ENTRY.size)
        assert (cid >> 16, cid & 0xFFFF) == (mirror, 0)  # mirror_id_of(lcme_id); Lustre numbers the components
        assert cflags == (LCME_FL_PREF_RD if mirror - 1 == layout.preferred_mirror else 0)  # stale is Lustre's to set
        assert (start, end) == (comp.start, LUSTRE_EOF if comp.end == -1 else comp.end)
        assert at == offset
        check_sub_lum(buf, at, length, comp)
        offset += length
    assert offset == len(buf)


def test_getstripe_of_a_mirrored_file_keeps_stale_and_prefer(tool, tmp_path):
    buf = comp_md([
        ((1 << 16) | 1, LCME_FL_INIT | LCME_FL_STALE, 0, LUSTRE_EOF, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 2, (0, 1))),
        ((2 << 16) | 2, LCME_FL_INIT | LCME_FL_PREF_RD, 0, 4 * MIB, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1, (5,))),
        ((2 << 16) | 3, LCME_FL_INIT, 4 * MIB, LUSTRE_EOF, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1, (6,))),
    ], mirrors=1)
    status, formatted, _, _ = getstripe(tool, tmp_path, buf).split("\t")
    assert status == "ok"
    assert formatted == ("version=3 mirror=1:stale comp=0:eof:1048576:2:0,1 mirror=2:prefer "
                         "comp=0:4194304:1048576:1:5 comp=4194304:eof:1048576:1:6")
    every_stale = comp_md([
        ((1 << 16) | 1, LCME_FL_INIT | LCME_FL_STALE, 0, LUSTRE_EOF, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1, (0,))),
        ((2 << 16) | 2, LCME_FL_INIT | LCME_FL_STALE, 0, LUSTRE_EOF, sub_lum(LOV_USER_MAGIC_V3, RAID0, MIB, 1, (5,))),
    ], mirrors=1)
    assert getstripe(tool, tmp_path, every_stale) == "error"


MIRRORED = "version=3 mirror=1 comp=0:eof:1048576:2:0,1 mirror=2:prefer comp=0:eof:1048576:2:4,5"


@pytest.mark.timeout(120)
def test_a_real_program_gets_its_mirrored_layout_with_the_other_mirrors_stale(runner, shared_db, state_dir,
                                                                                 tmp_path):
    """LD_PRELOAD=libiez.so: the file a program creates carries the allocation's mirrors; as FLR does for a
    write, the first mirror holds it and the others are marked stale until a resync."""
    db = shared_db("sqlite")
    work = tmp_path / "work"
    work.mkdir()
    target = work / "mirrored.out"
    pin_rows(db, {target: (MIRRORED, None)})
    script = "import sys\nopen(sys.argv[1], 'wb').write(b'x' * 4096)\n"
    done = runner.iez([sys.executable, "-c", script, target], db)
    assert (done.returncode, done.stderr) == (0, b"")
    got = layouts_below(work)[str(target)]
    assert got == "version=3 mirror=1 comp=0:eof:1048576:2:0,1 mirror=2:prefer:stale comp=0:eof:1048576:2:4,5"
    layout = parse_attr(got, str(target))
    assert (layout.osts, layout.preferred_mirror, layout.stale) == ((0, 1), 1, (1,))
    assert target.read_bytes() == b"x" * 4096
    assert [(r["hits"], r["errors"]) for r in counts_rows(state_dir)] == [("1", "0")]

