"""The CSV files the placement library writes (placement_lib/README.md, "Formats"), read strictly.

Traces become write requests the allocator trusts, so a file that is not
exactly what the library writes is refused, naming the file and the line,
rather than half-read: a wrong header (another version of the library), a row
with a missing or malformed field, an empty file or one that ends mid-row (its
writer was killed or the disk filled; the library writes each record with its
line break and renames the file only when complete). Text is UTF-8; paths that
are not keep their bytes (``surrogateescape``), as ``os.fsdecode`` gives them.

Two versions of each header are read. Traces gained ``layout`` and
``dir_layout`` at the end: ``layout`` is the file's actual layout (version-2
layout text, :mod:`iez.layout.emulated`; on Lustre only, empty elsewhere),
``dir_layout`` the canonical template text of its directory's default layout
when the file was first opened (empty: the directory has none). In a trace of
the older header both are unknown (None). Counts gained ``skips`` (creates the
library left to Lustre because the directory's default had changed since iez
learnt it); the older header reads as 0 skips. A layout text that does not
parse is an error naming the file and line like any other bad field.

It also writes the one CSV of write requests iez makes (``iez trace --out``,
``iez predict --out``), which ``iez simulate --replay`` and ``iez predict`` read.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Protocol

from iez.layout.emulated import canonical_template, parse_attr
from iez.layout.model import Layout, components_text
from iez.model import Component

#: The trace header before layouts were recorded (still read: layouts unknown).
TRACE_COLUMNS_V1 = ("path", "bytes_written", "file_size", "stripe_count", "stripe_size", "rank", "comm_size",
                    "open_time", "pid", "host", "app", "job")
TRACE_COLUMNS = TRACE_COLUMNS_V1 + ("layout", "dir_layout")
#: The counts header before skips were counted (still read: no skips).
COUNTS_COLUMNS_V1 = ("app", "job", "host", "pid", "rank", "hits", "misses", "errors", "started", "ended")
COUNTS_COLUMNS = COUNTS_COLUMNS_V1 + ("skips",)

#: A requests CSV's header; ``mirror_count`` follows when a request has mirrors.
REQUEST_COLUMNS = ("file", "write_bytes", "stripe_count", "rank", "pool", "components")

_INT = re.compile(r"-?[0-9]+")


class LearntRequest(Protocol):
    """A request learnt from a run (a trace's or Darshan log's ``Request``, a prediction's ``PRequest``): what
    a requests CSV row (:func:`write_requests_csv`) and a stored request (``RequestIn.learnt``) read of it."""

    @property
    def file(self) -> str | None: ...
    @property
    def write_bytes(self) -> int: ...
    @property
    def stripe_count(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def pool(self) -> str | None: ...
    @property
    def components(self) -> tuple[Component, ...]: ...
    @property
    def default_layout(self) -> str | None: ...
    @property
    def mirror_count(self) -> int: ...


def write_requests_csv(path: str, requests: Iterable[LearntRequest]) -> None:
    """``requests`` as :data:`REQUEST_COLUMNS` (the template as its JSON text), ``mirror_count`` only when
    some request has mirrors."""
    requests = list(requests)
    with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        mirrored = any(r.mirror_count > 1 for r in requests)
        writer.writerow(REQUEST_COLUMNS + (("mirror_count",) if mirrored else ()))
        for r in requests:
            writer.writerow((r.file, r.write_bytes, r.stripe_count, r.rank, r.pool or "",
                             components_text(r.components)) + ((r.mirror_count,) if mirrored else ()))


@dataclass(frozen=True)
class TraceRow:
    """One file one process opened for writing."""

    path: str
    bytes_written: int
    file_size: int  # -1: unknown
    stripe_count: int
    stripe_size: int  # 0: unknown
    rank: int
    comm_size: int
    open_time: float
    pid: int
    host: str
    app: str
    job: str
    #: The file's actual layout (Lustre); None when empty or unknown.
    layout: Layout | None = None
    #: Canonical template text of the directory's default when first opened; "" none, None unknown (old header).
    dir_layout: str | None = None
    source: str = ""  # "file:line", for messages


@dataclass(frozen=True)
class CountsRow:
    """What one process's creates found in the interaction DB."""

    app: str
    job: str
    host: str
    pid: int
    rank: int
    hits: int
    misses: int
    errors: int
    started: float
    ended: float
    skips: int = 0  # creates left to Lustre: the directory's default differed from the learnt one
    source: str = ""  # "file:line", for messages


def _int(minimum: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        if not _INT.fullmatch(text):
            raise ValueError(f"{text!r} is not a whole number")
        value = int(text)
        if value < minimum:
            raise ValueError(f"{value} is below {minimum}")
        return value

    return convert


def _time(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r} is not a time since the epoch")
    return value


def _absolute(text: str) -> str:
    if not text.startswith("/"):
        raise ValueError(f"{text!r} is not an absolute path")
    return text


def _text(text: str) -> str:
    return text


def _parsed_layout(text: str) -> Layout:
    try:
        return parse_attr(text, "@")
    except ValueError as err:
        raise ValueError(str(err).removeprefix("@: ")) from None


def _layout(text: str) -> Layout | None:
    return _parsed_layout(text) if text else None


def _dir_layout(text: str) -> str:
    """The canonical text of a directory default (the form the library compares), "" for none."""
    return canonical_template(_parsed_layout(text)) if text else ""


TRACE_TYPES: dict[str, Callable[[str], object]] = {
    "path": _absolute, "bytes_written": _int(0), "file_size": _int(-1), "stripe_count": _int(-1),
    "stripe_size": _int(0), "rank": _int(0), "comm_size": _int(1), "open_time": _time, "pid": _int(1),
    "host": _text, "app": _text, "job": _text, "layout": _layout, "dir_layout": _dir_layout,
}
COUNTS_TYPES: dict[str, Callable[[str], object]] = {
    "app": _text, "job": _text, "host": _text, "pid": _int(1), "rank": _int(0), "hits": _int(0),
    "misses": _int(0), "errors": _int(0), "started": _time, "ended": _time, "skips": _int(0),
}


def _records(path: Path, headers: tuple[tuple[str, ...], ...]
             ) -> Iterator[tuple[int, tuple[str, ...], list[str]]]:
    """``(line, columns, fields)`` of each data row after checking the header is one of ``headers`` (the
    current one first); ValueError naming file and line."""
    data = path.read_bytes()
    if not data:
        raise ValueError(f"{path}: empty file, not even a header (was its writer killed?)")
    if not data.endswith(b"\n"):
        last = data.count(b"\n") + 1
        raise ValueError(f"{path}: line {last}: file ends mid-row (truncated?)")
    reader = csv.reader(io.StringIO(data.decode("utf-8", "surrogateescape"), newline=""), strict=True)
    columns: tuple[str, ...] = ()
    first = True
    while True:
        line = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            if "unexpected end of data" in str(err):
                raise ValueError(f"{path}: line {line}: file ends inside a quoted field (truncated?)") from None
            raise ValueError(f"{path}: line {line}: not valid CSV ({err})") from None
        if first:
            known = [h for h in headers if list(h) == fields]
            if not known:
                raise ValueError(f"{path}: line 1: header {','.join(fields)!r} is not the expected "
                                 f"{','.join(headers[0])!r}")
            columns = known[0]
            first = False
            continue
        if len(fields) != len(columns):
            raise ValueError(f"{path}: line {line}: expected {len(columns)} fields, got {len(fields)}")
        yield line, columns, fields


def _read(path: Path, headers: tuple[tuple[str, ...], ...], types: dict, row_type: type) -> list:
    path = Path(path)
    rows = []
    for line, columns, fields in _records(path, headers):
        values = {}
        for column, text in zip(columns, fields):
            try:
                values[column] = types[column](text)
            except ValueError as err:
                raise ValueError(f"{path}: line {line}: {column}: {err}") from None
        rows.append(row_type(**values, source=f"{path}:{line}"))
    return rows


def read_trace(path: Path | str) -> list[TraceRow]:
    """The rows of one ``iez-trace.*.csv`` file (either header)."""
    return _read(Path(path), (TRACE_COLUMNS, TRACE_COLUMNS_V1), TRACE_TYPES, TraceRow)


def read_counts(path: Path | str) -> list[CountsRow]:
    """The rows of one ``iez-counts.*.csv`` file (either header)."""
    return _read(Path(path), (COUNTS_COLUMNS, COUNTS_COLUMNS_V1), COUNTS_TYPES, CountsRow)


def write_trace(path: Path | str, rows: list[dict]) -> None:
    """A trace CSV from row dicts (keys: :data:`TRACE_COLUMNS`), as the library writes it.

    Rows without ``layout`` and ``dir_layout`` keys (synthetic runs, which know
    no directory) are written with the older header: their layouts stay
    unknown rather than claiming a directory without a default.
    """
    columns = TRACE_COLUMNS if any("layout" in r or "dir_layout" in r for r in rows) else TRACE_COLUMNS_V1
    with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([row.get(c, "") if c in ("layout", "dir_layout") else row[c] for c in columns])
