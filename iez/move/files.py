"""What a movement copies, and the copying of one chunk and one file's end.

``plan`` expands ``SRC... DST`` as ``cp -r`` does: into an existing directory each source keeps its
name (a directory recursively), a single source may be given its new name. A destination is written
under a temporary name beside it (:func:`iez.move.temps.temp_name`: it names the writing process, so the
next run of any mover removes it if this one dies), its layout set before the first byte, each chunk read
and written with ``pread``/``pwrite`` on descriptors opened for that chunk (so under emulated bandwidth a
chunk's time is the time its OSTs take to serve it: ``close`` waits for them; the source with
``O_NOATIME``), only the source's data extents written (its holes stay holes), and it is truncated to size,
given every attribute ``cp -a`` keeps (:mod:`iez.move.attributes`: owner, extended attributes and ACLs,
mode with its special bits, atime and mtime), ``fsync``ed and renamed over the final name only when every
chunk arrived: a failed or interrupted copy never leaves a partial file under the final name.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from iez.layout.model import Layout
from iez.move import temps
from iez.move.attributes import Attributes, data_extents, open_source

#: What every copy's temporary name holds (``.NAME.iez-copy.WRITER``; :mod:`iez.move.temps`).
TMP_MARK = ".iez-copy."


@dataclass
class FileJob:
    """One file of a movement and its progress."""

    index: int
    src: str
    dst: str
    size: int
    mode: int
    times: tuple[int, int]  # atime, mtime in ns
    attrs: Attributes | None = None  # the source's, from its stat before the first read
    src_layout: Layout | None = None
    dst_layout: Layout | None = None  # given by the caller, or chosen by placement
    tmp: str = ""
    chunks_left: int = 0
    error: str | None = None
    done: bool = False
    extra: dict = field(default_factory=dict)


def plan(sources: list[str], dest: str, directories: list[tuple[str, str, os.stat_result]] | None = None
         ) -> tuple[list[tuple[str, str]], list[str]]:
    """``(src, dst)`` file pairs for ``SRC... DST`` and the problems found (one line each: a missing source,
    a special file). Directories to create are implied by the pairs; ``directories``, when given, is
    appended ``(src, dst, stat)`` for every directory copied (empty ones included), parents first, each
    ``stat`` taken before the directory was listed (listing it may move its atime)."""
    if not sources:
        raise ValueError("give at least one SRC and a DST")
    into = os.path.isdir(dest)
    if len(sources) > 1 and not into:
        raise ValueError(f"{dest}: not a directory (several sources are copied into a directory)")
    pairs: list[tuple[str, str]] = []
    problems: list[str] = []
    for src in sources:
        target = os.path.join(dest, os.path.basename(os.path.normpath(src))) if into else dest
        try:
            st = os.stat(src)
        except OSError as err:
            problems.append(f"{src}: {err.strerror}")
            continue
        if stat.S_ISDIR(st.st_mode):
            if os.path.abspath(target).startswith(os.path.abspath(src).rstrip("/") + "/"):
                problems.append(f"{src}: cannot copy a directory into itself ({target})")
                continue
            seen: dict[str, os.stat_result | None] = {os.path.normpath(src): st}
            for top, dirs, names in os.walk(src, onerror=lambda err: problems.append(f"{err.filename}: {err.strerror}")):
                dirs.sort()
                rel = os.path.relpath(top, src)
                if directories is not None:
                    directories.append((top, os.path.normpath(os.path.join(target, rel)),
                                        seen.pop(os.path.normpath(top), None) or os.stat(top)))
                    for name in dirs:  # before os.walk lists them
                        try:
                            seen[os.path.normpath(os.path.join(top, name))] = os.stat(os.path.join(top, name))
                        except OSError:
                            pass
                for name in sorted(names):
                    path = os.path.join(top, name)
                    if temps.is_temporary(name):
                        continue  # a mover's temporary file
                    try:
                        regular = stat.S_ISREG(os.stat(path).st_mode)
                    except OSError as err:
                        problems.append(f"{path}: {err.strerror}")
                        continue
                    if not regular:
                        problems.append(f"{path}: not a regular file, not copied")
                        continue
                    pairs.append((path, os.path.normpath(os.path.join(target, rel, name))))
        elif stat.S_ISREG(st.st_mode):
            pairs.append((src, target))
        else:
            problems.append(f"{src}: not a regular file or directory, not copied")
    return pairs, problems


def make_directories(directories: list[tuple[str, str, os.stat_result]]) -> list[str]:
    """Create the destination directories (empty ones included); the problems, one line each."""
    problems = []
    for _, dst, _ in directories:
        try:
            os.makedirs(dst, exist_ok=True)
        except OSError as err:
            problems.append(f"{dst}: {err.strerror}")
    return problems


def keep_directory_attributes(directories: list[tuple[str, str, os.stat_result]]) -> list[str]:
    """Give each destination directory its source's attributes (as a file's: owner, extended attributes and
    ACLs, the default ACL included, mode, and the atime and mtime it had before it was listed), deepest first
    and after every file is in place (a rename in a directory changes its mtime); the problems, one line each."""
    problems = []
    for src, dst, st in sorted(directories, key=lambda d: d[1].count(os.sep), reverse=True):
        try:
            attrs = Attributes.of_stat(st).with_xattrs(src)
            fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                attrs.apply(fd)
            finally:
                os.close(fd)
        except OSError as err:
            problems.append(f"{dst}: {err.strerror or err}")
    return problems


def tmp_name(dst: str) -> str:
    return temps.temp_name(dst, "copy")


def create(job: FileJob, layout: Layout | None, apply_layout) -> None:
    """Create the temporary destination with ``layout`` (``apply_layout(path, layout)`` creates it when given)."""
    os.makedirs(os.path.dirname(job.dst) or ".", exist_ok=True)
    job.tmp = tmp_name(job.dst)
    try:
        os.unlink(job.tmp)  # this process's own, from an attempt it gave up
    except FileNotFoundError:
        pass
    if layout is not None:
        apply_layout(job.tmp, layout)
    else:
        os.close(os.open(job.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    job.dst_layout = layout


def copy_chunk(job: FileJob, offset: int, length: int, buf: bytearray, sparse: bool,
               zeros: bytes, mirror: int | None = None, dense: bool = False) -> tuple[float, float, bool]:
    """Copies one chunk (from copy ``mirror`` of a mirrored source); returns (read seconds, write seconds,
    written). Only the source's data extents in the chunk are written (a hole stays a hole) unless ``dense``
    (every byte); with ``sparse`` a chunk of zeros is not written either. A short read means the source
    shrank, which is an error naming it."""
    t0 = time.monotonic()
    fd = open_source(job.src)
    try:
        if mirror is not None:
            pin_mirror(fd, mirror)
        data = os.pread(fd, length, offset)  # os.pread, not preadv: libiez slows pread (preadv from Python it does not)
        extents = [(offset, len(data))] if dense else data_extents(fd, offset, offset + len(data))
    finally:
        os.close(fd)  # under emulation, returns once the OST served the chunk
    t1 = time.monotonic()
    got = len(data)
    if got != length:
        raise OSError(f"{job.src}: read {got} of {length} bytes at offset {offset} (the file shrank while copied)")
    view = memoryview(data)
    if not extents or (sparse and data == zeros[:length]):
        return t1 - t0, 0.0, False
    fd = os.open(job.tmp, os.O_WRONLY | os.O_CLOEXEC)
    try:
        for start, size in extents:
            done = 0
            while done < size:
                done += os.pwrite(fd, view[start - offset + done:start - offset + size], start + done)
    finally:
        os.close(fd)
    return t1 - t0, time.monotonic() - t1, True


#: ``LL_IOC_FLR_SET_MIRROR`` (``_IOW('f', 177, unsigned int)``): a descriptor's reads and writes go to one copy.
LL_IOC_FLR_SET_MIRROR = 0x400866B1


def pin_mirror(fd: int, mirror: int) -> None:
    """Pin ``fd`` to copy ``mirror`` (0-based; FLR's id is ``mirror + 1``), as ``llapi_mirror_read`` does. On a
    file system that knows no mirrors (ENOTTY, EINVAL: neither Lustre nor libiez's emulation) the file is its
    only copy and nothing is pinned."""
    import errno
    import fcntl

    try:
        fcntl.ioctl(fd, LL_IOC_FLR_SET_MIRROR, mirror + 1)
    except OSError as err:
        if err.errno not in (errno.ENOTTY, errno.EINVAL, errno.EOPNOTSUPP):
            raise


def finish(job: FileJob) -> None:
    """Size and every attribute of the source (:mod:`iez.move.attributes`); fsync; rename over the final name."""
    attrs = job.attrs or Attributes(job.mode, -1, -1, *job.times)
    attrs = attrs.with_xattrs(job.src)
    fd = os.open(job.tmp, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, job.size)
        attrs.apply(fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(job.tmp, job.dst)


def discard(job: FileJob) -> None:
    if job.tmp:
        try:
            os.unlink(job.tmp)
        except OSError:
            pass


def describe(src: str) -> tuple[int, int, tuple[int, int], Attributes]:
    st = os.stat(src)
    return st.st_size, st.st_mode, (st.st_atime_ns, st.st_mtime_ns), Attributes.of_stat(st)


def ensure_parent_dirs(pairs: list[tuple[str, str]]) -> None:
    for parent in sorted({str(Path(d).parent) for _, d in pairs}):
        os.makedirs(parent, exist_ok=True)
