"""The layout Lustre itself holds for a file: detection and ``LL_IOC_LOV_GETSTRIPE``.

Lustre is detected by ``statfs`` (``f_type`` 0x0BD00BD0, ``LL_SUPER_MAGIC``);
Python's ``os.statvfs`` has no ``f_type``, so libc's ``statfs`` is called
through ctypes (its ``f_type`` is the leading ``long`` of ``struct statfs`` on
Linux; other systems have no Lustre client and answer False).

The layout is read without liblustreapi, as ``lfs getstripe`` does underneath:
the ioctl fills a ``lov_user_md`` in the caller's buffer, whose header first
says which magic and how many stripes the buffer has room for. The structures
(``lustre/include/uapi/linux/lustre/lustre_user.h``) are packed, in host byte
order, which is little-endian on every platform Lustre clients run on::

    lov_user_md_v1 (32 bytes): u32 magic, u32 pattern, 16-byte ost_id,
                               u32 stripe_size, u16 stripe_count, u16 stripe_offset
    lov_user_md_v3 (48 bytes): the v1 header, then a 16-byte pool name
    lov_user_ost_data_v1 (24 bytes each, after the header): 16-byte ost_id,
                               u32 l_ost_gen, u32 l_ost_idx

Composite (PFL, SEL, data-on-MDT) layouts are a list of such components with
extents; iez does not read them yet and says so rather than guess.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
import sys

from iez.layout.model import Layout

LL_SUPER_MAGIC = 0x0BD00BD0
LL_IOC_LOV_GETSTRIPE = 0x4008669B  # _IOW('f', 155, long)
LOV_USER_MAGIC_V1 = 0x0BD10BD0
LOV_USER_MAGIC_V3 = 0x0BD30BD0
LOV_USER_MAGIC_SPECIFIC = 0x0BD50BD0
LOV_USER_MAGIC_COMP_V1 = 0x0BD60BD0
LOV_USER_MAGIC_FOREIGN = 0x0BD70BD0
LOV_MAX_STRIPE_COUNT = 2000

LOV_PATTERN_RAID0 = 0x001
LOV_PATTERN_OVERSTRIPING = 0x200  # several stripes on one OST: still RAID-0 arithmetic
LOV_PATTERN_F_HOLE = 0x40000000
LOV_PATTERN_F_RELEASED = 0x80000000  # HSM released: no data on any OST

V1_HEADER = struct.Struct("<II16sIHH")  # magic, pattern, ost_id, stripe_size, stripe_count, offset/gen
V3_HEADER_SIZE = V1_HEADER.size + 16  # + pool name
OST_DATA = struct.Struct("<16sII")  # ost_id, l_ost_gen, l_ost_idx
BUFFER_SIZE = V3_HEADER_SIZE + LOV_MAX_STRIPE_COUNT * OST_DATA.size

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


def parse_lov_user_md(buf: bytes | bytearray, where: str) -> Layout | None:
    """The layout in a ``lov_user_md`` v1 or v3; None for a file without OST objects.

    :class:`ValueError` naming ``where`` for composite layouts, unknown magics,
    patterns other than RAID-0 and buffers shorter than the header says.
    """
    if len(buf) < V1_HEADER.size:
        raise ValueError(f"{where}: Lustre layout is {len(buf)} bytes, shorter than a lov_user_md header")
    magic, pattern, _oi, stripe_size, stripe_count, _offset = V1_HEADER.unpack_from(buf, 0)
    if magic == LOV_USER_MAGIC_COMP_V1:
        raise ValueError(f"{where}: composite (PFL) layouts are not supported yet")
    if magic == LOV_USER_MAGIC_FOREIGN:
        raise ValueError(f"{where}: foreign Lustre layouts are not supported")
    if magic == LOV_USER_MAGIC_V1:
        header = V1_HEADER.size
    elif magic in (LOV_USER_MAGIC_V3, LOV_USER_MAGIC_SPECIFIC):
        header = V3_HEADER_SIZE
    else:
        raise ValueError(f"{where}: unknown Lustre layout magic 0x{magic:08X}")
    if stripe_count == 0 or pattern & LOV_PATTERN_F_RELEASED:
        return None
    if pattern & ~(LOV_PATTERN_OVERSTRIPING | LOV_PATTERN_F_HOLE) != LOV_PATTERN_RAID0:
        raise ValueError(f"{where}: Lustre layout pattern 0x{pattern:X} is not RAID-0; not supported")
    if stripe_size <= 0:
        raise ValueError(f"{where}: Lustre layout has stripe size {stripe_size}")
    need = header + stripe_count * OST_DATA.size
    if len(buf) < need:
        raise ValueError(f"{where}: Lustre layout says {stripe_count} stripes ({need} bytes) "
                         f"but only {len(buf)} bytes were returned")
    osts = tuple(OST_DATA.unpack_from(buf, header + i * OST_DATA.size)[2] for i in range(stripe_count))
    return Layout(stripe_size, osts)


def get_stripe(path: str) -> Layout | None:
    """The layout Lustre holds for ``path``; None when the file has no OST objects yet."""
    buf = bytearray(BUFFER_SIZE)
    # The kernel reads the magic and the room we have (in stripes) before it writes.
    V1_HEADER.pack_into(buf, 0, LOV_USER_MAGIC_V3, 0, bytes(16), 0, LOV_MAX_STRIPE_COUNT, 0)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, LL_IOC_LOV_GETSTRIPE, buf, True)
    except OSError as err:
        if err.errno == errno.ENODATA:
            return None
        raise OSError(err.errno, f"LL_IOC_LOV_GETSTRIPE: {err.strerror}", os.fsdecode(path)) from None
    finally:
        os.close(fd)
    return parse_lov_user_md(buf, os.fsdecode(path))
