"""What a moved file keeps, as ``cp -a`` / ``rsync -aHAX`` keep it, and reading it without leaving a trace.

Every mover that writes a file anew (``iez copy``, ``iez stage``, ``iez rebalance apply`` in emulation) gives
the copy, before it is renamed over the final name, the source's

- owner and group (when the caller may; if not, the setuid and setgid bits are dropped, as ``cp -a`` does);
- every extended attribute the caller may write: ``user.``, ``trusted.`` and ``security.`` (as root;
  ``security.capability`` included) and the POSIX ACLs (``system.posix_acl_access``/``_default``); the
  layout's own attributes (:data:`NOT_COPIED`: the copy has the layout it was given) are not copied;
- mode, setuid/setgid/sticky bits included;
- atime and mtime, to the nanosecond, as they were before the mover read the file;
- holes: only the source's data extents (``SEEK_DATA``/``SEEK_HOLE``) are written, so a sparse region stays
  one (:func:`data_extents`).

The order is the kernel's: a ``chown`` clears the setuid/setgid bits and ``security.capability``, and so does
any write, so the data comes first, then the owner, the attributes (``security.capability`` last), the mode
and the times. Sources are opened with ``O_NOATIME`` where the caller may (it owns them, or is root), so a
mover, killed or not, leaves their atime as it was; the times given to the copy are those of the ``stat``
taken before the first read.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

#: Attributes that describe a file's layout (the copy's is the one it was given): libiez's emulated layout
#: and Lustre's own. Every other name is copied.
NOT_COPIED_PREFIXES = ("lustre.",)
NOT_COPIED = frozenset({"trusted.lov", "trusted.lma", "trusted.link", "trusted.fid", "trusted.som", "trusted.hsm",
                        "trusted.lmv", "trusted.dmv", "trusted.pfid", "trusted.version"})
#: A refusal that means "this caller may not keep that" (cp -a passes these by too), not a failure.
_NOT_PERMITTED = {errno.EPERM, errno.EACCES, errno.ENOTSUP, errno.EOPNOTSUPP}
_SUID_SGID = stat.S_ISUID | stat.S_ISGID
ACLS = frozenset({"system.posix_acl_access", "system.posix_acl_default"})


def layout_attribute() -> str:
    from iez.layout import emulated

    return emulated.xattr_name()


def copied(name: str, layout_attr: str | None = None) -> bool:
    """Whether the attribute ``name`` is given to a copy."""
    return name != (layout_attr or layout_attribute()) and name not in NOT_COPIED \
        and not name.startswith(NOT_COPIED_PREFIXES)


def open_source(path: str, flags: int = os.O_RDONLY) -> int:
    """``path`` opened for reading with ``O_NOATIME`` (plain when the caller may not: ``EPERM``)."""
    noatime = getattr(os, "O_NOATIME", 0)
    if noatime:
        try:
            return os.open(path, flags | os.O_CLOEXEC | noatime)
        except PermissionError:
            pass
    return os.open(path, flags | os.O_CLOEXEC)


def data_extents(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of the data between ``start`` and ``end`` of the open file ``fd``, holes left out;
    the whole range where the file system cannot tell (no ``SEEK_DATA``)."""
    out: list[tuple[int, int]] = []
    offset = start
    while offset < end:
        try:
            data = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as err:
            if err.errno == errno.ENXIO:  # only a hole past offset
                break
            return [(start, end - start)] if not out else out + [(offset, end - offset)]
        if data >= end:
            break
        hole = os.lseek(fd, data, os.SEEK_HOLE)
        out.append((data, min(hole, end) - data))
        offset = hole
    return out


@dataclass
class Attributes:
    """A source's attributes: from its ``stat`` before the first read, and its extended attributes."""

    mode: int
    uid: int
    gid: int
    atime_ns: int
    mtime_ns: int
    xattrs: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def of_stat(cls, st: os.stat_result) -> "Attributes":
        return cls(st.st_mode, st.st_uid, st.st_gid, st.st_atime_ns, st.st_mtime_ns)

    def with_xattrs(self, source: str | int, layout_attr: str | None = None) -> "Attributes":
        """These attributes and the extended attributes of ``source`` (a path or a descriptor) a copy gets."""
        layout_attr = layout_attr or layout_attribute()
        try:
            names = os.listxattr(source)  # a path is followed, as its data is
        except OSError as err:
            if err.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
                names = []
            else:
                raise
        found = []
        for name in names:
            if not copied(name, layout_attr):
                continue
            try:
                found.append((name, os.getxattr(source, name)))
            except OSError as err:
                if err.errno == errno.ENODATA:
                    continue  # removed meanwhile
                raise
        return Attributes(self.mode, self.uid, self.gid, self.atime_ns, self.mtime_ns, tuple(found))

    def apply(self, fd: int) -> list[str]:
        """Give the open file ``fd`` (a complete copy, not written again after this) these attributes; the
        names of those the caller may not set (``owner``, an attribute's name). Any other failure raises."""
        not_kept: list[str] = []
        mode = stat.S_IMODE(self.mode)
        st = os.fstat(fd)
        if self.uid >= 0 and (st.st_uid, st.st_gid) != (self.uid, self.gid):
            try:
                os.fchown(fd, self.uid, self.gid)
            except PermissionError:
                not_kept.append("owner")
                mode &= ~_SUID_SGID  # as cp -a: no setuid/setgid bits for another owner or group
                try:
                    os.fchown(fd, -1, self.gid)  # a group of the caller's
                except PermissionError:
                    pass
        # an ACL the copy inherited from its directory's default ACL and the source has not
        ours = {name for name, _ in self.xattrs}
        for name in ACLS - ours:
            try:
                os.removexattr(fd, name)
            except OSError as err:
                if err.errno not in _NOT_PERMITTED | {errno.ENODATA}:
                    raise
        # security.capability last: nothing after it (no chown, no write) clears it
        for name, value in sorted(self.xattrs, key=lambda kv: kv[0] == "security.capability"):
            try:
                os.setxattr(fd, name, value)
            except OSError as err:
                if err.errno in _NOT_PERMITTED:
                    not_kept.append(name)
                    continue
                raise OSError(err.errno, f"cannot set attribute {name} on the copy: {err.strerror}") from None
        os.fchmod(fd, mode)  # after the ACL: the ACL's mask follows the group bits, as on the source
        os.utime(fd, ns=(self.atime_ns, self.mtime_ns))
        return not_kept
