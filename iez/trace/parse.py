"""The paper's C-Parser: per-process traces of one run merged into one write request per file.

Each process of a traced run leaves one ``iez-trace.*.csv`` (files still
named ``.iez-trace.*.csv.tmp`` were never completed and are ignored). For each
path, over the rows of every process:

- ``write_bytes``: the largest ``file_size`` seen at close when any process
  knew it (processes writing disjoint parts of a shared file each see the
  whole file), else the sum of ``bytes_written``;
- ``rank``: the one rank that wrote bytes, or -1 (a shared file) when rows of
  two or more ranks, or of two processes with the same rank (non-MPI
  programs are all rank 0), wrote bytes; when no process wrote bytes through
  the calls traced (``mmap``, ``truncate``), the processes that opened it
  decide by the same rule;
- ``stripe_count``: the most common non-zero value (ties: the larger), 1
  when none is known; ``stripe_size``: the same, None when none is known;
- ``pool`` and ``components`` (the PFL template, :mod:`iez.trace.policy`):
  those of the file's actual layout (the ``layout`` column, Lustre) when a
  row has it (the most common one), else of its directory's default
  (``dir_layout``, the emulation), none when neither is known;
- ``default_layout``: the directory default's canonical template text
  (``dir_layout``, the most common value): ``""`` when the directory had
  none, None when the traces predate the column. The placement library
  applies the file's allocation only while the directory still has it;
- files with ``write_bytes`` 0 are dropped unless ``keep_empty``.

Rows are grouped by their ``job`` column: a directory may collect several
runs, which are separate workloads. Runs without a job id (no scheduler, no
``IEZ_RUN_ID``) all share the id ``""`` and cannot be told apart: trace each
into its own directory.

``iez-counts.*.csv`` files (what each process's creates found in the DB) are
summed per (application, job) into runs: hits, misses and errors added,
earliest start, latest end; skips (creates left to Lustre because the
directory's default had changed) are added up apart from misses.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence, TypeVar

from iez.layout.emulated import parse_attr
from iez.model import Component
from iez.trace.csvformat import CountsRow, TraceRow, read_counts, read_trace
from iez.trace.policy import layout_policy, template_json

TRACE_PREFIX, COUNTS_PREFIX, SUFFIX = "iez-trace.", "iez-counts.", ".csv"
DEFAULT_STRIPE_COUNT = 1  # the library's IEZ_DEFAULT_STRIPE_COUNT default


@dataclass(frozen=True)
class Request:
    """One file the run wrote: a row of the paper's Table I."""

    file: str
    write_bytes: int
    stripe_count: int
    stripe_size: int | None
    rank: int
    pool: str | None = None
    components: tuple[Component, ...] = ()  # the PFL template, without OSTs
    default_layout: str | None = None  # canonical template text of the directory's default; "" none, None unknown
    mirror_count: int = 1  # copies the file had (an FLR layout, or its directory's mirrored default)

    def to_dict(self) -> dict:
        """``file, write_bytes, stripe_count, stripe_size, rank, pool, components`` (the contract's template
        list, or null) and ``default_layout``; ``mirror_count`` when the file had mirrors."""
        out = {"file": self.file, "write_bytes": self.write_bytes, "stripe_count": self.stripe_count,
               "stripe_size": self.stripe_size, "rank": self.rank, "pool": self.pool,
               "components": template_json(self.components), "default_layout": self.default_layout}
        if self.mirror_count > 1:
            out["mirror_count"] = self.mirror_count
        return out


@dataclass(frozen=True)
class RunCounts:
    """One (application, job): how its processes' creates fared."""

    app: str
    job: str
    processes: int
    hits: int
    misses: int
    errors: int
    started: float
    ended: float
    skips: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ParsedRun:
    """Everything one job left in a trace directory."""

    job: str
    requests: list[Request]
    runs: list[RunCounts]
    apps: list[str]  # the distinct ``app`` values of its trace and counts rows


def _files(directory: Path, prefix: str) -> list[Path]:
    return [directory / name for name in sorted(os.listdir(directory))
            if name.startswith(prefix) and name.endswith(SUFFIX)]


def trace_files(directory: Path | str) -> list[Path]:
    return _files(Path(directory), TRACE_PREFIX)


def counts_files(directory: Path | str) -> list[Path]:
    return _files(Path(directory), COUNTS_PREFIX)


def _most_common(values: Iterable[int]) -> int | None:
    counts = Counter(v for v in values if v != 0)
    if not counts:
        return None
    best = max(counts.values())
    return max(v for v, n in counts.items() if n == best)


T = TypeVar("T")


def _most_common_of(values: Sequence[T]) -> T | None:
    """The most common value (ties: the first seen), None for none."""
    if not values:
        return None
    counts = Counter(values)
    best = max(counts.values())
    return next(v for v in values if counts[v] == best)


def _policy(group: Sequence[TraceRow]) -> tuple[str | None, tuple[Component, ...], str | None, int]:
    """``(pool, components, default_layout, mirror_count)`` of one file's rows (rules in the module text; a
    mirrored layout gives its first mirror's policy and its number of mirrors)."""
    rows = sorted(group, key=lambda r: r.open_time)
    default = _most_common_of([r.dir_layout for r in rows if r.dir_layout is not None])
    layout = _most_common_of([r.layout for r in rows if r.layout is not None])
    if layout is None and default:
        layout = parse_attr(default, rows[0].source or "dir_layout")
    pool, components = layout_policy(layout)
    return pool, components, default, layout.mirror_count if layout is not None else 1


def _rank(rows: Sequence[TraceRow]) -> int:
    writers = [r for r in rows if r.bytes_written > 0] or rows
    ranks = {r.rank for r in writers}
    if len(ranks) > 1 or len({(r.host, r.pid) for r in writers}) > 1:
        return -1
    return ranks.pop()


def merge_requests(rows: Iterable[TraceRow], keep_empty: bool = False) -> list[Request]:
    """One request per path from the rows of one run (rules in the module text), sorted by path."""
    by_path: dict[str, list[TraceRow]] = defaultdict(list)
    for row in rows:
        by_path[row.path].append(row)
    requests = []
    for path in sorted(by_path):
        group = by_path[path]
        sizes = [r.file_size for r in group if r.file_size >= 0]
        write_bytes = max(sizes) if sizes else sum(r.bytes_written for r in group)
        if write_bytes == 0 and not keep_empty:
            continue
        pool, components, default, mirrors = _policy(group)
        requests.append(Request(
            file=path,
            write_bytes=write_bytes,
            stripe_count=_most_common(r.stripe_count for r in group) or DEFAULT_STRIPE_COUNT,
            stripe_size=_most_common(r.stripe_size for r in group),
            rank=_rank(group),
            pool=pool,
            components=components,
            default_layout=default,
            mirror_count=mirrors,
        ))
    return requests


def summarise_counts(rows: Iterable[CountsRow]) -> list[RunCounts]:
    """One run per (application, job), in order of first start."""
    groups: dict[tuple[str, str], list[CountsRow]] = defaultdict(list)
    for row in rows:
        groups[(row.app, row.job)].append(row)
    runs = [RunCounts(app, job, len(group), sum(r.hits for r in group), sum(r.misses for r in group),
                      sum(r.errors for r in group), min(r.started for r in group), max(r.ended for r in group),
                      sum(r.skips for r in group))
            for (app, job), group in groups.items()]
    return sorted(runs, key=lambda r: (r.started, r.app, r.job))


def _describe_jobs(jobs: Iterable[str]) -> str:
    return ", ".join(repr(j) for j in sorted(jobs))


class TraceDir:
    """The trace and counts files of one directory, read once."""

    def __init__(self, directory: Path | str):
        self.directory = Path(directory)
        traces, counts = trace_files(self.directory), counts_files(self.directory)
        if not traces and not counts:
            raise ValueError(f"{self.directory}: no {TRACE_PREFIX}*{SUFFIX} or {COUNTS_PREFIX}*{SUFFIX} files "
                             "(was IEZ_TRACE_DIR set to it, and did the processes exit?)")
        self.rows: list[TraceRow] = [row for path in traces for row in read_trace(path)]
        self.counts: list[CountsRow] = [row for path in counts for row in read_counts(path)]

    @property
    def jobs(self) -> list[str]:
        return sorted({r.job for r in self.rows} | {r.job for r in self.counts})

    def run(self, job: str | None = None, keep_empty: bool = False) -> ParsedRun:
        """The requests and runs of ``job``; without it, of the only job here (ValueError listing them if several)."""
        jobs = self.jobs
        if job is None:
            if len(jobs) > 1:
                raise ValueError(f"{self.directory} holds {len(jobs)} jobs ({_describe_jobs(jobs)}): "
                                 "pick one with --job ID")
            job = jobs[0]
        elif job not in jobs:
            raise ValueError(f"{self.directory}: no rows for job {job!r}; jobs here: {_describe_jobs(jobs)}")
        rows = [r for r in self.rows if r.job == job]
        counts = [r for r in self.counts if r.job == job]
        return ParsedRun(job, merge_requests(rows, keep_empty), summarise_counts(counts),
                         sorted({r.app for r in rows} | {r.app for r in counts}))

    def runs_by_job(self, keep_empty: bool = False) -> dict[str, ParsedRun]:
        """Every job here, reported separately."""
        return {job: self.run(job, keep_empty) for job in self.jobs}


def parse_dir(directory: Path | str, job: str | None = None, keep_empty: bool = False) -> ParsedRun:
    return TraceDir(directory).run(job, keep_empty)
