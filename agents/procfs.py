"""Where the agent reads OST parameters: ``lctl``, a parameter tree, or saved text.

All three give the same :class:`agents.lctl.Param` list, so one code path
(:func:`agents.lctl.collect_osts`) turns any of them into per-OST readings.

* ``lctl``: runs ``lctl get_param`` for capacity and stats of every obdfilter and
  OSD target (the normal case on a Lustre server).
* ``procfs``: reads the files of a parameter tree, by default ``/proc/fs/lustre``
  then ``/sys/fs/lustre`` (Lustre moved single-value parameters to sysfs, stats
  stayed in procfs): ``<root>/obdfilter/<ost>/{kbytestotal,kbytesavail,stats}`` and
  ``<root>/osd-*/<ost>/{kbytestotal,kbytesavail}``. When a parameter exists under
  several roots, the first root wins.
* ``file``: saved ``lctl get_param`` text, re-read on every interval.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Union

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
)
LCTL_TIMEOUT_S = 30.0
_TREE_PARAMS = {"obdfilter": ("kbytestotal", "kbytesavail", "stats"), "osd": ("kbytestotal", "kbytesavail")}


def split_roots(value: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``"/a:/b"`` or ``["/a", "/b:/c"]`` -> ("/a", "/b", "/c"); empty -> the defaults."""
    if value is None:
        return DEFAULT_ROOTS
    items = [value] if isinstance(value, str) else list(value)
    roots = tuple(part for item in items for part in item.split(":") if part)
    return roots or DEFAULT_ROOTS


def read_tree(roots: tuple[str, ...]) -> list[Param]:
    """Parameters found under the roots, named as lctl names them."""
    seen: set[str] = set()
    params: list[Param] = []
    for root in roots:
        base = Path(root)
        if not base.is_dir():
            continue
        try:
            modules = sorted(p for p in base.iterdir() if p.is_dir())
        except OSError:
            continue
        for module_dir in modules:
            module = module_dir.name
            if module == "obdfilter":
                leaves = _TREE_PARAMS["obdfilter"]
            elif module.startswith("osd-"):
                leaves = _TREE_PARAMS["osd"]
            else:
                continue
            try:
                targets = sorted(p for p in module_dir.iterdir() if p.is_dir())
            except OSError:
                continue
            for target_dir in targets:
                if ost_index(target_dir.name) is None:
                    continue  # MDT, MGS, …
                for leaf in leaves:
                    name = f"{module}.{target_dir.name}.{leaf}"
                    path = target_dir / leaf
                    if name in seen or not path.is_file():
                        continue
                    try:
                        data = path.read_bytes()
                    except OSError as err:
                        raise AgentError(f"cannot read {path}: {err.strerror or err}") from None
                    text = data.decode("utf-8", errors="surrogateescape")
                    seen.add(name)
                    # the file holds the value only; parse it as "name=" + value lines
                    param = Param(name, 1, str(path), [])
                    lines = text.split("\n")
                    if lines and lines[-1] == "":
                        lines.pop()
                    param.lines = [(i, line[:-1] if line.endswith("\r") else line)
                                   for i, line in enumerate(lines, start=1)]
                    params.append(param)
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

    def read(self) -> list[Param]:
        return read_tree(self.roots)

    def describe(self) -> str:
        looked = ", ".join(f"{r}/obdfilter/*/ and {r}/osd-*/*/" for r in self.roots)
        return f"{looked} (kbytestotal, kbytesavail)"


@dataclass
class LctlSource:
    """``lctl get_param`` run on every interval."""

    lctl: str = "lctl"
    kind: str = "lctl"

    def read(self) -> list[Param]:
        command = [self.lctl, "get_param", *LCTL_PATTERNS]
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
            err = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
            detail = err[-1] if err else f"exit status {done.returncode}"
            raise AgentError(f"{self.lctl} get_param failed: {detail}")
        return parse_text(out, f"output of '{self.lctl} get_param'")

    def describe(self) -> str:
        return f"the output of '{self.lctl} get_param {' '.join(LCTL_PATTERNS)}'"


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
