"""Lustre MDT changelog records as ``lfs changelog MDT`` prints them, parsed strictly.

One record a line::

    7 01CREAT 13:32:07.365961187 2023.05.10 0x0 t=[0x200000402:0x1:0x0] j=cp.0 ef=0xf u=0:0 nid=0@lo p=[0x200000007:0x1:0x0] file1
    9 08RENME 13:33:04.120000000 2023.05.10 0x0 t=[0:0x0:0x0] ef=0xf u=0:0 nid=0@lo p=[0x200000007:0x1:0x0] new s=[0x200000402:0x1:0x0] sp=[0x200000007:0x1:0x0] old

the record number, the type (two decimal digits and its name), time, date, flags, then ``KEY=VALUE``
fields (``t=`` target FID; ``j=`` job, ``ef=`` extension flags, ``u=`` uid:gid, ``nid=``, ``m=`` open mode,
``x=`` xattr name: optional, as the MDT's ``changelog_mask``/extension flags decide), and for namespace
records ``p=[PARENT] NAME``, a rename adding `` s=[SOURCE] sp=[SOURCE PARENT] SOURCE_NAME``. Names may hold
spaces (the rename's ``s=[`` separator is searched from the right). A record iez cannot read is an error
naming its number (or line): a record silently dropped would leave the inventory wrong forever.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from iez.errors import InputError

#: Lustre's record types (``enum changelog_rec_type``): number and name as ``lfs changelog`` prints them.
TYPES = {0: "MARK", 1: "CREAT", 2: "MKDIR", 3: "HLINK", 4: "SLINK", 5: "MKNOD", 6: "UNLNK", 7: "RMDIR",
         8: "RENME", 9: "RNMTO", 10: "OPEN", 11: "CLOSE", 12: "LYOUT", 13: "TRUNC", 14: "SATTR", 15: "XATTR",
         16: "HSM", 17: "MTIME", 18: "CTIME", 19: "ATIME", 20: "MIGRT", 21: "FLRW", 22: "RESYNC", 23: "GXATR",
         24: "NOPEN"}
CODES = {name: number for number, name in TYPES.items()}
#: ``UNLNK``/``RENME`` flag: the last link of the target went (``CLF_UNLINK_LAST``/``CLF_RENAME_LAST``).
LAST_LINK = 0x1
ZERO_FID = "0:0x0:0x0"
#: The name of the MARK record the emulated MDT writes when it lost events (see :mod:`iez.inventory.emulated_mdt`).
LOST_EVENTS = "iez-lost-events"

_FID = r"\[(0x[0-9a-fA-F]+|0):(0x[0-9a-fA-F]+):(0x[0-9a-fA-F]+)\]"
_HEAD = re.compile(r"(\d+) (\d\d)([A-Z]+) (\d\d:\d\d:\d\d\.\d+) (\d{4}\.\d\d\.\d\d) (0x[0-9a-fA-F]+) ")
_FID_RE = re.compile(_FID)
_RENAMES = frozenset(("RENME", "MIGRT"))
#: Namespace records: they carry ``p=[PARENT] NAME``.
_NAMED = frozenset(("CREAT", "MKDIR", "HLINK", "SLINK", "MKNOD", "UNLNK", "RMDIR", "RENME", "RNMTO"))


class ChangelogError(InputError):
    """A record that is not a Lustre changelog record; the message names its number or line."""


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs as much as the parse
class Record:
    index: int
    type: str  # CREAT, RENME, ...
    flags: int
    target: str  # FID text without brackets
    time: str = ""
    parent: str | None = None
    name: str | None = None
    source: str | None = None  # renames: the FID moved
    source_parent: str | None = None
    source_name: str | None = None
    uid: int | None = None
    gid: int | None = None
    job: str | None = None

    def to_line(self) -> str:
        """The record as ``lfs changelog`` prints it (``time`` is ``HH:MM:SS.NS YYYY.MM.DD``)."""
        out = [f"{self.index} {CODES[self.type]:02d}{self.type} {self.time} {self.flags:#x} t=[{self.target}]"]
        if self.job:
            out.append(f"j={self.job}")
        out.append("ef=0xf")
        out.append(f"u={self.uid or 0}:{self.gid or 0} nid=0@lo")
        if self.parent is not None:
            out.append(f"p=[{self.parent}]" + (f" {self.name}" if self.name is not None else ""))
        if self.source is not None:
            out.append(f"s=[{self.source}] sp=[{self.source_parent}] {self.source_name}")
        return " ".join(out)


def fid_text(seq: int, oid: int, ver: int = 0) -> str:
    return f"{seq:#x}:{oid:#x}:{ver:#x}"


#: Emulated FIDs: sequences from Lustre's first normal sequence on, the inode number split as a FID is.
EMULATED_SEQ = 0x200000400


def fid_of_inode(ino: int) -> str:
    """The emulated MDT's FID of inode ``ino`` (the low 32 bits as the object id, the rest in the sequence)."""
    return f"{EMULATED_SEQ + (ino >> 32):#x}:{ino & 0xFFFFFFFF:#x}:0x0"


_FAST = re.compile(r"(\d+) (\d\d)([A-Z]+) (\d\d:\d\d:\d\d\.\d+ \d{4}\.\d\d\.\d\d) (0x[0-9a-f]+) "
                   r"t=\[((?:0x[0-9a-f]+|0):0x[0-9a-f]+:0x[0-9a-f]+)\]((?: [a-z]+=[^ \[]*)*)"
                   r"(?: p=\[((?:0x[0-9a-f]+|0):0x[0-9a-f]+:0x[0-9a-f]+)\](?: (.*))?)?")
_SOURCE = re.compile(r"(.*) s=\[((?:0x[0-9a-f]+|0):0x[0-9a-f]+:0x[0-9a-f]+)\] "
                     r"sp=\[((?:0x[0-9a-f]+|0):0x[0-9a-f]+:0x[0-9a-f]+)\] (.+)")


def parse(line: str, where: str = "changelog") -> Record:
    """One ``lfs changelog`` line; :class:`ChangelogError` naming the record (or ``where``) otherwise."""
    line = line.rstrip("\n")
    m = _FAST.fullmatch(line)  # the canonical form lfs prints: one regular expression
    if m is None:
        return _parse_slow(line, where)
    index, code, kind, stamp, flags, target, extra, parent, name = m.groups()
    if TYPES.get(int(code)) != kind:
        return _parse_slow(line, where)
    source = sparent = sname = None
    if name is not None and kind in _RENAMES and " s=[" in name:
        s = _SOURCE.fullmatch(name)
        if s is None:
            return _parse_slow(line, where)
        name, source, sparent, sname = s.groups()
    if kind in _NAMED and not name:
        return _parse_slow(line, where)
    uid = gid = job = None
    if extra:
        for field in extra[1:].split(" "):
            key, _, value = field.partition("=")
            if key == "u":
                u, colon, g = value.partition(":")
                if not (colon and u.isdigit() and g.isdigit()):
                    return _parse_slow(line, where)
                uid, gid = int(u), int(g)
            elif key == "j":
                job = value
    return Record(int(index), kind, int(flags, 16), target, stamp, parent, name, source, sparent, sname, uid, gid, job)


_MANY = re.compile("^" + _FAST.pattern + "$", re.M)


def parse_many(lines: list[str], where: str = "changelog") -> list[Record]:
    """Many lines at once (one regular-expression scan of the block, for ingest rates); a line that is not in
    the canonical form is parsed alone, and a bad one raises as :func:`parse` does."""
    return _block(lines, where, True)


def parse_rows(lines: list[str], where: str = "changelog") -> list[tuple]:
    """:func:`parse_many`, each record as the tuple of its fields in :class:`Record`'s order (``Record(*row)``):
    what a parsing process sends back (a tuple pickles in C; a slotted dataclass through Python per record).
    Each type name is one object (the pickle writes it once)."""
    return _block(lines, where, False)


_KINDS = {name: name for name in TYPES.values()}


def _row(r: Record) -> tuple:
    return (r.index, _KINDS.get(r.type, r.type), r.flags, r.target, r.time, r.parent, r.name, r.source,
            r.source_parent, r.source_name, r.uid, r.gid, r.job)


def _block(lines: list[str], where: str, records: bool) -> list:
    block = "".join(lines)
    found = _MANY.findall(block) if block.count("\n") == len(lines) else ()
    if len(found) != len(lines):
        one = [parse(line, where) for line in lines]
        return one if records else [_row(r) for r in one]
    out: list = []
    append = out.append
    kinds = _KINDS
    extras: dict[str, tuple | None] = {}  # the optional fields repeat (same user, job, nid): read once per text
    fids: dict[str, str] = {}  # one string per FID in a block: pickled once, then as a reference (see below)
    fid = fids.setdefault
    for (index, code, kind, stamp, flags, target, extra, parent, name), line in zip(found, lines):
        if TYPES.get(int(code)) != kind or (kind in _NAMED and not name) or (name and " s=[" in name):
            rec = parse(line, where)
            append(rec if records else _row(rec))
            continue
        uid = gid = job = None
        if extra:
            if extra in extras:
                hit = extras[extra]
            else:
                hit = extras[extra] = _extra(extra) if len(extras) < 10_000 else None
                if hit is None:
                    extras.pop(extra, None)
                    hit = _extra(extra)
            if hit is None:
                one = [parse(line, where) for line in lines]
                return one if records else [_row(r) for r in one]
            uid, gid, job = hit
        if records:
            append(Record(int(index), kind, int(flags, 16), target, stamp, parent or None, name or None, None,
                          None, None, uid, gid, job))
        else:
            # a file's records (CREAT, SATTR, CLOSE...) and a directory's files name the same FIDs: one object
            # each, which the pickle writes once (40 % fewer bytes to send and to read back) and the consumer's
            # sets and dicts then compare by identity
            append((int(index), kinds[kind], int(flags, 16), fid(target, target), stamp,
                    fid(parent, parent) if parent else None, name or None, None, None, None, uid, gid, job))
    return out


def _extra(extra: str) -> tuple | None:
    """``(uid, gid, job)`` of the optional fields (`` ef=0xf u=0:0 nid=...``), None if ``u=`` is not two numbers."""
    uid = gid = job = None
    for field in extra[1:].split(" "):
        key, _, value = field.partition("=")
        if key == "u":
            u, colon, g = value.partition(":")
            if not (colon and u.isdigit() and g.isdigit()):
                return None
            uid, gid = int(u), int(g)
        elif key == "j":
            job = value
    return uid, gid, job


def _parse_slow(line: str, where: str) -> Record:
    """Every other form (upper-case hex, fields in another order), and the error naming a bad record."""
    head = _HEAD.match(line)
    if head is None:
        number = line.split(" ", 1)[0]
        what = f"record {number}" if number.isdigit() else f"{where}: line {line[:80]!r}"
        raise ChangelogError(f"{what}: not a changelog record (expected 'INDEX NNTYPE HH:MM:SS.NS YYYY.MM.DD "
                             f"FLAGS t=[FID] ...')")
    index = int(head.group(1))

    def bad(reason: str) -> ChangelogError:
        return ChangelogError(f"record {index}: {reason}: {line[:160]!r}")

    code, kind = int(head.group(2)), head.group(3)
    if TYPES.get(code) != kind:
        raise bad(f"unknown record type {head.group(2)}{kind}")
    rest = line[head.end():]
    if not rest.startswith("t="):
        raise bad("no target t=[FID]")
    target = _FID_RE.match(rest, 2)
    if target is None:
        raise bad("target t= is not a FID [SEQ:OID:VER]")
    rest = rest[target.end():]
    fields: dict[str, str] = {}
    parent = name = source = sparent = sname = None
    pos = 0
    while pos < len(rest):
        if rest[pos] != " ":
            raise bad(f"unexpected text {rest[pos:pos + 20]!r}")
        pos += 1
        key, eq, _ = rest[pos:pos + 4].partition("=")
        if not eq:
            raise bad(f"field {rest[pos:pos + 20]!r} is not KEY=VALUE")
        if key == "p":
            fid = _FID_RE.match(rest, pos + 2)
            if fid is not None and fid.end() == len(rest) and kind not in _NAMED:
                parent = _fid(fid)  # OPEN records name the parent only
                break
            if fid is None or rest[fid.end():fid.end() + 1] != " ":
                raise bad("p= is not [FID] followed by a name")
            parent = _fid(fid)
            tail = rest[fid.end() + 1:]
            cut = tail.rfind(" s=[")
            if cut >= 0 and " sp=[" in tail[cut:]:
                name, ext = tail[:cut], tail[cut + 1:]
                s = _FID_RE.match(ext, 2)
                sp = _FID_RE.match(ext, s.end() + 4) if s and ext[s.end():s.end() + 4] == " sp=" else None
                if s is None or sp is None or ext[sp.end():sp.end() + 1] != " ":
                    raise bad("rename source is not s=[FID] sp=[FID] NAME")
                source, sparent, sname = _fid(s), _fid(sp), ext[sp.end() + 1:]
            else:
                name = tail
            if not name and kind != "MARK":
                raise bad("p=[FID] without a name")
            break
        end = rest.find(" ", pos)
        end = len(rest) if end < 0 else end
        fields[key] = rest[pos + len(key) + 1:end]
        pos = end
    uid = gid = None
    if "u" in fields:
        u, colon, g = fields["u"].partition(":")
        if not (colon and u.isdigit() and g.isdigit()):
            raise bad(f"u={fields['u']!r} is not UID:GID")
        uid, gid = int(u), int(g)
    if kind in _NAMED and (parent is None or not name):
        raise bad(f"a {kind} record needs p=[PARENT] NAME")
    return Record(index, kind, int(head.group(6), 16), _fid(target), f"{head.group(4)} {head.group(5)}", parent,
                  name, source, sparent, sname, uid, gid, fields.get("j"))


def _fid(match: re.Match) -> str:
    seq, oid, ver = match.groups()
    return f"{int(seq, 16):#x}:{int(oid, 16):#x}:{int(ver, 16):#x}" if seq != "0" else f"0:{int(oid, 16):#x}:{int(ver, 16):#x}"


def record_index(line: str) -> int | None:
    """The record number a line starts with (cheap: for seeking in a log), None if it has none."""
    head, _, _ = line.partition(" ")
    return int(head) if head.isdigit() else None


def serve(requests=None, replies=None) -> None:
    """A parsing process's loop (``python -c "from iez.inventory.changelog import serve; serve()"``): pickled
    ``(lines, where)`` from stdin, ``(True, rows)`` of :func:`parse_rows` or ``(False, error)`` to stdout, until
    stdin ends."""
    import pickle
    import sys

    requests = requests or sys.stdin.buffer
    replies = replies or sys.stdout.buffer
    while True:
        try:
            lines, where = pickle.load(requests)
        except EOFError:
            return
        try:
            reply: tuple = (True, parse_rows(lines, where))
        except ChangelogError as err:
            reply = (False, str(err))
        pickle.dump(reply, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()
