"""The movers' temporary files: named after the process writing them, so any mover's next run removes those
whose process is gone, and never one whose process still runs.

Every mover that writes a file anew (``iez copy``, ``iez stage``, ``iez rebalance apply`` in emulation) writes
it under a temporary name beside its final name and renames it over that only when it is complete
(:mod:`iez.move.files`, :mod:`iez.move.migrate`). The temporary's name says who writes it::

    .NAME.iez-KIND.NODE-BOOT-PIDNS-PID-START

``KIND`` is ``copy`` or ``rebalance``; ``NODE`` 8 hex digits of the host name's SHA-1; ``BOOT`` the first 8 of
the kernel's boot id; ``PIDNS`` the inode of the writer's pid namespace; ``PID`` the writer and ``START`` its
start time (clock ticks after boot, field 22 of ``/proc/PID/stat``), so a pid used again by another process
is not taken for the writer. (A ``NAME`` too long to fit is cut and given a hash: the name stays within
``NAME_MAX``.)

:func:`sweep` (run by every mover over the directories it writes into, before it writes: ``iez copy`` and
``iez stage`` the destinations' directories, ``iez rebalance apply`` those of every file in its plan,
``iez mirror resync`` those of its files) removes a temporary when its writer is gone:

- written on this host, in this boot and pid namespace: removed when no process ``PID`` started at ``START``
  (a zombie is gone: it writes nothing more); a live writer's temporary is never removed;
- written on this host before it last booted: removed once unchanged for :data:`QUIET_S` seconds;
- written on another host or in another pid namespace (a container): kept (its writer cannot be seen from
  here; a mover there removes it), counted as *kept*;
- the names used before: ``.NAME.iez-copy.PID`` removed when no process ``PID`` runs here and
  ``.NAME.iez-rebalance.tmp`` when no process here holds it open, either once unchanged for :data:`QUIET_S`
  seconds.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import stat
import time
from dataclasses import dataclass, field
from typing import Iterable

KINDS = ("copy", "rebalance")
#: A temporary whose writer cannot be asked (another boot, the names used before) is removed once its
#: ctime is this old: a live writer changes it with every write.
QUIET_S = 60.0
_NAME_MAX = 255
_TOKEN = re.compile(r"(?P<node>[0-9a-f]{8})-(?P<boot>[0-9a-f]{8})-(?P<ns>[0-9]+)-(?P<pid>[0-9]+)-(?P<start>[0-9]+)")
_NEW = re.compile(r"\..*\.iez-(?P<kind>copy|rebalance)\." + _TOKEN.pattern, re.S)
_OLD_COPY = re.compile(r"\..*\.iez-copy\.(?P<pid>[0-9]+)", re.S)
_OLD_REBALANCE = re.compile(r"\..*\.iez-rebalance\.tmp", re.S)


@dataclass(frozen=True)
class Writer:
    """Who writes a temporary: the process, where it runs, and when it started."""

    node: str
    boot: str
    ns: int
    pid: int
    start: int

    def token(self) -> str:
        return f"{self.node}-{self.boot}-{self.ns}-{self.pid}-{self.start}"


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def process_start(pid: int) -> tuple[int, str] | None:
    """``(start time in clock ticks after boot, state letter)`` of process ``pid``; None when there is none."""
    text = _read(f"/proc/{pid}/stat")
    if not text or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    try:
        return int(fields[19]), fields[0]
    except (IndexError, ValueError):
        return None


def _node() -> str:
    return hashlib.sha1(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _boot() -> str:
    text = (_read("/proc/sys/kernel/random/boot_id") or "").strip().replace("-", "")
    return (text + "0" * 8)[:8] if re.fullmatch(r"[0-9a-f]*", text) else "0" * 8


def _pid_ns() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


_me: dict[int, Writer] = {}


def me() -> Writer:
    """This process (computed once per pid: a forked child is a writer of its own)."""
    pid = os.getpid()
    found = _me.get(pid)
    if found is None:
        start = process_start(pid)
        found = _me[pid] = Writer(_node(), _boot(), _pid_ns(), pid, start[0] if start else 0)
    return found


def temp_name(path: str, kind: str) -> str:
    """The temporary beside ``path`` this process writes it under."""
    if kind not in KINDS:
        raise ValueError(f"unknown temporary kind {kind!r}")
    head, tail = os.path.split(path)
    suffix = f".iez-{kind}.{me().token()}"
    room = _NAME_MAX - 1 - len(suffix)
    raw = os.fsencode(tail)
    if len(raw) > room:  # cut (at a byte: surrogateescape keeps any byte) and made unique by a hash
        digest = hashlib.sha1(raw).hexdigest()[:10]
        tail = os.fsdecode(raw[:room - len(digest) - 1]) + "~" + digest
    return os.path.join(head, f".{tail}{suffix}")


def is_temporary(name: str) -> bool:
    """Whether the base name ``name`` is a mover's temporary (any writer, the names used before included)."""
    return name.startswith(".") and bool(_NEW.fullmatch(name) or _OLD_COPY.fullmatch(name)
                                         or _OLD_REBALANCE.fullmatch(name))


def writer_of(name: str) -> Writer | None:
    found = _NEW.fullmatch(name)
    if not found:
        return None
    return Writer(found["node"], found["boot"], int(found["ns"]), int(found["pid"]), int(found["start"]))


def _alive(pid: int, start: int | None = None) -> bool:
    if not os.path.isdir("/proc/self"):
        return True  # no /proc: the writer cannot be asked, so it is never taken for gone
    found = process_start(pid)
    if found is None:
        return False
    ticks, state = found
    if state in ("Z", "X"):
        return False
    return start is None or ticks == start


def _held_open(st: os.stat_result) -> bool:
    """Whether any process this user can see holds the file ``st`` describes open."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                other = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                return True
    return False


def verdict(name: str, st: os.stat_result, now: float | None = None) -> str:
    """``remove`` (its writer is gone), ``live`` (its writer runs), ``foreign`` (its writer cannot be seen
    from here) or ``other`` (not a temporary)."""
    if not name.startswith("."):
        return "other"
    quiet = (time.time() if now is None else now) - st.st_ctime >= QUIET_S
    writer = writer_of(name)
    if writer is not None:
        here = me()
        if writer.node != here.node:
            return "foreign"
        if writer.boot != here.boot:
            return "remove" if quiet else "live"  # this host, before its last boot
        if writer.ns != here.ns:
            return "foreign"
        return "live" if _alive(writer.pid, writer.start) else "remove"
    old = _OLD_COPY.fullmatch(name)
    if old:
        return "live" if _alive(int(old["pid"])) or not quiet else "remove"
    if _OLD_REBALANCE.fullmatch(name):
        return "live" if not quiet or _held_open(st) else "remove"
    return "other"


@dataclass
class Swept:
    """What :func:`sweep` found: temporaries removed (their writer gone), kept (a live or unseen writer's)."""

    removed: int = 0
    kept: int = 0
    removed_paths: list[str] = field(default_factory=list)

    def add(self, other: "Swept") -> None:
        self.removed += other.removed
        self.kept += other.kept
        self.removed_paths += other.removed_paths


def sweep(directories: Iterable[str]) -> Swept:
    """Remove the temporaries in ``directories`` (not below them) whose writer is gone (see the module text).
    A directory that cannot be listed is passed by."""
    out = Swept()
    mine = me()
    for directory in sorted(set(directories)):
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if not name.startswith(".") or ".iez-" not in name or not is_temporary(name):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            writer = writer_of(name)
            if writer == mine:
                continue  # this process's own, in flight
            what = verdict(name, st)
            if what != "remove":
                out.kept += what in ("live", "foreign")
                continue
            try:
                again = os.lstat(entry.path)
                if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
                    continue
                os.unlink(entry.path)
            except FileNotFoundError:
                continue  # another mover removed it first
            except OSError:
                out.kept += 1
                continue
            out.removed += 1
            out.removed_paths.append(entry.path)
    return out


def sweep_beside(paths: Iterable[str]) -> Swept:
    """:func:`sweep` over the directories holding ``paths``."""
    return sweep(os.path.dirname(os.path.abspath(p)) for p in paths)
