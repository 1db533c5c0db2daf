"""Where changelog records come from, and how a consumer clears what it has committed.

- :class:`LustreChangelog`: ``lfs changelog MDT STARTREC`` (the records from ``STARTREC`` on, as text) and
  ``lfs changelog_clear MDT USER ENDREC`` (the MDT may purge every record up to ``ENDREC`` once each
  registered user has cleared it), through the ``lfs`` on PATH.
- :class:`EmulatedChangelog`: the emulated MDT's log (``ROOT/mds/changelog/FS-MDT0000``, written by
  :mod:`iez.inventory.emulated_mdt`) read the way ``lfs changelog`` prints, the same lines; a clear is noted
  in ``FS-MDT0000.users`` (user → last cleared record), which the writer reads to drop cleared records.

Both give lines; the consumer parses them (:mod:`iez.inventory.changelog`) and so runs identically on both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from itertools import islice
from pathlib import Path
from typing import Iterator

from iez.inventory.changelog import record_index


class LustreChangelog:
    """An MDT's changelog on Lustre, through ``lfs`` (``lfs`` on PATH unless given)."""

    def __init__(self, mdt: str, user: str, lfs: str | None = None):
        self.mdt, self.user = mdt, user
        found = lfs or shutil.which("lfs")
        if found is None:
            raise OSError(f"--mdt {mdt}: there is no lfs command on PATH to read its changelog")
        self.lfs: str = found

    def blocks(self, start: int, size: int) -> Iterator[list[str]]:
        """The records from number ``start`` on, as lists of at most ``size`` lines, each ending in a newline."""
        proc = subprocess.Popen([self.lfs, "changelog", self.mdt, str(start)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="surrogateescape", bufsize=1 << 20)
        out, errors = proc.stdout, proc.stderr
        assert out is not None and errors is not None  # both are pipes
        try:
            while lines := list(islice(out, size)):  # whole blocks of lines read in C, not one line at a time
                if not lines[-1].endswith("\n"):
                    lines[-1] += "\n"  # the output's last line
                yield lines
        finally:
            out.close()
            err = errors.read()
            code = proc.wait()
        if code != 0:
            raise OSError(f"lfs changelog {self.mdt} {start} failed (exit {code}): "
                          f"{err.strip().splitlines()[-1] if err.strip() else 'no message'}")

    def clear(self, end: int) -> None:
        done = subprocess.run([self.lfs, "changelog_clear", self.mdt, self.user, str(end)], capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise OSError(f"lfs changelog_clear {self.mdt} {self.user} {end} failed (exit {done.returncode}): "
                          f"{done.stderr.strip() or 'no message'}")

    def last_index(self) -> int | None:
        """Unknown through ``lfs`` (``lctl get_param mdd.MDT.changelog_users`` on the MDS knows it)."""
        return None


class EmulatedChangelog:
    """The emulated MDT's log file, read as ``lfs changelog`` would print it."""

    def __init__(self, path: str | Path, user: str):
        self.path, self.user = Path(path), user

    @property
    def users_path(self) -> Path:
        return self.path.with_name(self.path.name + ".users")

    def blocks(self, start: int, size: int) -> Iterator[list[str]]:
        """The records from number ``start`` on, as lists of at most ``size`` whole lines."""
        try:
            handle = open(self.path, "r", encoding="utf-8", errors="surrogateescape")
        except FileNotFoundError:
            raise OSError(f"{self.path}: no emulated changelog (is `iez cluster emulate` running for this "
                          "cluster?)") from None
        with handle:
            handle.seek(_seek(handle, start))
            skipping = True  # records are in order: once one is at or after start, the rest are too
            while lines := list(islice(handle, size)):  # whole blocks of lines read in C, not one line at a time
                partial = not lines[-1].endswith("\n")
                if partial:
                    lines.pop()  # an append in progress (the file's last line): read it next time
                if skipping:
                    first = 0
                    for first, line in enumerate(lines):
                        n = record_index(line)
                        if n is None or n >= start:
                            skipping = False
                            break
                    else:
                        first = len(lines)
                    lines = lines[first:]
                if lines:
                    yield lines
                if partial:
                    return

    def clear(self, end: int) -> None:
        users = read_users(self.users_path)
        users[self.user] = max(end, users.get(self.user, 0))
        tmp = self.users_path.with_name(f".{self.users_path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(users) + "\n")
        os.replace(tmp, self.users_path)

    def last_index(self) -> int | None:
        return last_index(self.path)


def read_users(path: Path) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in json.loads(path.read_text()).items()}
    except FileNotFoundError:
        return {}
    except (ValueError, AttributeError) as err:
        raise ValueError(f"{path}: not a changelog users file ({err})") from None


def _seek(handle, start: int) -> int:
    """An offset at or before the first record numbered ``start`` or more (records are in order): bisection
    over the file, each probe reading the first whole line after it."""
    handle.seek(0, os.SEEK_END)
    lo, hi = 0, handle.tell()
    while hi - lo > 65536:
        mid = (lo + hi) // 2
        handle.seek(mid)
        handle.readline()
        line = handle.readline()
        n = record_index(line) if line else None
        if n is None or n >= start:
            hi = mid
        else:
            lo = mid
    return lo if lo == 0 else _line_start(handle, lo)


def _line_start(handle, offset: int) -> int:
    handle.seek(offset)
    handle.readline()
    return handle.tell()


def last_index(path: Path) -> int | None:
    """The last whole record's number in a log file, None when it holds none."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            back = min(size, 65536)
            handle.seek(size - back)
            tail = handle.read(back)
    except FileNotFoundError:
        return None
    lines = tail.split(b"\n")
    for line in reversed(lines[:-1]):
        head = line.split(b" ", 1)[0]
        if head.isdigit():
            return int(head)
    return None
