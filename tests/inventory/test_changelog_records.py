"""Lustre changelog records as ``lfs changelog`` prints them: every field read, bad records named."""

from __future__ import annotations

import pytest

from iez.inventory import consumer
from iez.inventory.changelog import ChangelogError, Record, fid_of_inode, parse

REAL = [
    ("7 01CREAT 13:32:07.365961187 2023.05.10 0x0 t=[0x200000402:0x1:0x0] j=cp.0 ef=0xf u=0:0 nid=0@lo "
     "p=[0x200000007:0x1:0x0] file1",
     dict(index=7, type="CREAT", target="0x200000402:0x1:0x0", parent="0x200000007:0x1:0x0", name="file1",
          job="cp.0", uid=0, gid=0)),
    ("16 08RENME 02:52:19.805772855 2026.03.16 0x0 t=[0:0x0:0x0] ef=0xf u=1000:1000 nid=172.31.39.56@tcp "
     "p=[0x200000401:0x2:0x0] file1_renamed.txt s=[0x200000401:0x3:0x0] sp=[0x200000401:0x2:0x0] file1.txt",
     dict(type="RENME", target="0:0x0:0x0", name="file1_renamed.txt", source="0x200000401:0x3:0x0",
          source_parent="0x200000401:0x2:0x0", source_name="file1.txt", uid=1000)),
    ("17 06UNLNK 02:52:19.807645282 2026.03.16 0x1 t=[0x200000401:0x3:0x0] ef=0xf u=1000:1000 "
     "nid=172.31.39.56@tcp p=[0x200000401:0x2:0x0] file1_renamed.txt",
     dict(type="UNLNK", flags=1, name="file1_renamed.txt")),
    ("4 11CLOSE 02:52:19.798 2026.03.16 0x242 t=[0x200000401:0x3:0x0] ef=0xf u=1000:1000 nid=172.31.39.56@tcp",
     dict(type="CLOSE", flags=0x242, parent=None, name=None)),
    ("3 10OPEN 02:52:19.797 2026.03.16 0x24a t=[0x200000401:0x3:0x0] ef=0xf u=1000:1000 nid=172.31.39.56@tcp "
     "m=-w- p=[0x200000401:0x2:0x0]", dict(type="OPEN", parent="0x200000401:0x2:0x0", name=None)),
    ("12959 13TRUNC 05:51:36.321249 2026.10.09 0xe t=[0x200000403:0x1929:0x0] ef=0xf u=0:0 nid=0@lo",
     dict(type="TRUNC", target="0x200000403:0x1929:0x0")),
    ("12958 12LYOUT 05:51:36.32 2026.10.09 0x0 t=[0x200000403:0x1929:0x0] ef=0xf u=0:0 nid=0@lo",
     dict(type="LYOUT")),
    ("12960 14SATTR 05:51:36.32 2026.10.09 0x14 t=[0x200000403:0x1929:0x0] ef=0xf u=0:0 nid=0@lo",
     dict(type="SATTR")),
    ("12961 15XATTR 05:51:36.32 2026.10.09 0x0 t=[0x200000403:0x1929:0x0] ef=0xf u=0:0 nid=0@lo x=user.iez",
     dict(type="XATTR")),
    ("12962 20MIGRT 05:51:36.32 2026.10.09 0x0 t=[0x200000403:0x1929:0x0] ef=0xf u=0:0 nid=0@lo "
     "p=[0x200000403:0x1:0x0] moved", dict(type="MIGRT", name="moved")),
    ("2 02MKDIR 13:32:07.1 2023.05.10 0x0 t=[0x200000402:0x2:0x0] ef=0xf u=0:0 nid=0@lo p=[0x200000007:0x1:0x0] "
     "a dir with spaces", dict(type="MKDIR", name="a dir with spaces")),
    ("5 07RMDIR 13:32:07.1 2023.05.10 0x1 t=[0x200000402:0x2:0x0] ef=0xf u=0:0 nid=0@lo p=[0x200000007:0x1:0x0] d",
     dict(type="RMDIR")),
    ("6 09RNMTO 13:32:07.1 2023.05.10 0x0 t=[0x200000402:0x5:0x0] ef=0xf u=0:0 nid=0@lo p=[0x200000007:0x1:0x0] b",
     dict(type="RNMTO", name="b")),
    ("0 00MARK 08:53:26.37 2019.02.08 0x0 t=[0x10001:0x0:0x0] ef=0xf u=0:0 nid=0@<0:0> p=[0:0x0:0x0] "
     "mdd_obd-lustre-MDT0000-0", dict(type="MARK", name="mdd_obd-lustre-MDT0000-0")),
]


@pytest.mark.parametrize("line, expected", REAL, ids=[r[1]["type"] for r in REAL])
def test_real_records_are_read_field_by_field(line, expected):
    rec = parse(line + "\n")
    for key, value in expected.items():
        assert getattr(rec, key) == value, key


def test_a_record_written_by_the_emulated_mdt_reads_back_the_same():
    rec = Record(42, "RENME", 1, fid_of_inode(7), "01:02:03.000000004 2026.11.26", fid_of_inode(2), "new name",
                 fid_of_inode(9), fid_of_inode(3), "old", 5, 6)
    assert parse(rec.to_line()) == rec


@pytest.mark.parametrize("line, says", [
    ("12 01CREAT 13:32:07.3 2023.05.10 0x0 t=[0x1:0x2:0x0] ef=0xf u=0:0 nid=0@lo", "record 12: a CREAT record needs p="),
    ("13 99NOPE 13:32:07.3 2023.05.10 0x0 t=[0x1:0x2:0x0] ef=0xf", "record 13: unknown record type 99NOPE"),
    ("14 01CREAT 13:32:07.3 2023.05.10 0x0 t=[0x1:0x2:0x0] ef=0xf u=0:0 nid=0@lo p=[0x1:0x1:0x0]",
     "record 14: p= is not"),
    ("15 01CREAT 13:32:07.3 2023.05.10 0x0 t=[zz] p=[0x1:0x1:0x0] a", "record 15: target t= is not a FID"),
    ("16 02CREAT 13:32:07.3 2023.05.10 0x0 t=[0x1:0x2:0x0]", "record 16: unknown record type 02CREAT"),
    ("17 08RENME 13:32:07.3 2023.05.10 0x0 t=[0:0x0:0x0] u=0:0 p=[0x1:0x1:0x0] b s=[0x1:0x5:0x0] sp=[oops] a",
     "record 17: rename source"),
    ("18 14SATTR 13:32:07.3 2023.05.10 0x0 t=[0x1:0x2:0x0] u=zero", "record 18: u='zero' is not UID:GID"),
    ("not a record at all", "line 'not a record at all'"),
    ("19 01CREAT yesterday 0x0 t=[0x1:0x2:0x0]", "record 19: not a changelog record"),
])
def test_a_malformed_record_is_an_error_naming_it(line, says):
    with pytest.raises(ChangelogError, match=None) as err:
        parse(line)
    assert says in str(err.value)


def _lines(n: int) -> list[str]:
    names = ["plain", "with space", "qu'ote", "non-ASCII é", "\udcff undecodable", "new s=[x] sp=[y] z"]
    out = []
    for k in range(1, n + 1):
        name = names[k % len(names)]
        if k % 5 == 0:
            rec = Record(k, "RENME", 1, fid_of_inode(k), "01:02:03.000000004 2026.11.26", fid_of_inode(2), name,
                         fid_of_inode(k + 1), fid_of_inode(3), "old " + name, k % 7, 6, "job.1")
        else:
            rec = Record(k, ("CREAT", "CLOSE", "SATTR", "UNLNK")[k % 4], k % 2, fid_of_inode(k),
                         "01:02:03.000000004 2026.11.26", *((fid_of_inode(2), name) if k % 4 in (0, 3) else ()))
        out.append(rec.to_line() + "\n")
    return out


def test_blocks_parsed_by_the_child_process_are_the_records_parsed_here(monkeypatch):
    monkeypatch.setattr(consumer, "INLINE_BLOCKS", 1)
    lines = _lines(200)
    blocks = [lines[n:n + 16] for n in range(0, len(lines), 16)]
    with consumer.Parser("test changelog", 0, ahead=3) as parser:
        got = [rec for records in parser.parse(blocks) for rec in records]
        assert parser.child is not None  # the blocks after the first went through the child
    assert got == [parse(line) for line in lines]


def test_a_bad_record_in_a_block_the_child_parses_is_an_error_naming_it(monkeypatch):
    monkeypatch.setattr(consumer, "INLINE_BLOCKS", 0)
    lines = _lines(40)
    lines[33] = "34 01CREAT 13:32:07.3 2023.05.10 0x0 t=[0x1:0x2:0x0] ef=0xf u=0:0 nid=0@lo\n"
    got = []
    with pytest.raises(ChangelogError, match="record 34: a CREAT record needs p="):
        with consumer.Parser("test changelog", 0, ahead=1) as parser:
            for records in parser.parse([lines[n:n + 8] for n in range(0, len(lines), 8)]):
                got.extend(records)
    assert [r.index for r in got] == list(range(1, 33))  # every block before the bad one's
