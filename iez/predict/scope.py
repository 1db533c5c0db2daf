"""Where ``iez run`` traces and places: the file systems of the job's working directory and outputs.

A job's launcher and runtime create files of their own (Open MPI's session
directory ``/tmp/ompi.<host>.<uid>/``, PMIx segments in ``/dev/shm``, sockets
under ``/run/user/<uid>``). Traced, they became predictions of files the next
run never creates, and every placed run then "missed" them and was flagged for
re-tracing. So by default ``iez run`` hands the library (``IEZ_INCLUDE`` and
``IEZ_EXCLUDE``) a scope:

- included: the mount point of the file system holding the working directory and
  each ``--output`` (on a cluster, ``/lustre``); a directory that lies in a
  runtime area itself (a job run from ``/tmp/x``) is included alone, not its
  file system;
- excluded: the runtime areas (``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run``,
  ``/var/run``, ``$XDG_RUNTIME_DIR``, ``$TMPDIR``) except where an included
  directory lies inside one, and the system trees the library leaves out by
  default (``/proc``, ``/usr``, ...), which an ``IEZ_INCLUDE`` would otherwise
  bring back when the job's file system is ``/``.

An ``IEZ_INCLUDE`` already in the environment is the user's choice and is kept
(the runtime areas are still excluded unless it names a directory inside one);
an ``IEZ_EXCLUDE`` is kept and added to. The same rule filters the requests
learnt from traces (:meth:`Scope.contains`), so traces made before it cannot
bring a runtime file back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

#: Runtime areas: never a job's data.
RUNTIME_AREAS = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/var/run")
#: What the library leaves out when IEZ_INCLUDE is unset (placement_lib/src/config.c), restored beside it.
SYSTEM_TREES = ("/proc", "/sys", "/dev", "/usr", "/etc", "/boot", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
                "/libx32")


def under(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or below it (whole path components, as the library compares)."""
    return prefix == "/" or path == prefix or path.startswith(prefix.rstrip("/") + "/")


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces, tabs, newlines and backslashes come octal-escaped."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_points(mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Mount points of this process's mount namespace (``[]`` where /proc is not there)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as lines:
            return [_unescape(line.split()[4]) for line in lines if len(line.split()) > 4]
    except OSError:
        return []


def mount_of(path: str, mounts: Iterable[str] | None = None) -> str:
    """The mount point of the file system holding ``path`` (or what it will be created on): the longest mount
    point above it; without /proc, where the device number changes walking up."""
    mounts = list(mount_points() if mounts is None else mounts)
    if mounts:
        return max((m for m in mounts if under(path, m)), key=len, default="/")
    current = Path(path)
    while not current.exists():
        current = current.parent
    device = current.stat().st_dev
    while current.parent != current and current.parent.stat().st_dev == device:
        current = current.parent
    return str(current)


def _prefixes(text: str | None) -> list[str]:
    return [os.path.normpath(os.path.abspath(p)) for p in (text or "").split(":") if p]


def runtime_areas(env: Mapping[str, str]) -> list[str]:
    areas = list(RUNTIME_AREAS)
    for name in ("XDG_RUNTIME_DIR", "TMPDIR"):
        value = env.get(name)
        if value and value.startswith("/") and os.path.normpath(value) != "/":
            areas.append(os.path.normpath(value))
    return list(dict.fromkeys(areas))


@dataclass(frozen=True)
class Scope:
    """Path prefixes the library considers (``include``) and leaves alone (``exclude``)."""

    include: tuple[str, ...]
    exclude: tuple[str, ...]

    def env(self) -> dict[str, str]:
        """``IEZ_INCLUDE`` and ``IEZ_EXCLUDE`` for the library."""
        return {"IEZ_INCLUDE": ":".join(self.include), "IEZ_EXCLUDE": ":".join(self.exclude)}

    def contains(self, path: str) -> bool:
        """The library's rule: below an included prefix and below no excluded one."""
        return any(under(path, p) for p in self.include) and not any(under(path, p) for p in self.exclude)

    def describe(self) -> str:
        return ", ".join(self.include)


def job_scope(cwd: str, outputs: Iterable[str] = (), env: Mapping[str, str] | None = None,
              mounts: Iterable[str] | None = None) -> Scope:
    """The scope of a job started in ``cwd`` that writes to ``outputs`` (rules in the module text)."""
    env = os.environ if env is None else env
    mounts = list(mount_points() if mounts is None else mounts)
    areas = runtime_areas(env)
    given = _prefixes(env.get("IEZ_INCLUDE"))
    if given:
        include = given
    else:
        include = []
        for root in [cwd, *outputs]:
            for path in dict.fromkeys([os.path.normpath(os.path.abspath(root)), os.path.realpath(root)]):
                inside_runtime = any(under(path, area) for area in areas)
                include.append(path if inside_runtime else mount_of(path, mounts))
    include = list(dict.fromkeys(include))
    # a prefix below another one adds nothing
    include = [p for p in include if not any(q != p and under(p, q) for q in include)]
    leave_out = [a for a in areas + list(SYSTEM_TREES) if not any(under(p, a) for p in include)]
    exclude = list(dict.fromkeys(_prefixes(env.get("IEZ_EXCLUDE")) + leave_out))
    return Scope(tuple(include), tuple(exclude))
