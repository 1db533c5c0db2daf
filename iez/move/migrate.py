"""Rewrite one file with a new layout under its own name: the rebalancer's one-file primitive.

In emulation (no Lustre): the file is copied to a temporary beside it
(``.NAME.iez-rebalance.WRITER``: :func:`iez.move.temps.temp_name`, so the next
run of any mover removes it if this process dies), which carries the new layout
(its attribute) before the first byte, so the placement library's emulated
bandwidth charges the new OSTs; only the original's data extents are written
(its holes stay holes), it is read with ``O_NOATIME`` (its atime stays, even if
the move is killed), and the copy gets every attribute ``cp -a`` keeps
(:mod:`iez.move.attributes`: owner, extended attributes and ACLs,
``security.capability``, mode with its setuid/setgid/sticky bits, atime and
mtime, in that order) and is ``fsync``ed; then, if the original is still the
version the plan saw and
did not change during the copy (inode, size, modification and change times)
and no process has it open for writing (``/proc/*/fd``), the copy is renamed
over it atomically and the directory ``fsync``ed. Otherwise the copy is
removed and the file is *skipped* (:class:`Skipped` says why): nothing is ever
lost, at worst a file stays where it was. A reader holding the old file keeps
reading the old inode, as after any rename. The inode number changes.

Any layout moves. The copy carries the whole new layout (its attribute): a
composite (PFL) one with its Data-on-MDT and uninstantiated components as they
were, an overstriped one with its repeated OSTs. A mirrored (FLR) file is read
from an in-sync copy (never from a stale one) and its data written once per
mirror whose OSTs change, through a descriptor pinned to that mirror (so the
emulated bandwidth charges the new OSTs of each copy); such a mirror comes out
in sync (the move is its resync), and a stale mirror that does not move stays
stale, for ``iez mirror resync``.

On Lustre (:func:`migrate_lustre`) the step is ``lfs migrate --non-block -c
COUNT -S STRIPE_SIZE -o OSTS [-p POOL] FILE`` (a composite layout: ``-E END``
then the component's options, ``-L mdt`` for Data-on-MDT, no ``-o`` for an
uninstantiated component, ``-C`` for overstriping): Lustre copies into a volatile
file with the new layout and swaps the layouts under a lease, keeping the
inode, and in non-blocking mode gives up if any client opens the file during
the copy; a refusal leaves the file as it was and is a skip. The same checks
as above run first (the version the plan saw, local writers), and a file that
already has the target layout (a migration whose end the journal did not
see) is not moved again. A mirrored file keeps its inode another way: for each
mirror whose OSTs change, ``lfs mirror extend -N <that mirror's options> FILE``
adds the new copy (Lustre fills it from an in-sync mirror), then ``lfs mirror
split -d --mirror-id ID FILE`` destroys the old one; each step is skipped when
its effect is already there (a rerun after a kill).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from typing import Callable

from iez.errors import IezError
from iez.layout import emulated, lustre
from iez.layout.model import Layout
from iez.move import temps
from iez.move.attributes import Attributes, data_extents, open_source
from iez.move.files import pin_mirror

#: What the temporaries' names held before (``.NAME.iez-rebalance.tmp``); now ``.NAME.iez-rebalance.WRITER``.
TMP_SUFFIX = ".iez-rebalance.tmp"
#: Bytes per read and write when the layout gives no stripe size.
COPY_CHUNK = 4 << 20


class Skipped(IezError):
    """The file was left as it was; the message says why (open for writing, changed, gone)."""


@dataclass(frozen=True)
class Identity:
    """A version of a file: a write or a replacement changes at least one of these."""

    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> "Identity":
        return cls(st.st_ino, st.st_size, st.st_mtime_ns)


def tmp_path(path: str) -> str:
    """The temporary this process copies ``path`` to."""
    return temps.temp_name(path, "rebalance")


def writers(path: str) -> list[int]:
    """The processes (that this user can see) holding ``path`` open for writing."""
    try:
        target = os.stat(path)
    except FileNotFoundError:
        return []
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"{fd_dir}/{fd}")
                if (st.st_dev, st.st_ino) != (target.st_dev, target.st_ino):
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                    flags = next((int(line.split()[1], 8) for line in info if line.startswith("flags:")), 0)
            except (OSError, ValueError):
                continue
            if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
                found.append(int(pid))
                break
    return found


def _check(path: str, expect: Identity | None, when: str) -> os.stat_result:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise Skipped(f"{path}: gone {when}") from None
    if not stat.S_ISREG(st.st_mode):
        raise Skipped(f"{path}: no longer a regular file {when}")
    if expect is not None and Identity.of(st) != expect:
        raise Skipped(f"{path}: changed {when}")
    pids = writers(path)
    if pids:
        raise Skipped(f"{path}: open for writing (pid {', '.join(map(str, pids))}) {when}")
    return st


def lfs_migrate_argv(path: str, layout: Layout, lfs: str = "lfs") -> list[str]:
    """The ``lfs migrate`` command that gives ``path`` the (plain or composite) ``layout``, refusing if the file
    is in use."""
    if layout.components:
        return [lfs, "migrate", "--non-block", *lustre.lfs_setstripe_args(layout.components), path]
    argv = [lfs, "migrate", "--non-block", "-c", str(layout.stripe_count), "-S", str(layout.stripe_size),
            "-o", ",".join(map(str, layout.osts))]
    if layout.pool:
        argv += ["-p", layout.pool]
    return argv + [path]


def _osts_of(components) -> list[tuple[int, ...]]:
    return [tuple(c.osts) for c in components]


def _same(now: Layout | None, layout: Layout) -> bool:
    """Whether the layout Lustre holds is ``layout`` as far as a move is concerned (extents, sizes, OSTs)."""
    if now is None:
        return False
    if not layout.components and not now.components:
        return tuple(now.osts) == tuple(layout.osts) and now.stripe_size == layout.stripe_size
    key = lambda comps: [(c.start, c.end, c.stripe_size, tuple(c.osts), c.dom) for c in comps]  # noqa: E731
    return [key(m) for m in now.copies()] == [key(m) for m in layout.copies()]


def _has_layout(path: str, layout: Layout) -> bool:
    try:
        now = lustre.get_stripe(path)
    except (OSError, ValueError):
        return False
    return _same(now, layout)


def mirror_ids(path: str) -> list[int]:
    """Lustre's mirror ID of each mirror of ``path``, in layout order (its ``lustre.lov`` attribute)."""
    return mirror_ids_of(os.getxattr(path, lustre.XATTR_LUSTRE_LOV))


def mirror_ids_of(raw: bytes) -> list[int]:
    """The mirror IDs a ``lov_comp_md_v1`` lists, in order (bits 16..30 of each component's ``lcme_id``)."""
    import struct

    if len(raw) < lustre.COMP_HEADER.size or struct.unpack_from("<I", raw, 0)[0] != lustre.LOV_USER_MAGIC_COMP_V1:
        return []
    count = lustre.COMP_HEADER.unpack_from(raw, 0)[4]
    ids: list[int] = []
    for i in range(count):
        cid = lustre.COMP_ENTRY.unpack_from(raw, lustre.COMP_HEADER.size + i * lustre.COMP_ENTRY.size)[0]
        mid = (cid & lustre.MIRROR_ID_MASK) >> 16
        if not ids or ids[-1] != mid:
            ids.append(mid)
    return ids


def _run_lfs(path: str, argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise Skipped(f"{path}: lfs {' '.join(argv[1:3])} left it where it was (exit {done.returncode}"
                      f"{': ' + said[-1][-300:] if said else ''})")


def _migrate_mirrors(path: str, layout: Layout, lfs: str) -> None:
    """Every copy ``layout`` lists that the file lacks is added (``lfs mirror extend``), then every copy it has
    that ``layout`` does not list is destroyed (``lfs mirror split -d``). Lustre appends a new copy and keeps
    mirror IDs, so a rerun after a kill finds the added copies there and only splits what is left."""
    now = lustre.get_stripe(path)
    if now is None or not now.mirrors:
        raise Skipped(f"{path}: no longer a mirrored file")
    ids = mirror_ids(path)
    have = [_osts_of(m) for m in now.copies()]
    if len(ids) != len(have):
        raise Skipped(f"{path}: its Lustre layout lists {len(have)} mirrors but {len(ids)} mirror IDs")
    targets = [_osts_of(m) for m in layout.copies()]
    missing = [k for k, t in enumerate(targets) if t not in have]
    surplus = [k for k, h in enumerate(have) if h not in targets]
    if len(have) - len(surplus) + len(missing) != len(targets):
        raise Skipped(f"{path}: its mirrors changed since the plan ({len(have)} now)")
    for k in missing:
        _run_lfs(path, [lfs, "mirror", "extend", "-N", *lustre.lfs_setstripe_args(layout.copies()[k]), path])
    for k in surplus:
        _run_lfs(path, [lfs, "mirror", "split", "-d", "--mirror-id", str(ids[k]), path])


def migrate_lustre(path: str, layout: Layout, expect: Identity | None = None, lfs: str | None = None) -> int:
    """``path`` migrated by Lustre to ``layout`` (see the module text); its inode number, which stays."""
    before = _check(path, expect, "since the plan")
    if _has_layout(path, layout):
        return before.st_ino
    lfs = lfs or shutil.which("lfs")
    if lfs is None:
        raise OSError(f"{path} is on Lustre but there is no lfs command on PATH to migrate it")
    if layout.mirrors:
        _migrate_mirrors(path, layout, lfs)
        return os.lstat(path).st_ino
    _run_lfs(path, lfs_migrate_argv(path, layout, lfs))
    return os.lstat(path).st_ino


def _mirror_passes(path: str, layout: Layout) -> tuple[Layout, list[int | None], int | None]:
    """For a mirrored target: the layout to write (a mirror that moves is written, so not stale), the mirrors
    whose OSTs change (each written once, pinned) and the in-sync copy of the file now to read from; for any
    other layout ``(layout, [None], None)``: one unpinned pass."""
    if not layout.mirrors:
        return layout, [None], None
    from iez.move.chunks import in_sync_copies

    try:
        now = emulated.read_xattr(path)
    except (OSError, ValueError):
        now = None
    if now is not None and len(now.mirrors) == len(layout.mirrors):
        changed: list[int | None] = [k for k in range(len(layout.mirrors))
                                     if _osts_of(now.mirrors[k]) != _osts_of(layout.mirrors[k])]
    else:
        changed = list(range(len(layout.mirrors)))
    source = next(iter(in_sync_copies(now)), None) if now is not None else None
    stale = [k for k in layout.stale if k not in changed]
    if len(stale) == len(layout.mirrors):
        stale = []
    written = Layout.from_mirrors(layout.mirrors, layout.preferred_mirror, stale)
    return written, changed or [0], source


def migrate(path: str, layout: Layout, expect: Identity | None = None,
            copied: Callable[[int], None] | None = None, on_lustre: bool | None = None) -> int:
    """Give ``path`` the ``layout`` (plain, composite or mirrored: see the module text); the new inode number.

    ``expect`` is the version the plan saw (None: whatever is there now);
    ``copied(inode)`` is called once the copy is durable and before the rename
    (the journal's step; not on Lustre, where the swap is Lustre's). ``on_lustre``:
    None to look (``statfs``). :class:`Skipped` when the file is left as it was.
    """
    if on_lustre is None:
        try:
            on_lustre = lustre.is_lustre(path)
        except OSError:
            on_lustre = False  # gone: _check says so
    if on_lustre:
        return migrate_lustre(path, layout, expect)
    attr = emulated.xattr_name()
    before = _check(path, expect, "since the plan")
    layout, passes, source = _mirror_passes(path, layout)
    tmp = tmp_path(path)
    try:
        os.unlink(tmp)  # this process's own, from an attempt that failed
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.setxattr(fd, attr, emulated.format_attr(layout).encode("ascii"))
    finally:
        os.close(fd)
    try:
        # opened again so the placement library (emulated bandwidth) sees the new layout on this descriptor
        src = open_source(path)
        try:
            attrs = Attributes.of_stat(before).with_xattrs(src, attr)
            if source is not None:
                pin_mirror(src, source)  # an in-sync copy: a stale one is never read
            dst = os.open(tmp, os.O_WRONLY | os.O_CLOEXEC)
            try:
                chunk = layout.stripe_size or COPY_CHUNK
                extents = data_extents(src, 0, before.st_size)
                for mirror in passes:
                    if mirror is not None:
                        os.close(dst)
                        dst = os.open(tmp, os.O_WRONLY | os.O_CLOEXEC)
                        pin_mirror(dst, mirror)  # this copy's new OSTs take the bytes
                    for start, length in extents:
                        for offset in range(start, start + length, chunk):
                            data = os.pread(src, min(chunk, start + length - offset), offset)
                            if not data:
                                break  # shrank: the check below sees it
                            view, at = memoryview(data), offset
                            while view:
                                wrote = os.pwrite(dst, view, at)
                                view, at = view[wrote:], at + wrote
                os.ftruncate(dst, before.st_size)
                attrs.apply(dst)  # after the last write: a write clears setuid/setgid and security.capability
                os.fsync(dst)
            finally:
                os.close(dst)
        finally:
            os.close(src)
        new_ino = os.lstat(tmp).st_ino
        if copied is not None:
            copied(new_ino)
        after = _check(path, Identity.of(before), "during the move")
        if after.st_ctime_ns != before.st_ctime_ns:
            raise Skipped(f"{path}: changed during the move")
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return new_ino
