"""Where Lustre parameters are read: ``lctl``, a parameter tree, or saved text.

All three give the same :class:`agents.lctl.Param` list, so one code path turns any
of them into readings: :func:`agents.lctl.collect_osts` on an OSS, and
:mod:`iez.mds.lustre_params` on the MDS, which uses these same readers with its own
parameter names.

* ``lctl``: runs ``lctl get_param PATTERN...`` (the normal case on a Lustre server).
* ``procfs``: reads the files of a parameter tree, by default ``/proc/fs/lustre``
  then ``/sys/fs/lustre`` (Lustre moved single-value parameters to sysfs, stats
  and the MDS's pool lists stayed in procfs). A parameter ``a.b.c`` is the file
  ``<root>/a/b/c``, the way ``lctl get_param`` finds it; the same glob patterns
  select the files. When a parameter exists under several roots, the first root wins.
* ``file``: saved ``lctl get_param`` text, re-read on every interval.

The agent's parameters (:data:`LCTL_PATTERNS`): capacity and stats of every
obdfilter and OSD target, and the obdfilter state switches (``degraded``,
``readonly``, ``no_precreate``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from agents import AgentError
from agents.lctl import Param, ost_index, parse_file, parse_text

__all__ = [
    "DEFAULT_ROOTS",
    "LCTL_PATTERNS",
    "FileSource",
    "LctlSource",
    "TreeSource",
    "make_source",
    "read_tree",
    "split_roots",
]

DEFAULT_ROOTS = ("/proc/fs/lustre", "/sys/fs/lustre")
LCTL_PATTERNS = (
    "obdfilter.*.kbytestotal",
    "obdfilter.*.kbytesavail",
    "obdfilter.*.stats",
    "osd-*.*.kbytestotal",
    "osd-*.*.kbytesavail",
    "obdfilter.*.degraded",
    "obdfilter.*.readonly",
    "obdfilter.*.no_precreate",
    "obdfilter.*.job_stats",
)
LCTL_TIMEOUT_S = 30.0

#: Which targets a tree read keeps (by the target's name, the second part of a parameter).
TargetFilter = Optional[Callable[[str], bool]]


def is_ost(target: str) -> bool:
    """The agent reads OSTs only (an OSD module also holds the MDT and MGS)."""
    return ost_index(target) is not None


def split_roots(value: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``"/a:/b"`` or ``["/a", "/b:/c"]`` -> ("/a", "/b", "/c"); empty -> the defaults."""
    if value is None:
        return DEFAULT_ROOTS
    items = [value] if isinstance(value, str) else list(value)
    roots = tuple(part for item in items for part in item.split(":") if part)
    return roots or DEFAULT_ROOTS


def _tree_param(name: str, path: Path) -> Param:
    """The file holds the value only: read it as the lines of ``name=`` + value."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise AgentError(f"cannot read {path}: {err.strerror or err}") from None
    text = data.decode("utf-8", errors="surrogateescape")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    param = Param(name, 1, str(path), [])
    param.lines = [(i, line[:-1] if line.endswith("\r") else line) for i, line in enumerate(lines, start=1)]
    return param


def read_tree(roots: tuple[str, ...], patterns: tuple[str, ...] = LCTL_PATTERNS,
              keep: TargetFilter = is_ost) -> list[Param]:
    """Parameters matching ``patterns`` (lctl's glob names) under the roots, named as lctl names them.

    ``keep`` filters on the target name (default: OSTs only); None keeps every target.
    """
    seen: set[str] = set()
    params: list[Param] = []
    for root in roots:
        base = Path(root)
        if not base.is_dir():
            continue
        found: list[tuple[str, Path]] = []
        for pattern in patterns:
            try:
                matches = sorted(base.glob(pattern.replace(".", "/")))
            except OSError:
                continue
            for path in matches:
                parts = path.relative_to(base).parts
                if len(parts) < 3 or (keep is not None and not keep(parts[1])):
                    continue
                name = ".".join(parts)
                if name in seen or not path.is_file():
                    continue
                seen.add(name)
                found.append((name, path))
        params.extend(_tree_param(name, path) for name, path in sorted(found))
    return params


@dataclass
class FileSource:
    """Saved ``lctl get_param`` output."""

    path: str
    kind: str = "file"

    def read(self) -> list[Param]:
        return parse_file(self.path)

    def describe(self) -> str:
        return self.path


@dataclass
class TreeSource:
    """A /proc- or /sys-style parameter tree (one or more roots)."""

    roots: tuple[str, ...] = DEFAULT_ROOTS
    kind: str = "procfs"
    patterns: tuple[str, ...] = LCTL_PATTERNS
    keep: TargetFilter = is_ost

    def read(self) -> list[Param]:
        return read_tree(self.roots, self.patterns, self.keep)

    def describe(self) -> str:
        dirs = list(dict.fromkeys(f"{p.split('.')[0]}/*/" for p in self.patterns))
        leaves = list(dict.fromkeys(".".join(p.split(".")[2:]) for p in self.patterns))
        looked = ", ".join(" and ".join(f"{r}/{d}" for d in dirs) for r in self.roots)
        return f"{looked} ({', '.join(leaves)})"


@dataclass
class LctlSource:
    """``lctl get_param`` run on every interval."""

    lctl: str = "lctl"
    kind: str = "lctl"
    patterns: tuple[str, ...] = LCTL_PATTERNS

    def read(self) -> list[Param]:
        command = [self.lctl, "get_param", *self.patterns]
        try:
            done = subprocess.run(command, capture_output=True, timeout=LCTL_TIMEOUT_S, check=False,
                                  env={**os.environ, "LC_ALL": "C"})
        except FileNotFoundError:
            raise AgentError(f"cannot run {self.lctl}: not found") from None
        except subprocess.TimeoutExpired:
            raise AgentError(f"{' '.join(command)} did not finish in {LCTL_TIMEOUT_S:g} s") from None
        except OSError as err:
            raise AgentError(f"cannot run {self.lctl}: {err.strerror or err}") from None
        out = done.stdout.decode("utf-8", errors="surrogateescape")
        # lctl exits non-zero when one pattern matches nothing (osd-zfs on an ldiskfs
        # server, say) but still prints the others; only empty output is a failure.
        if done.returncode != 0 and not out.strip():
            said = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
            detail = said[-1] if said else f"exit status {done.returncode}"
            raise AgentError(f"{self.lctl} get_param failed: {detail}")
        return parse_text(out, f"output of '{self.lctl} get_param'")

    def describe(self) -> str:
        return f"the output of '{self.lctl} get_param {' '.join(self.patterns)}'"


Source = Union[FileSource, TreeSource, LctlSource]  # not `|`: the agent runs on Python 3.9 too


def make_source(kind: str = "auto", *, lctl_output: str | None = None, roots: str | None = None,
                lctl: str | None = None) -> Source:
    """Choose the source: ``file`` (saved text), ``procfs`` (tree), ``lctl`` or ``auto``.

    ``auto``: saved text when a file is given, else the tree when roots are given,
    else ``lctl`` when it is on PATH, else the default tree.
    """
    if kind == "auto":
        if lctl_output:
            kind = "file"
        elif roots:
            kind = "procfs"
        elif shutil.which(lctl or "lctl"):
            kind = "lctl"
        else:
            kind = "procfs"
    if kind == "file":
        if not lctl_output:
            raise AgentError("source 'file' needs --lctl-output FILE")
        return FileSource(lctl_output)
    if kind == "procfs":
        return TreeSource(split_roots(roots))
    if kind == "lctl":
        binary = lctl or "lctl"
        found = shutil.which(binary)
        if not found:
            raise AgentError(f"source 'lctl': {binary} is not on PATH")
        return LctlSource(found)
    raise AgentError(f"unknown source {kind!r}: use auto, lctl, procfs or file")
