"""Write requests from a Darshan log: what a job that Darshan watched wrote, one request per file.

Darshan (most HPC centres collect a log for every job) keeps one record per
(rank, file) and module; a file every rank opened may instead have one record
with rank -1 (Darshan's reduction of shared files). Records are grouped by
their record id, the 64-bit hash of the path, and named through the log's
name records. Modules read: POSIX, MPI-IO and STDIO (bytes), H5F (files
opened through HDF5: no byte counters, they only make a file known) and
LUSTRE (layouts). Other modules are checked for integrity but not used.

For each file:

- ``write_bytes``: per byte-level module (POSIX, STDIO) the smaller of the
  bytes written (``*_BYTES_WRITTEN`` summed over the file's records) and the
  extent written (the largest ``*_MAX_BYTE_WRITTEN`` + 1): the space the
  job's writes occupy can exceed neither (rewrites inflate the sum, holes and
  appends to old data inflate the extent). POSIX and STDIO see different
  calls (``write`` versus ``fwrite``), so their estimates add up. MPI-IO is a
  layer above POSIX: its ``MPIIO_BYTES_WRITTEN`` (summed) replaces the POSIX
  + STDIO estimate when larger, because Darshan's POSIX wrappers can miss the
  writes an MPI-IO driver makes (on ALCF Theta a 25 GB MPI-IO file shows
  78 KB of POSIX writes), while collective buffering can make POSIX see more
  than MPI-IO did (E3SM-IO: 303 GB of POSIX writes under 77 GB of MPI-IO
  writes). In short: ``max(posix + stdio, mpiio)``.
- ``rank``: the one rank whose records wrote bytes, or -1 (a shared file)
  when a writing record has rank -1 or writing records come from two or more
  ranks. For files nothing was written to (kept with ``keep_read``), every
  record of the POSIX, MPI-IO, STDIO and H5F modules decides by the same rule.
- ``stripe_size``, ``stripe_count``, ``ost_ids``: from the file's LUSTRE
  record (rank -1's, else the lowest rank's; all ranks see one layout).
  ``ost_ids`` lists the OSTs of the components holding written data (the
  first component always; a later one when it starts below ``write_bytes``),
  in layout order without repeats; ``stripe_count`` is how many there are and
  ``stripe_size`` the first component's. Without a LUSTRE record
  ``stripe_size`` and ``ost_ids`` are None and ``stripe_count`` is 1
  (Lustre's default layout, and what the simulator needs: a positive count).
- ``pool`` and ``components`` (the file's Lustre policy, :mod:`iez.trace.policy`)
  from the same record. Darshan 3.4 and later (LUSTRE module version 2) record
  per component its extent, stripe size and count, pattern (Data-on-MDT,
  overstriping), flags, mirror id and pool name; older logs (version 1, read
  through libdarshan-util's conversion) one stripe size, width and OST list,
  no pool. A composite layout (a component flagged as instantiated) gives its
  template: the components of its first mirror, without OSTs. Darshan only
  records the components Lustre had instantiated, so when the recorded ones
  do not reach the end of the file the template is incomplete and is not
  kept (``components`` None): applying it would end the file where the job
  stopped writing. ``pool`` is the one pool every recorded component names,
  else None. Whether the layout came from a directory default Darshan cannot
  tell, so a stored request's ``default_layout`` stays unknown.
- Files with ``write_bytes`` 0 (only read, or only opened) are left out
  unless ``keep_read``; Darshan's pseudo-files ``<STDIN>``, ``<STDOUT>`` and
  ``<STDERR>`` are always left out.

A log that is not a Darshan log, or that is truncated or corrupt (any module's
data fails to decompress or decode), raises :class:`ValueError` naming the
file and what libdarshan-util reported; the library's own messages on the
process's standard error are captured while the log is read (a process-wide
redirection of file descriptor 2 for that time), never shown.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from iez.model import EOF_END, Component
from iez.trace.parse import Request
from iez.trace.policy import composite
from iez.errors import InputError

DEFAULT_STRIPE_COUNT = 1  # Lustre's default layout when the log has no LUSTRE record
#: Modules with byte counters: (module, counter prefix, has *_MAX_BYTE_WRITTEN).
BYTE_MODULES = (("POSIX", "POSIX", True), ("STDIO", "STDIO", True), ("MPI-IO", "MPIIO", False))
OPEN_MODULES = ("H5F",)  # make files known, no bytes
_PSEUDO = re.compile(r"^<[A-Z]+>$")
# lustreapi.h: llapi_layout pattern bits; lustre_user.h: LCME_FL_INIT, a component Lustre has instantiated.
LLAPI_LAYOUT_MDT, LLAPI_LAYOUT_OVERSTRIPING, LCME_FL_INIT = 0x2, 0x4, 0x10


@dataclass(frozen=True)
class DarshanRequest(Request):
    """One file the job wrote: a trace's request (Darshan cannot tell the directory default, so
    ``default_layout`` stays unknown) with the OSTs Darshan saw it on, when it saw them."""

    ost_ids: tuple[int, ...] | None = None

    def to_dict(self) -> dict:
        """The request's form without ``default_layout``, ``ost_ids`` (null: not seen) after ``rank``."""
        items = [(k, v) for k, v in super().to_dict().items() if k != "default_layout"]
        ranked = [k for k, _ in items].index("rank") + 1
        return dict(items[:ranked] + [("ost_ids", None if self.ost_ids is None else list(self.ost_ids))]
                    + items[ranked:])


@dataclass
class DarshanImport:
    """What one log holds: its requests and a little about the job."""

    path: str
    requests: list[DarshanRequest]
    nprocs: int | None = None
    jobid: int | None = None
    exe: str = ""
    modules: list[str] = field(default_factory=list)
    partial_modules: list[str] = field(default_factory=list)  # modules that ran out of record memory


class _BadLog(InputError):
    """What is wrong with a log, found by :func:`_check_records`."""


@dataclass
class _Record:
    rank: int
    written: int = 0
    max_byte: int = -1


@contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """Send file descriptor 2 to a temporary file for the block; its lines land in the yielded list."""
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(line.strip() for line in sink.read().decode("utf-8", "replace").splitlines()
                         if line.strip())


def _darshan():
    try:
        import darshan
        from darshan.backend import cffi_backend
    except ImportError as err:  # pragma: no cover - darshan is a dependency
        raise ValueError(f"reading Darshan logs needs the darshan package (pip install darshan): {err}") from None
    logging.getLogger("darshan").setLevel(logging.ERROR)
    return darshan, cffi_backend


def _check_records(backend, path: str) -> None:
    """Read every record of every module once; a read error (truncation, corruption) raises."""
    log = backend.log_open(path)
    if not log["handle"]:
        raise _BadLog("not a Darshan log, or its header is unreadable")
    try:
        modules = backend.log_get_modules(log)
        for name, info in modules.items():
            while True:
                buf = backend.ffi.new("void **")
                got = backend.libdutil.darshan_log_get_record(log["handle"], info["idx"], buf)
                if buf[0] != backend.ffi.NULL:
                    backend.libdutil.darshan_free(buf[0])
                if got < 0:
                    raise _BadLog(f"the {name} module's data cannot be read (truncated or corrupt log)")
                if got == 0:
                    break
        backend.log_get_name_records(log)
    finally:
        backend.log_close(log)


def _why(messages: Sequence[str]) -> str:
    errors = [m.removeprefix("Error:").strip().rstrip(".") for m in messages if m.startswith("Error:")]
    errors = [e for e in errors if not e.endswith(": Success")]  # errno 0: the line before says why
    return f" (libdarshan-util: {'; '.join(dict.fromkeys(errors))})" if errors else ""


def read_log(path: str | Path, keep_read: bool = False) -> DarshanImport:
    """The write requests of the Darshan log ``path`` (rules in the module text), sorted by file."""
    path = str(path)
    with open(path, "rb"):  # a missing or unreadable file: the OSError names it
        pass
    darshan, backend = _darshan()
    error: str | None
    with _captured_stderr() as messages:
        try:
            _check_records(backend, path)
            with darshan.DarshanReport(path, read_all=False) as report:
                for mod in [m for m, _, _ in BYTE_MODULES] + list(OPEN_MODULES):
                    if mod in report.modules:
                        report.mod_read_all_records(mod, dtype="numpy", warnings=False)
                if "LUSTRE" in report.modules:
                    report.mod_read_all_lustre_records(dtype="numpy", warnings=False)
                if not report.name_records_read:
                    report.read_name_records()
        except _BadLog as err:
            error = f"{path}: {err}"
        except Exception as err:  # noqa: BLE001 - the library raises anything for a bad log
            error = f"{path}: not a readable Darshan log ({type(err).__name__}: {err})"
        else:
            error = None
    if error:
        raise ValueError(error + _why(messages))
    job = report.metadata.get("job", {})
    exe = report.metadata.get("exe", "")
    return DarshanImport(path, _requests(report, keep_read), nprocs=job.get("nprocs"), jobid=job.get("jobid"),
                         exe=exe if isinstance(exe, str) else "", modules=list(report.modules),
                         partial_modules=[m for m, info in report.modules.items() if info.get("partial_flag")])


def import_darshan(path: str | Path, keep_read: bool = False) -> list[DarshanRequest]:
    """Only the requests of :func:`read_log`."""
    return read_log(path, keep_read=keep_read).requests


def _counter_index(report, mod: str) -> dict[str, int]:
    return {name: i for i, name in enumerate(report.counters[mod]["counters"])}


def _records(report, mod: str) -> Iterable[dict]:
    return report.records[mod] if mod in report.records else ()


def _shared_rank(ranks: Iterable[int]) -> int | None:
    ranks = set(ranks)
    if not ranks:
        return None
    if -1 in ranks or len(ranks) > 1:
        return -1
    return ranks.pop()


def _requests(report, keep_read: bool) -> list[DarshanRequest]:
    names: dict[int, str] = report.name_records
    # per file id, per byte module: its records
    by_file: dict[int, dict[str, list[_Record]]] = defaultdict(lambda: defaultdict(list))
    for mod, prefix, has_max in BYTE_MODULES:
        if mod not in report.records:
            continue
        index = _counter_index(report, mod)
        written = index[f"{prefix}_BYTES_WRITTEN"]
        max_byte = index.get(f"{prefix}_MAX_BYTE_WRITTEN") if has_max else None
        for rec in _records(report, mod):
            counters = rec["counters"]
            by_file[rec["id"]][mod].append(_Record(
                int(rec["rank"]), max(int(counters[written]), 0),
                int(counters[max_byte]) if max_byte is not None else -1))
    for mod in OPEN_MODULES:
        for rec in _records(report, mod):
            by_file[rec["id"]][mod].append(_Record(int(rec["rank"])))
    layouts = _layouts(report)
    if keep_read:
        for file_id in layouts:
            by_file[file_id]  # noqa: B018 - a file only the LUSTRE module saw is still a file
    requests = []
    for file_id, mods in by_file.items():
        name = names.get(file_id)
        if name is None or _PSEUDO.match(name):
            continue
        size = _write_bytes(mods)
        if size <= 0 and not keep_read:
            continue
        records = [r for recs in mods.values() for r in recs]
        rank = _shared_rank(r.rank for r in records if r.written > 0)
        if rank is None:
            rank = _shared_rank(r.rank for r in records)
        if rank is None:  # only a LUSTRE record
            rank = _shared_rank(lustre_rank for lustre_rank, _ in layouts.get(file_id, ())) or 0
        stripe_count, stripe_size, ost_ids = _layout(layouts.get(file_id), size)
        pool, components = _policy(layouts.get(file_id))
        requests.append(DarshanRequest(file=name, write_bytes=size, stripe_count=stripe_count,
                                       stripe_size=stripe_size, rank=rank, ost_ids=ost_ids, pool=pool,
                                       components=components))
    requests.sort(key=lambda r: r.file)
    return requests


def _write_bytes(mods: dict[str, list[_Record]]) -> int:
    def estimate(records: list[_Record], extent_known: bool) -> int:
        written = sum(r.written for r in records)
        if not extent_known:
            return written
        extent = max((r.max_byte for r in records), default=-1) + 1
        return min(written, extent) if extent > 0 else 0

    layered = sum(estimate(mods.get(mod, []), has_max) for mod, _, has_max in BYTE_MODULES if mod != "MPI-IO")
    return max(layered, estimate(mods.get("MPI-IO", []), False))


_FIELDS = {"size": "STRIPE_SIZE", "count": "STRIPE_COUNT", "pattern": "STRIPE_PATTERN", "flags": "FLAGS",
           "start": "EXT_START", "end": "EXT_END", "mirror": "MIRROR_ID"}


def _layouts(report) -> dict[int, list[tuple[int, list[dict]]]]:
    """Per file id: (rank, components) of its LUSTRE records, components as {size, count, pattern, flags,
    start, end, mirror, pool, osts} (-1 for a counter the log's version did not record)."""
    if "LUSTRE" not in report.records:
        return {}
    index = _counter_index(report, "LUSTRE")
    where = {key: index.get(f"LUSTRE_COMP_{name}") for key, name in _FIELDS.items()}
    layouts: dict[int, list[tuple[int, list[dict]]]] = defaultdict(list)
    for rec in _records(report, "LUSTRE"):
        comps = []
        for c in rec["components"]:
            comp: dict[str, Any] = {key: -1 if i is None else int(c["counters"][i]) for key, i in where.items()}
            pool = c.get("pool_name", "")
            comp["pool"] = (pool.decode("ascii", "replace") if isinstance(pool, bytes) else str(pool)).strip("\0")
            comp["osts"] = [int(o) for o in c["ost_ids"]]
            comps.append(comp)
        layouts[rec["id"]].append((int(rec["rank"]), comps))
    return layouts


def _chosen(records: list[tuple[int, list[dict]]] | None) -> list[dict]:
    """The components of the record that speaks for the file: rank -1's, else the lowest rank's."""
    return min(records, key=lambda r: (r[0] != -1, r[0]))[1] if records else []


def _component(c: dict) -> Component | None:
    """The template of one recorded component, None when its fields cannot be one."""
    pattern = max(c["pattern"], 0)  # -1: not recorded (version 1), plain RAID-0
    dom = bool(pattern & LLAPI_LAYOUT_MDT)
    end = EOF_END if c["end"] < 0 else c["end"]
    pool = c["pool"] or None
    try:
        return Component(max(c["start"], 0), end, 0 if dom else c["count"], c["size"] if c["size"] > 0 else None,
                         pool, (), dom, bool(pattern & LLAPI_LAYOUT_OVERSTRIPING))
    except ValueError:
        return None


def _policy(records: list[tuple[int, list[dict]]] | None) -> tuple[str | None, tuple[Component, ...]]:
    """(pool, components) of one file's LUSTRE records (rules in the module text)."""
    comps = _chosen(records)
    if not comps:
        return None, ()
    pools = {c["pool"] for c in comps}
    pool = next(iter(pools)) if len(pools) == 1 and "" not in pools else None
    if not any(c["flags"] > 0 and c["flags"] & LCME_FL_INIT for c in comps):
        return pool, ()  # a plain layout
    first_mirror = comps[0]["mirror"]
    parts = [_component(c) for c in comps if c["mirror"] == first_mirror]
    template = [c for c in parts if c is not None]
    if not template or len(template) != len(parts) or template[-1].end != EOF_END:
        return pool, ()
    start, chained = 0, []
    for c in template:
        if c.start != start:  # a gap: a component Darshan did not record
            return pool, ()
        chained.append(c)
        start = c.end
    return pool, tuple(chained) if composite(chained) else ()


def _layout(records: list[tuple[int, list[dict]]] | None,
            write_bytes: int) -> tuple[int, int | None, tuple[int, ...] | None]:
    """(stripe_count, stripe_size, ost_ids) of one file's LUSTRE records (rule in the module text)."""
    comps = _chosen(records)
    if not comps:
        return DEFAULT_STRIPE_COUNT, None, None
    used = [c for i, c in enumerate(comps) if i == 0 or c["start"] < write_bytes]
    osts = tuple(dict.fromkeys(o for c in used for o in c["osts"]))
    count = len(osts) or max(max(c["count"] for c in used), DEFAULT_STRIPE_COUNT)
    return count, (comps[0]["size"] if comps[0]["size"] > 0 else None), (osts or None)
