"""The emulated MDT's changelog: what happens in an emulated cluster's data directories, as Lustre records.

Lustre's MDT logs every namespace and attribute change; an emulated cluster has no MDT, so the emulator
(``iez cluster emulate``) runs :class:`ChangelogWriter`, which watches the data directories with Linux
inotify (through ctypes: no extra package) and appends the records Lustre would write, in the text
``lfs changelog`` prints (:mod:`iez.inventory.changelog`), to ``ROOT/mds/changelog/FS-MDT0000``. FIDs
are derived from inode numbers (:func:`~iez.inventory.changelog.fid_of_inode`), as the seeding scan
derives them, so the same consumer keeps the same inventory in emulation and on Lustre.

Events and records: a file created → ``CREAT`` (a second name of a known inode → ``HLINK``), a
directory → ``MKDIR`` (and a watch; what was created in it before the watch was in place gets its records
from a look at it then), unlinked → ``UNLNK`` (flag 0x1: last link) / ``RMDIR``, renamed within the trees
→ ``RENME`` with ``s=``/``sp=`` (the overwritten name's FID as ``t=``), closed after writing → ``CLOSE``,
written without a close yet → ``MTIME`` (once per file and poll), attributes or extended attributes
(a layout set by libiez) → ``SATTR``. Moved out of the trees → ``UNLNK``/``RMDIR``; moved in → ``CREAT``/``MKDIR``.

What the emulation cannot see, and says so with a ``MARK`` record named ``iez-lost-events`` (the consumer
rescans on it, the high-water rule of :mod:`iez.inventory.consumer`): events dropped when inotify's queue
overflows (``IN_Q_OVERFLOW``, ``fs.inotify.max_queued_events``), and everything that happened while no
writer ran (written when a writer starts on a log that already has records). It also cannot see layout
changes recorded only in the sidecar log (``$IEZ_STATE_DIR/layouts.log``, used where user xattrs are
refused), nor directories beyond ``fs.inotify.max_user_watches``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import stat as statmod
import struct
import time
from pathlib import Path

from iez.inventory.changelog import LAST_LINK, LOST_EVENTS, ZERO_FID, Record, fid_of_inode
from iez.inventory.readers import last_index, read_users

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x4000, 0x8000, 0x40000000
IN_ONLYDIR, IN_DONT_FOLLOW, IN_NONBLOCK, IN_CLOEXEC = 0x01000000, 0x02000000, 0o4000, 0o2000000
MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
        | IN_ONLYDIR | IN_DONT_FOLLOW)
_EVENT = struct.Struct("iIII")
#: Where the log lives under the cluster root, and the user the emulation's consumer registers as.
CHANGELOG_DIR = "changelog"
EMULATED_USER = "cl1"
#: The log is rewritten without the records every user has cleared once it is this large.
COMPACT_BYTES = 64 << 20


def changelog_path(root: str | Path, fsname: str) -> Path:
    return Path(root) / "mds" / CHANGELOG_DIR / f"{fsname}-MDT0000"


class Inotify:
    """The few inotify calls the writer needs, through libc."""

    def __init__(self):
        self.libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")

    def add(self, path: str, mask: int = MASK) -> int:
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_add_watch {path}: {os.strerror(err)}")
        return wd

    def read(self) -> list[tuple[int, int, int, str]]:
        """Every event queued now: ``(wd, mask, cookie, name)``."""
        out: list[tuple[int, int, int, str]] = []
        while True:
            try:
                data = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                return out
            except OSError as err:
                if err.errno == errno.EINTR:
                    continue
                raise
            pos = 0
            while pos < len(data):
                wd, mask, cookie, size = _EVENT.unpack_from(data, pos)
                name = data[pos + _EVENT.size:pos + _EVENT.size + size].rstrip(b"\0")
                out.append((wd, mask, cookie, os.fsdecode(name)))
                pos += _EVENT.size + size

    def close(self) -> None:
        os.close(self.fd)


class ChangelogWriter:
    """Watches ``data`` directories and appends Lustre changelog records to ``log`` (see the module text)."""

    def __init__(self, data: list[str], log: str | Path):
        self.log = Path(log)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.index = last_index(self.log) or 0
        restarted = self.index > 0
        self.inotify = Inotify()
        self.wd_dir: dict[int, str] = {}  # watch -> directory FID
        self.dir_wd: dict[str, int] = {}
        self.entries: dict[str, dict[str, tuple[str, bool]]] = {}  # dir FID -> name -> (FID, is dir)
        self.dirs: dict[str, tuple[str | None, str]] = {}  # dir FID -> (parent FID, path)
        self.links: dict[str, int] = {}  # file FID -> names known
        self.out = open(self.log, "a", encoding="utf-8", errors="surrogateescape")
        self.lost = False
        for d in data:
            if os.path.isdir(d):
                st = os.stat(d)
                fid = fid_of_inode(st.st_ino)
                self.dirs[fid] = (None, os.path.abspath(d))
                self._watch(fid, emit=False)
        if restarted:
            self._mark(LOST_EVENTS)  # what happened while no writer ran was not seen
            self.out.flush()

    # -- records ------------------------------------------------------------------------------------------------
    def _emit(self, kind: str, target: str, parent: str | None = None, name: str | None = None, flags: int = 0,
              source: tuple[str, str, str] | None = None, st: os.stat_result | None = None) -> None:
        self.index += 1
        now = time.time_ns()
        stamp = time.strftime("%H:%M:%S", time.gmtime(now // 10**9)) + f".{now % 10**9:09d} " + \
            time.strftime("%Y.%m.%d", time.gmtime(now // 10**9))
        s, sp, sname = source or (None, None, None)
        rec = Record(self.index, kind, flags, target, stamp, parent, name, s, sp, sname,
                     st.st_uid if st else os.getuid(), st.st_gid if st else os.getgid())
        self.out.write(rec.to_line() + "\n")

    def _mark(self, name: str) -> None:
        self._emit("MARK", ZERO_FID, ZERO_FID, name)

    # -- the tree we know ---------------------------------------------------------------------------------------
    def _path(self, dfid: str) -> str | None:
        entry = self.dirs.get(dfid)
        return entry[1] if entry else None

    def _watch(self, dfid: str, emit: bool) -> None:
        """Watch a directory and learn what is in it (``emit``: as records, it was created just now)."""
        path = self._path(dfid)
        if path is None:
            return  # not a directory we know (any more)
        try:
            wd = self.inotify.add(path)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENOTDIR):
                return
            if err.errno == errno.ENOSPC:  # past max_user_watches: changes below it cannot be seen
                self._mark(LOST_EVENTS)
                return
            raise
        self.wd_dir[wd] = dfid
        self.dir_wd[dfid] = wd
        names = self.entries.setdefault(dfid, {})
        try:
            with os.scandir(path) as it:
                found = list(it)
        except OSError:
            return
        for e in found:
            if e.name in names:
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            self._learn(dfid, e.name, st, emit)

    def _learn(self, dfid: str, name: str, st: os.stat_result, emit: bool) -> None:
        fid = fid_of_inode(st.st_ino)
        isdir = statmod.S_ISDIR(st.st_mode)
        self.entries.setdefault(dfid, {})[name] = (fid, isdir)
        if isdir:
            self.dirs[fid] = (dfid, os.path.join(self.dirs[dfid][1], name))  # learnt below a directory we know
            if emit:
                self._emit("MKDIR", fid, dfid, name, st=st)
            self._watch(fid, emit)
            return
        known = self.links.get(fid, 0)
        self.links[fid] = known + 1
        if emit:
            kind = "HLINK" if known else ("CREAT" if statmod.S_ISREG(st.st_mode) else
                                          "SLINK" if statmod.S_ISLNK(st.st_mode) else "MKNOD")
            self._emit(kind, fid, dfid, name, st=st)

    def _forget(self, dfid: str, name: str) -> tuple[str, bool] | None:
        entry = self.entries.get(dfid, {}).pop(name, None)
        if entry is None:
            return None
        fid, isdir = entry
        if isdir:
            self._drop_dir(fid)
        else:
            left = self.links.get(fid, 1) - 1
            if left > 0:
                self.links[fid] = left
            else:
                self.links.pop(fid, None)
        return entry

    def _drop_dir(self, fid: str) -> None:
        for name in list(self.entries.get(fid, {})):
            self._forget(fid, name)
        self.entries.pop(fid, None)
        self.dirs.pop(fid, None)
        wd = self.dir_wd.pop(fid, None)
        if wd is not None:
            self.wd_dir.pop(wd, None)

    def _repath(self, fid: str) -> None:
        """A directory moved: its own path and every path below it."""
        for name, (child, isdir) in self.entries.get(fid, {}).items():
            if isdir and child in self.dirs:
                self.dirs[child] = (fid, os.path.join(self.dirs[fid][1], name))
                self._repath(child)

    # -- events -------------------------------------------------------------------------------------------------
    def poll(self) -> int:
        """Turn every queued event into records; the number of records written."""
        before = self.index
        events = self.inotify.read()
        moves: dict[int, tuple[str, str, tuple[str, bool]]] = {}  # cookie -> (dir, name, entry) moved away
        modified: dict[str, tuple[str, str]] = {}
        for wd, mask, cookie, name in events:
            if mask & IN_Q_OVERFLOW:
                self._mark(LOST_EVENTS)
                continue
            if mask & IN_IGNORED:
                dfid = self.wd_dir.pop(wd, None)
                if dfid is not None and self.dir_wd.get(dfid) == wd:
                    del self.dir_wd[dfid]
                continue
            dfid = self.wd_dir.get(wd)
            if dfid is None or dfid not in self.dirs or not name:
                continue
            path = os.path.join(self.dirs[dfid][1], name)
            if mask & IN_CREATE:
                try:
                    st = os.lstat(path)
                except OSError:
                    continue  # created and gone before we looked: Lustre would log both, the net is nothing
                if name in self.entries.get(dfid, {}):
                    continue  # already learnt from a look at a new directory
                self._learn(dfid, name, st, emit=True)
            elif mask & IN_DELETE:
                entry = self._forget(dfid, name)
                if entry is not None:
                    fid, isdir = entry
                    modified.pop(fid, None)
                    last = 0 if isdir or fid in self.links else LAST_LINK
                    self._emit("RMDIR" if isdir else "UNLNK", fid, dfid, name, flags=last)
            elif mask & IN_MOVED_FROM:
                entry = self.entries.get(dfid, {}).get(name)
                if entry is not None:
                    moves[cookie] = (dfid, name, entry)
            elif mask & IN_MOVED_TO:
                self._moved_in(dfid, name, path, moves.pop(cookie, None))
            elif mask & IN_CLOSE_WRITE:
                entry = self.entries.get(dfid, {}).get(name)
                if entry is not None and not entry[1]:
                    modified.pop(entry[0], None)
                    self._emit("CLOSE", entry[0])
            elif mask & IN_MODIFY:
                entry = self.entries.get(dfid, {}).get(name)
                if entry is not None and not entry[1]:
                    modified[entry[0]] = (dfid, name)
            elif mask & IN_ATTRIB:
                entry = self.entries.get(dfid, {}).get(name)
                if entry is not None:
                    self._emit("SATTR", entry[0])
        for dfid, name, (fid, isdir) in moves.values():  # moved out of the trees: gone, for the inventory
            if isdir and fid in self.dirs and self.dirs[fid][0] != dfid:
                self.entries.get(dfid, {}).pop(name, None)  # a new directory's look found it: MKDIR moved it
                continue
            self._forget(dfid, name)  # (or into a directory made since, whose look found it: then not its last name)
            self._emit("RMDIR" if isdir else "UNLNK", fid, dfid, name,
                       flags=0 if isdir or fid in self.links else LAST_LINK)
        for fid in modified:
            self._emit("MTIME", fid)
        if self.index != before:
            self.out.flush()
        return self.index - before

    def _moved_in(self, dfid: str, name: str, path: str, source) -> None:
        try:
            st = os.lstat(path)
        except OSError:
            st = None
        over = self.entries.get(dfid, {}).get(name)
        if source is None:  # from outside the trees: new here
            if over is not None:
                self._forget(dfid, name)
                self._emit("RMDIR" if over[1] else "UNLNK", over[0], dfid, name, flags=LAST_LINK)
            if st is not None:
                self._learn(dfid, name, st, emit=True)
            return
        sdir, sname, (fid, isdir) = source
        self.entries.get(sdir, {}).pop(sname, None)
        target, flags = ZERO_FID, 0
        if over is not None and over[0] != fid:
            self._forget(dfid, name)
            target, flags = over[0], (LAST_LINK if over[0] not in self.links else 0)
        self.entries.setdefault(dfid, {})[name] = (fid, isdir)
        if isdir and fid in self.dirs:
            self.dirs[fid] = (dfid, path)
            self._repath(fid)
        self._emit("RENME", target, dfid, name, flags=flags, source=(fid, sdir, sname), st=st)

    # -- housekeeping -------------------------------------------------------------------------------------------
    def compact(self) -> None:
        """Drop the records every consumer has cleared, once the log is large (as the MDT purges)."""
        try:
            if self.log.stat().st_size < COMPACT_BYTES:
                return
        except FileNotFoundError:
            return
        users = read_users(self.log.with_name(self.log.name + ".users"))
        if not users:
            return
        keep_after = min(users.values())
        tmp = self.log.with_name(f".{self.log.name}.compact")
        self.out.flush()
        with open(self.log, encoding="utf-8", errors="surrogateescape") as src, \
                open(tmp, "w", encoding="utf-8", errors="surrogateescape") as dst:
            for line in src:
                head = line.partition(" ")[0]
                if not head.isdigit() or int(head) > keep_after:
                    dst.write(line)
        os.replace(tmp, self.log)
        self.out.close()
        self.out = open(self.log, "a", encoding="utf-8", errors="surrogateescape")

    def close(self) -> None:
        self.poll()
        self.out.close()
        self.inotify.close()
