"""The layout Lustre itself holds for a file or a directory: detection, reading, and setting a default.

Lustre is detected by ``statfs`` (``f_type`` 0x0BD00BD0, ``LL_SUPER_MAGIC``);
Python's ``os.statvfs`` has no ``f_type``, so libc's ``statfs`` is called
through ctypes (its ``f_type`` is the leading ``long`` of ``struct statfs`` on
Linux; other systems have no Lustre client and answer False).

**Reading.** The layout is read without liblustreapi, from the ``lustre.lov``
attribute, as ``llapi_layout_get_by_fd`` (``lfs getstripe``) does: the kernel
answers the whole layout (every component, with the OSTs of the instantiated
ones) and checks the buffer's size (``ERANGE``, which ``os.getxattr`` handles).
``LL_IOC_LOV_GETSTRIPE`` was not kept: given a v1/v3 magic it answers only the
last instantiated component of a composite layout (its path for legacy
programs), and given another magic it copies the whole layout without a size
check. On a directory the attribute is its default layout, or the file
system's (the root's) when it has none of its own, as ``lfs getstripe -d``
shows; ``ENODATA`` means neither exists.

The structures (``lustre/include/uapi/linux/lustre/lustre_user.h``) are
packed, in host byte order, which is little-endian on every platform Lustre
clients run on::

    lov_user_md_v1 (32 bytes): u32 magic, u32 pattern, 16-byte ost_id,
                               u32 stripe_size, u16 stripe_count, u16 stripe_offset
    lov_user_md_v3 (48 bytes): the v1 header, then a 16-byte pool name
    lov_user_ost_data_v1 (24 bytes each, after the header): 16-byte ost_id,
                               u32 l_ost_gen, u32 l_ost_idx
    lov_comp_md_v1 (32 bytes): u32 magic, u32 size (all of it), u32 layout_gen,
                               u16 flags, u16 entry_count, u16 mirror_count,
                               u8 ec_count, 13 bytes of padding
    lov_comp_md_entry_v1 (48 bytes each, after it): u32 id, u32 flags,
                               u64 extent start, u64 extent end (~0: end of file),
                               u32 offset and u32 size of the component's
                               lov_user_md (from the start of lov_comp_md_v1),
                               u32 layout_gen, u64 timestamp/id, 4 bytes EC/compression

A composite (PFL) layout becomes :class:`~iez.model.Component` s: an
instantiated component (``LCME_FL_INIT``) with its OSTs, one a file has not
reached yet with none (Lustre chooses them when the file grows there), a
Data-on-MDT one (``LOV_PATTERN_MDT``) with none ever, each with its pool and
overstriping flag. Mirrored (FLR), self-extending (SEL), erasure-coded and
foreign layouts are refused by name rather than guessed. In a default
(template), a stripe size of 0 is the file system's and shown open (``None``:
iez chooses, as Lustre would use its own default), a stripe count of 0 (the
file system's default count, ``lov.stripecount``, 1 unless the administrator
changed it) is shown as 1, and ``0xFFFF`` is -1 (every OST).

**Setting a default** (``iez layout set-default``): with ``lfs`` on ``PATH``,
``lfs setstripe`` (``-d`` to clear) is run, so the site's own tool checks and
applies it; without it the template is packed here and written as the
directory's ``lustre.lov`` attribute, which is how a composite default reaches
a directory (``LL_IOC_LOV_SETSTRIPE`` on a directory takes only plain
v1/v3 layouts). Clearing writes the all-defaults v1 (stripe size 0, count 0,
offset -1), which Lustre reads as "delete the default".
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import struct
import subprocess
import sys
from typing import Sequence

from iez.layout.model import Layout
from iez.lustre_limits import MAX_POOL_NAME, MAX_STRIPE_COUNT
from iez.model import ALL_OSTS, EOF_END, MAX_MIRRORS, Component, check_pool_name

LL_SUPER_MAGIC = 0x0BD00BD0
XATTR_LUSTRE_LOV = "lustre.lov"
LOV_USER_MAGIC_V1 = 0x0BD10BD0
LOV_USER_MAGIC_V3 = 0x0BD30BD0
LOV_USER_MAGIC_SPECIFIC = 0x0BD50BD0
LOV_USER_MAGIC_COMP_V1 = 0x0BD60BD0
LOV_USER_MAGIC_FOREIGN = 0x0BD70BD0
LOV_USER_MAGIC_SEL = 0x0BD80BD0
LOV_MAX_STRIPE_COUNT = MAX_STRIPE_COUNT
LOV_MAXPOOLNAME = MAX_POOL_NAME
LUSTRE_EOF = (1 << 64) - 1
LOV_ALL_STRIPES = 0xFFFF  # stripe count -1: every OST
LOV_ALL_STRIPES_WIDE = 0xFFE0  # 0xFFE0..0xFFFE: overstriping "N stripes per OST"
LOV_OFFSET_DEFAULT = 0xFFFF  # stripe offset -1: Lustre chooses the first OST

LOV_PATTERN_RAID0 = 0x001
LOV_PATTERN_MDT = 0x100  # Data-on-MDT: the component lives on the MDT
LOV_PATTERN_OVERSTRIPING = 0x200  # several stripes on one OST: still RAID-0 arithmetic
LOV_PATTERN_F_MASK = 0xFFFF0000
LOV_PATTERN_F_HOLE = 0x40000000
LOV_PATTERN_F_RELEASED = 0x80000000  # HSM released: no data on any OST

LCME_FL_STALE = 0x00000001  # FLR: the mirror is behind (a write went to another)
LCME_FL_PREF_RD = 0x00000002  # FLR: reads prefer this mirror
MIRROR_ID_MASK = 0x7FFF0000  # lcme_id bits 30..16: the mirror id
LCME_FL_INIT = 0x00000010  # the component is instantiated: its OSTs are chosen
LCME_FL_EXTENSION = 0x00000040  # SEL extension space
LCME_FL_PARITY = 0x00000080  # erasure-coding parity

V1_HEADER = struct.Struct("<II16sIHH")  # magic, pattern, ost_id, stripe_size, stripe_count, offset/gen
POOL_NAME = struct.Struct("<16s")
V3_HEADER_SIZE = V1_HEADER.size + POOL_NAME.size
OST_DATA = struct.Struct("<16sII")  # ost_id, l_ost_gen, l_ost_idx
COMP_HEADER = struct.Struct("<IIIHHHB13s")  # magic, size, layout_gen, flags, entry_count, mirror_count, ec_count
COMP_ENTRY = struct.Struct("<IIQQIIIQ4s")  # id, flags, start, end, offset, size, layout_gen, time/id, EC/compr

_STATFS_SIZE = 256  # larger than struct statfs on every Linux ABI (120 bytes on x86_64)
_libc = None


def _statfs_type(path: str) -> int | None:
    """``f_type`` of the file system holding ``path``; None where this Python cannot ask."""
    global _libc
    if not sys.platform.startswith("linux"):
        return None
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(_STATFS_SIZE)
    if _libc.statfs(os.fsencode(path), buf) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), os.fsdecode(path))
    return ctypes.c_ulong.from_buffer(buf).value & 0xFFFFFFFF


def is_lustre(path: str) -> bool:
    """Whether ``path`` (which must exist) is on a Lustre file system."""
    return _statfs_type(path) == LL_SUPER_MAGIC


# ---- reading -----------------------------------------------------------------------------------------

def _pool(raw: bytes, where: str) -> str | None:
    name = raw.split(b"\0", 1)[0]
    if not name:
        return None
    try:
        return check_pool_name(name.decode("ascii"), where)
    except UnicodeDecodeError:
        raise ValueError(f"{where}: pool name {name!r} is not ASCII") from None


def _template_count(raw: int, where: str) -> int:
    """A stripe count as a template states it: 0xFFFF is -1 (every OST), 0 the file system's default (1)."""
    if raw == LOV_ALL_STRIPES:
        return ALL_OSTS
    if raw >= LOV_ALL_STRIPES_WIDE:
        raise ValueError(f"{where}: stripe count 0x{raw:X} (several stripes per OST, lfs setstripe -C "
                         f"-{LOV_ALL_STRIPES + 1 - raw}) is not supported")
    return raw or 1


class _Lmm:
    """One ``lov_user_md`` v1/v3 read from ``buf`` at ``offset``, no further than ``limit``."""

    def __init__(self, buf: bytes, offset: int, limit: int, where: str):
        if limit - offset < V1_HEADER.size:
            raise ValueError(f"{where}: Lustre layout is {limit - offset} bytes, shorter than a lov_user_md header")
        (self.magic, self.pattern, _oi, self.stripe_size, self.stripe_count,
         _offset) = V1_HEADER.unpack_from(buf, offset)
        if self.magic == LOV_USER_MAGIC_V1:
            self.header, self.pool = V1_HEADER.size, None
        elif self.magic in (LOV_USER_MAGIC_V3, LOV_USER_MAGIC_SPECIFIC):
            self.header = V3_HEADER_SIZE
            if limit - offset < self.header:
                raise ValueError(f"{where}: Lustre layout is {limit - offset} bytes, shorter than a "
                                 "lov_user_md_v3 header")
            self.pool = _pool(POOL_NAME.unpack_from(buf, offset + V1_HEADER.size)[0], where)
        else:
            raise ValueError(f"{where}: unknown Lustre layout magic 0x{self.magic:08X}")
        self.buf, self.offset, self.limit, self.where = buf, offset, limit, where
        base = self.pattern & ~LOV_PATTERN_F_MASK
        self.dom = base == LOV_PATTERN_MDT
        self.overstriping = bool(base & LOV_PATTERN_OVERSTRIPING)
        self.released = bool(self.pattern & LOV_PATTERN_F_RELEASED)
        if not self.dom and base & ~LOV_PATTERN_OVERSTRIPING != LOV_PATTERN_RAID0:
            raise ValueError(f"{where}: Lustre layout pattern 0x{self.pattern:X} is not RAID-0 or "
                             "Data-on-MDT; not supported")

    def osts(self) -> tuple[int, ...]:
        """The OST of each stripe object the structure lists."""
        count, where = self.stripe_count, self.where
        if count > LOV_MAX_STRIPE_COUNT:
            raise ValueError(f"{where}: Lustre layout has {count} stripes, more than {LOV_MAX_STRIPE_COUNT}")
        need = self.header + count * OST_DATA.size
        if self.limit - self.offset < need:
            raise ValueError(f"{where}: Lustre layout says {count} stripes ({need} bytes) "
                             f"but only {self.limit - self.offset} bytes were returned")
        first = self.offset + self.header
        return tuple(OST_DATA.unpack_from(self.buf, first + i * OST_DATA.size)[2] for i in range(count))

    def stripe_size_or_none(self) -> int | None:
        return self.stripe_size or None


def parse_lov_user_md(buf: bytes | bytearray, where: str, directory: bool = False) -> Layout | None:
    """The layout in a ``lov_user_md`` v1/v3 or a composite ``lov_comp_md_v1``.

    A file's plain layout without OST objects (none yet, or HSM released) is
    None. ``directory``: the buffer is a default layout (a template: stripe
    counts and sizes, no OSTs). :class:`ValueError` naming ``where`` for
    unknown magics and patterns, buffers shorter than they say, and the
    layouts iez does not model (mirrors, SEL, erasure coding, foreign).
    """
    buf = bytes(buf)
    if len(buf) < 4:
        raise ValueError(f"{where}: Lustre layout is {len(buf)} bytes, shorter than a lov_user_md header")
    magic = struct.unpack_from("<I", buf, 0)[0]
    if magic == LOV_USER_MAGIC_COMP_V1:
        return _parse_composite(buf, where, directory)
    if magic == LOV_USER_MAGIC_SEL:
        raise ValueError(f"{where}: self-extending (SEL) Lustre layouts are not supported")
    if magic == LOV_USER_MAGIC_FOREIGN:
        raise ValueError(f"{where}: foreign Lustre layouts are not supported")
    lmm = _Lmm(buf, 0, len(buf), where)
    if lmm.dom:
        raise ValueError(f"{where}: a plain Lustre layout with the Data-on-MDT pattern has no extent")
    if directory:
        return Layout.from_components([Component(0, EOF_END, _template_count(lmm.stripe_count, where),
                                                 lmm.stripe_size_or_none(), lmm.pool, (), False,
                                                 lmm.overstriping)], where)
    if lmm.stripe_count == 0 or lmm.released:
        return None
    if lmm.stripe_size <= 0:
        raise ValueError(f"{where}: Lustre layout has stripe size {lmm.stripe_size}")
    return Layout(lmm.stripe_size, lmm.osts(), lmm.pool)


def _parse_composite(buf: bytes, where: str, directory: bool) -> Layout:
    if len(buf) < COMP_HEADER.size:
        raise ValueError(f"{where}: Lustre composite layout is {len(buf)} bytes, shorter than its "
                         f"{COMP_HEADER.size}-byte lov_comp_md_v1 header")
    _magic, size, _gen, _flags, count, mirrors, ec_count, _pad = COMP_HEADER.unpack_from(buf, 0)
    if size > len(buf):
        raise ValueError(f"{where}: Lustre composite layout says {size} bytes but only {len(buf)} were returned")
    if count == 0:
        raise ValueError(f"{where}: Lustre composite layout has no component")
    if mirrors + 1 > MAX_MIRRORS:
        raise ValueError(f"{where}: mirrored (FLR) Lustre layout has {mirrors + 1} mirrors; iez reads up to "
                         f"{MAX_MIRRORS}")
    if ec_count:
        raise ValueError(f"{where}: erasure-coded Lustre layouts are not supported")
    if COMP_HEADER.size + count * COMP_ENTRY.size > size:
        raise ValueError(f"{where}: Lustre composite layout says {count} components but is only {size} bytes")
    components: list[Component] = []
    copies: list[list[Component]] = []  # FLR: entries come mirror by mirror (the mirror id in lcme_id 30..16)
    prefer: int | None = None
    stale: set[int] = set()
    mirror_id = None
    for i in range(count):
        at = f"{where}: component {i}"
        cid, flags, start, end, offset, blob, _g, _t, _x = COMP_ENTRY.unpack_from(
            buf, COMP_HEADER.size + i * COMP_ENTRY.size)
        if mirrors and (i == 0 or cid & MIRROR_ID_MASK != mirror_id):
            mirror_id = cid & MIRROR_ID_MASK
            components = []
            copies.append(components)
        if mirrors and flags & LCME_FL_PREF_RD and prefer is None:
            prefer = len(copies) - 1
        if mirrors and flags & LCME_FL_STALE:
            stale.add(len(copies) - 1)
        if flags & LCME_FL_EXTENSION:
            raise ValueError(f"{at}: self-extending (SEL) Lustre layouts are not supported")
        if flags & LCME_FL_PARITY:
            raise ValueError(f"{at}: erasure-coded Lustre layouts are not supported")
        if offset < COMP_HEADER.size + count * COMP_ENTRY.size or offset + blob > size:
            raise ValueError(f"{at}: its lov_user_md at bytes {offset}..{offset + blob} lies outside the "
                             f"{size}-byte layout")
        if struct.unpack_from("<I", buf, offset)[0] == LOV_USER_MAGIC_FOREIGN:
            raise ValueError(f"{at}: foreign (HSM) Lustre components are not supported")
        lmm = _Lmm(buf, offset, offset + blob, at)
        if start == LUSTRE_EOF or start >= 1 << 63:
            raise ValueError(f"{at}: extent start {start} is not a byte offset")
        stop = EOF_END if end == LUSTRE_EOF else end
        placed = not directory and flags & LCME_FL_INIT and not lmm.released and not lmm.dom
        try:
            if lmm.dom:
                comp = Component(start, stop, 0, lmm.stripe_size_or_none(), None, (), True)
            elif placed:
                if lmm.stripe_size <= 0:
                    raise ValueError(f"stripe size {lmm.stripe_size}")
                comp = Component(start, stop, lmm.stripe_count, lmm.stripe_size, lmm.pool, lmm.osts(),
                                 False, lmm.overstriping)
            else:
                comp = Component(start, stop, _template_count(lmm.stripe_count, at), lmm.stripe_size_or_none(),
                                 lmm.pool, (), False, lmm.overstriping)
        except ValueError as err:
            message = str(err)
            raise ValueError(message if message.startswith(at) else f"{at}: {message}") from None
        components.append(comp)
    if len(copies) > 1:
        return Layout.from_mirrors(copies, prefer, sorted(stale), where)
    return Layout.from_components(components, where)


def get_stripe(path: str) -> Layout | None:
    """The layout Lustre holds for ``path`` (a directory: its default); None when there is none."""
    try:
        raw = os.getxattr(path, XATTR_LUSTRE_LOV)
        directory = os.path.isdir(path)
    except OSError as err:
        if err.errno == errno.ENODATA:
            return None
        raise OSError(err.errno, f"reading its Lustre layout ({XATTR_LUSTRE_LOV}): {err.strerror}",
                      os.fsdecode(path)) from None
    return parse_lov_user_md(raw, os.fsdecode(path), directory)


# ---- setting a directory's default -------------------------------------------------------------------

def _count_field(c: Component) -> int:
    return LOV_ALL_STRIPES if c.stripe_count == ALL_OSTS else c.stripe_count


def _pack_lmm(c: Component) -> bytes:
    """A ``lov_user_md_v3`` for one template component: stripe offset -1 (Lustre chooses the OSTs)."""
    if c.dom:
        pattern, count, size = LOV_PATTERN_MDT, 0, c.stripe_size or c.end
    else:
        pattern = LOV_PATTERN_RAID0 | (LOV_PATTERN_OVERSTRIPING if c.overstriping else 0)
        count, size = _count_field(c), c.stripe_size or 0
    return (V1_HEADER.pack(LOV_USER_MAGIC_V3, pattern, bytes(16), size, count, LOV_OFFSET_DEFAULT)
            + POOL_NAME.pack((c.pool or "").encode("ascii")))


def pack_template(components: Sequence[Component]) -> bytes:
    """The bytes Lustre takes as a directory's default: a ``lov_user_md_v3`` for one component over the
    whole file, else a ``lov_comp_md_v1`` with one ``lov_user_md_v3`` per component."""
    comps = list(components)
    if len(comps) == 1 and comps[0].start == 0 and comps[0].end == EOF_END and not comps[0].dom:
        return _pack_lmm(comps[0])
    blobs = [_pack_lmm(c) for c in comps]
    offset = COMP_HEADER.size + len(comps) * COMP_ENTRY.size
    size = offset + sum(len(b) for b in blobs)
    out = bytearray(COMP_HEADER.pack(LOV_USER_MAGIC_COMP_V1, size, 0, 0, len(comps), 0, 0, bytes(13)))
    for c, blob in zip(comps, blobs):
        end = LUSTRE_EOF if c.end == EOF_END else c.end
        out += COMP_ENTRY.pack(0, 0, c.start, end, offset, len(blob), 0, 0, bytes(4))
        offset += len(blob)
    for blob in blobs:
        out += blob
    return bytes(out)


#: The all-defaults v1 (stripe size 0, count 0, offset -1, no pool): Lustre deletes a directory's default.
CLEAR_DEFAULT = V1_HEADER.pack(LOV_USER_MAGIC_V1, 0, bytes(16), 0, 0, LOV_OFFSET_DEFAULT)


def lfs_setstripe_args(components: Sequence[Component]) -> list[str]:
    """``lfs setstripe``-style options (also ``lfs migrate``'s and ``lfs mirror extend``'s) for a template or a
    placed layout's components: ``-E END`` per component of a composite layout, ``-L mdt`` for Data-on-MDT,
    ``-c``/``-C`` (overstriping) COUNT, ``-S`` SIZE, ``-o`` OSTS where a component is placed, ``-p POOL``.

    ``lfs`` carries a component's stripe count, size and pool over to the
    next one, so each is spelt out: the count always, the pool as ``-p ""``
    (none) after a pooled component. A stripe size left open after one that
    is set cannot be spelt (``-S 0`` is refused in a composite layout) and is
    a :class:`ValueError`.
    """
    comps = list(components)
    composite = not (len(comps) == 1 and comps[0].start == 0 and comps[0].end == EOF_END and not comps[0].dom)
    args: list[str] = []
    pooled, sized = False, None
    for n, c in enumerate(comps):
        if composite:
            args += ["-E", "-1" if c.end == EOF_END else str(c.end)]
        if c.dom:
            args += ["-L", "mdt"]
            continue
        args += ["-C" if c.overstriping else "-c", str(c.stripe_count)]
        if c.stripe_size:
            args += ["-S", str(c.stripe_size)]
            sized = c.stripe_size
        elif sized:
            raise ValueError(f"component {n} leaves its stripe size open after one of {sized} bytes, which "
                             "lfs setstripe would carry over: give it a stripe_size")
        if c.osts:
            args += ["-o", ",".join(map(str, c.osts))]
        if c.pool:
            args += ["-p", c.pool]
            pooled = True
        elif pooled:
            args += ["-p", ""]  # no pool here, though the component before had one
    return args


def set_default(directory: str, components: Sequence[Component] | None) -> str:
    """Set (or with None clear) a Lustre directory's default layout; returns how (``lfs`` or the attribute)."""
    lfs = shutil.which("lfs")
    if lfs:
        argv = [lfs, "setstripe"] + (["-d"] if components is None else lfs_setstripe_args(components))
        done = subprocess.run(argv + [directory], capture_output=True, text=True)
        if done.returncode != 0:
            reason = (done.stderr or done.stdout).strip().splitlines()
            raise OSError(f"{' '.join(argv[1:])} {directory} failed (exit {done.returncode})"
                          + (f": {reason[-1]}" if reason else ""))
        return "lfs setstripe"
    raw = CLEAR_DEFAULT if components is None else pack_template(components)
    try:
        os.setxattr(directory, XATTR_LUSTRE_LOV, raw)
    except OSError as err:
        raise OSError(err.errno, f"setting its default layout ({XATTR_LUSTRE_LOV}): {err.strerror}",
                      directory) from None
    return XATTR_LUSTRE_LOV
