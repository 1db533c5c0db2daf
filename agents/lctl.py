"""Parse the text ``lctl get_param`` prints, and pick out what the agent needs per OST.

``lctl get_param PATTERN…`` prints one ``param.path=value`` line per parameter. Some
values span several lines (``stats=``, ``brw_stats=``, export UUID lists): the value
starts after ``=`` (often empty) and continues on the following lines until the next
line that looks like ``param.path=``. The parser accepts LF or CRLF line ends, blank
lines, and a missing final newline.

The agent reads, per OST:

* ``obdfilter.<ost>.kbytestotal`` / ``kbytesavail``, or the same names under an OSD
  module (``osd-ldiskfs.<ost>.…``, ``osd-zfs.<ost>.…``). When both are present the
  obdfilter value wins (it is what clients are told through statfs).
* ``obdfilter.<ost>.stats``: the ``read_bytes`` and ``write_bytes`` counters. A counter
  line reads ``read_bytes <samples> samples [bytes] <min> <max> <sum> [<sumsq>]``;
  the byte count is ``<sum>``, the third number after the unit (Lustre appends the
  sum of squares when the counter keeps a standard deviation, so "the last number"
  would be wrong on such servers).
* The OST's own state switches, each ``0`` or ``1`` (``lproc_ofd.c`` prints ``%u``):
  ``obdfilter.<ost>.degraded`` (RAID rebuild: Lustre's allocator avoids the OST
  while others fit), ``obdfilter.<ost>.readonly`` (no modification at all;
  Lustre 2.17, LU-12515) and ``obdfilter.<ost>.no_precreate`` (no new objects, the
  ``N`` of ``lfs df``; Lustre 2.13, LU-12025). Older servers lack some of them: a switch not printed is unknown,
  and an unknown switch counts as off. The OST's *state* is the most restrictive
  switch that is on (:data:`STATE_ORDER`).

* ``obdfilter.<ost>.job_stats`` (when ``jobid_var`` is set on the clients): per job id, the ``sum`` of
  its ``read_bytes`` and ``write_bytes`` (:func:`parse_job_stats`). Lustre prints a YAML list, ``job_stats:``
  then per job ``- job_id: <id>`` (quoted or not), ``snapshot_time:`` and one flow mapping per counter,
  ``read_bytes: { samples: N, unit: bytes, min: A, max: B, sum: S, sumsq: Q }``; a counter not printed is 0.
  A job id listed twice in one block (captures that merge two OSTs' blocks) has its sums added.

A parameter printed twice (two ``lctl get_param`` runs concatenated, overlapping
patterns) is a warning, and the later one is used (:func:`latest`), whatever it
is: capacity, counters or a switch. Between different parameters for the same
value the rule above stands (obdfilter over osd-*).

Per-client export parameters (``obdfilter.<ost>.exports.<nid>.*``, IPv4 or IPv6
NIDs, one line or a multi-line ``stats=`` block) are parameters of their own:
their counters are one client's, never the OST's.

MDT, MGS and any other targets are ignored. OST names are ``<fsname>-OST<hex index>``
for any file system name; the index is hexadecimal (``OST000a`` is 10).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from agents import AgentError

__all__ = [
    "Counter",
    "FLAG_STATES",
    "OstReading",
    "STATE_ORDER",
    "Param",
    "ParseError",
    "collect_osts",
    "latest",
    "ost_index",
    "parse_file",
    "parse_stats",
    "parse_job_stats",
    "most_restrictive",
    "parse_text",
    "split_param",
]

#: A line that starts a parameter: ``name=value`` where the name has no blanks.
#: Names may hold NIDs (``exports.10.0.0.1@tcp.uuid``) and dashes (``osd-ldiskfs``), and one IPv6 NID
#: segment (``exports.fd00::5@tcp.stats``, ``exports.::ffff:10.0.0.9@tcp.uuid``): colons, only before an ``@``,
#: so a value line such as ``key: a=b`` never starts a parameter.
_PARAM_LINE = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.@+\-]*?(?:\.[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*@[A-Za-z0-9_.@+\-]*)?)=(.*)$")
#: ``fs-OST0001``: file system name (any), ``-OST``, hexadecimal index.
_OST_TARGET = re.compile(r"^(?P<fsname>[A-Za-z0-9_\-]+)-OST(?P<index>[0-9A-Fa-f]{4,8})$")
_UNSIGNED = re.compile(r"^[0-9]+$")
#: ``name <count> samples [unit] <numbers…>`` (one line of an lprocfs stats block).
_COUNTER_LINE = re.compile(r"^(?P<name>\S+)\s+(?P<count>\S+)\s+samples\s+\[(?P<unit>[^\]]*)\](?P<rest>.*)$")

#: Counters read from ``obdfilter.<ost>.stats``, and the field each one fills.
BYTE_COUNTERS = {"read_bytes": "read_bytes", "write_bytes": "write_bytes"}
CAPACITY_PARAMS = {"kbytestotal": "kbytes_total", "kbytesavail": "kbytes_avail"}
#: ``obdfilter.<ost>.<switch>`` -> the state it puts the OST in when it is 1.
FLAG_STATES = {"degraded": "degraded", "no_precreate": "nocreate", "readonly": "readonly"}
#: OST states from the least to the most restrictive for new stripes. When sources
#: disagree (two switches on, or the OSS and the MDS) the most restrictive wins:
#: degraded still takes stripes when nothing else fits, nocreate takes no new
#: objects, readonly takes no writes at all, and an OST the MDS set inactive is
#: not used by it at all.
STATE_ORDER = ("active", "degraded", "nocreate", "readonly", "inactive")
_STATE_RANK = {state: rank for rank, state in enumerate(STATE_ORDER)}


def most_restrictive(states) -> str:
    """The most restrictive of ``states`` (``active`` when there are none).

    An unknown state is a ValueError naming it: a typo must not pass as active.
    """
    best = "active"
    for state in states:
        if state not in _STATE_RANK:
            raise ValueError(f"unknown OST state {state!r}: expected one of {', '.join(STATE_ORDER)}")
        if _STATE_RANK[state] > _STATE_RANK[best]:
            best = state
    return best


class ParseError(AgentError):
    """Malformed input: names the file (or source) and the 1-based line."""

    def __init__(self, source: str, line: int, message: str) -> None:
        self.source = source
        self.line = line
        self.message = message
        super().__init__(f"{source}:{line}: {message}")


@dataclass
class Param:
    """One parameter: its name, the line it starts on, and its value lines."""

    name: str
    line: int
    source: str
    lines: list[tuple[int, str]] = field(default_factory=list)  # (line number, text)

    def value_lines(self) -> list[tuple[int, str]]:
        """The value's lines without leading and trailing blank lines."""
        lines = list(self.lines)
        while lines and not lines[-1][1].strip():
            lines.pop()
        while lines and not lines[0][1].strip():
            lines.pop(0)
        return lines

    @property
    def value(self) -> str:
        return "\n".join(text for _, text in self.value_lines())

    def where(self, line: int | None = None) -> str:
        return f"{self.source}:{self.line if line is None else line}"


def parse_text(text: str, source: str = "<lctl output>", first_line: int = 1) -> list[Param]:
    """Split ``lctl get_param`` text into parameters, in the order they appear.

    Raises :class:`ParseError` (with ``source:line``) when text appears before the
    first ``name=value`` line, or when the text holds NUL bytes (not text at all).
    """
    params: list[Param] = []
    current: Param | None = None
    raw_lines = text.split("\n")
    if raw_lines and raw_lines[-1] == "":
        raw_lines.pop()  # the final newline, when there is one
    for number, raw in enumerate(raw_lines, start=first_line):
        line = raw[:-1] if raw.endswith("\r") else raw
        if "\x00" in line:
            raise ParseError(source, number, "NUL byte: this is not lctl get_param text")
        match = _PARAM_LINE.match(line)
        if match:
            current = Param(match.group(1), number, source, [(number, match.group(2))])
            params.append(current)
        elif current is not None:
            current.lines.append((number, line))
        elif line.strip():
            shown = line.strip()
            if len(shown) > 60:
                shown = shown[:57] + "..."
            raise ParseError(source, number, f"expected a 'param.path=value' line, found {shown!r}")
    return params


def parse_file(path: str | Path) -> list[Param]:
    """Read and parse a file of saved ``lctl get_param`` output."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise AgentError(f"cannot read lctl output {path}: {err.strerror or err}") from None
    return parse_text(data.decode("utf-8", errors="surrogateescape"), str(path))


def split_param(name: str) -> tuple[str, str, str] | None:
    """``obdfilter.fs-OST0001.kbytesavail`` -> (module, target, leaf) for OST modules.

    Only ``obdfilter`` and ``osd-*`` modules count; other names give None.
    """
    parts = name.split(".", 2)
    if len(parts) != 3:
        return None
    module, target, leaf = parts
    if module != "obdfilter" and not module.startswith("osd-"):
        return None
    return module, target, leaf


def ost_index(target: str) -> tuple[str, int] | None:
    """``fs-OST000a`` -> ("fs", 10); anything that is not an OST gives None."""
    match = _OST_TARGET.match(target)
    if not match:
        return None
    return match.group("fsname"), int(match.group("index"), 16)


@dataclass
class Counter:
    """One line of an lprocfs stats block."""

    name: str
    count: int
    unit: str
    sum: int | None  # None when the line carries no sum (a counter without min/max/sum)
    line: int


def _unsigned(text: str, where: tuple[str, int], what: str) -> int:
    if not _UNSIGNED.match(text):
        raise ParseError(where[0], where[1], f"{what}: expected a non-negative integer, found {text!r}")
    return int(text)


def parse_stats(param: Param, wanted: tuple[str, ...] = tuple(BYTE_COUNTERS)) -> dict[str, Counter]:
    """The counters named in ``wanted`` from a stats block (other lines are skipped).

    A wanted counter line that does not have the lprocfs shape is a :class:`ParseError`.
    Lustre leaves out counters that have no samples, so an idle OST has none.
    """
    counters: dict[str, Counter] = {}
    for number, text in param.lines:
        stripped = text.strip()
        if not stripped:
            continue
        name = stripped.split(None, 1)[0]
        if name not in wanted:
            continue
        where = (param.source, number)
        match = _COUNTER_LINE.match(stripped)
        if not match:
            raise ParseError(*where, f"{param.name}: expected '{name} <count> samples [unit] <min> <max> <sum>', "
                                     f"found {stripped[:80]!r}")
        count = _unsigned(match.group("count"), where, f"{param.name} {name} sample count")
        numbers = [_unsigned(tok, where, f"{param.name} {name}") for tok in match.group("rest").split()]
        if len(numbers) >= 3:
            total: int | None = numbers[2]  # min, max, sum[, sumsq]
        elif count == 0:
            total = 0
        else:
            total = None
        counters[name] = Counter(name, count, match.group("unit"), total, number)
    return counters


_JOB_ID_LINE = re.compile(r"^-\s+job_id:\s*(?P<id>.*?)\s*$")
_JOB_COUNTER_LINE = re.compile(r"^(?P<name>[A-Za-z_]+):\s*\{(?P<body>.*)\}\s*$")


def _job_id(text: str) -> str:
    """A YAML scalar as Lustre prints it: double-quoted (with backslash escapes), single-quoted, or plain."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return json.loads(text) if "\\" in text else text[1:-1]
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    return text


def parse_job_stats(param: Param) -> dict[str, tuple[int, int]]:
    """``{job_id: (read_bytes sum, write_bytes sum)}`` of an ``obdfilter.<ost>.job_stats`` block.

    A job entry's other counters (ops, latencies) and ``snapshot_time`` are skipped; a ``read_bytes`` or
    ``write_bytes`` line that is not a flow mapping with an integer ``sum`` is a :class:`ParseError`.
    """
    jobs: dict[str, list[int]] = {}
    current: list[int] | None = None
    for number, text in param.lines:
        stripped = text.strip()
        if not stripped or stripped == "job_stats:" or stripped.startswith("#"):
            continue
        where = (param.source, number)
        match = _JOB_ID_LINE.match(stripped)
        if match:
            job = _job_id(match.group("id"))
            if not job:
                raise ParseError(*where, f"{param.name}: a job entry without a job id")
            current = jobs.setdefault(job, [0, 0])
            continue
        match = _JOB_COUNTER_LINE.match(stripped)
        if not match or match.group("name") not in BYTE_COUNTERS:
            continue
        if current is None:
            raise ParseError(*where, f"{param.name}: {match.group('name')} before the first '- job_id:'")
        fields = {}
        for item in match.group("body").split(","):
            key, sep, value = item.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if "sum" not in fields:
            raise ParseError(*where, f"{param.name}: {match.group('name')} has no sum: {stripped[:80]!r}")
        total = _unsigned(fields["sum"], where, f"{param.name} {match.group('name')} sum")
        current[0 if match.group("name") == "read_bytes" else 1] += total
    return {job: (r, w) for job, (r, w) in jobs.items()}


def _single_integer(param: Param) -> int:
    lines = param.value_lines()
    if not lines:
        raise ParseError(param.source, param.line, f"{param.name} has no value")
    number, text = lines[0]
    if len(lines) > 1:
        extra_line, extra = lines[1]
        raise ParseError(param.source, extra_line,
                         f"unexpected text after {param.name}={text.strip()}: {extra.strip()[:60]!r}")
    return _unsigned(text.strip(), (param.source, number), param.name)


@dataclass
class OstReading:
    """What the sources said about one OST; capacity may be missing."""

    name: str
    fsname: str
    index: int
    kbytes_total: int | None = None
    kbytes_avail: int | None = None
    read_bytes: int | None = None
    write_bytes: int | None = None
    #: ``{job_id: (read bytes, write bytes)}`` from ``job_stats`` (None: not printed)
    jobs: dict[str, tuple[int, int]] | None = None
    #: the state switches read (``degraded``, ``readonly``, ``no_precreate``); absent = not printed
    flags: dict[str, bool] = field(default_factory=dict)
    #: where each value came from, ``source:line`` (for messages to the operator)
    origin: dict[str, str] = field(default_factory=dict)
    #: rank of the module each capacity value came from (0 = obdfilter, 1 = osd-*)
    _rank: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def complete(self) -> bool:
        return self.kbytes_total is not None and self.kbytes_avail is not None

    @property
    def state(self) -> str:
        """The most restrictive state whose switch is on; ``active`` when none is (or none was read)."""
        return most_restrictive(FLAG_STATES[flag] for flag, on in self.flags.items() if on)


def _used(param: Param) -> bool:
    """A parameter the agent takes a value from (an OST's capacity, stats or switch)."""
    parts = split_param(param.name)
    return parts is not None and ost_index(parts[1]) is not None and \
        (parts[2] in CAPACITY_PARAMS or (parts[0] == "obdfilter" and (parts[2] in ("stats", "job_stats")
                                                                        or parts[2] in FLAG_STATES)))


def latest(params: list[Param], warn=None) -> list[Param]:
    """Each parameter once: a name printed again replaces the earlier value (``warn`` is told, once per name,
    for the parameters the agent uses; captures often repeat others, e.g. export UUID lists)."""
    last: dict[str, Param] = {}
    for param in params:
        earlier = last.pop(param.name, None)  # re-inserted: the order is that of the values used
        if earlier is not None and warn is not None and _used(param):
            warn(f"{param.name} is printed twice ({earlier.where()} and {param.where()}); using the later one")
        last[param.name] = param
    return list(last.values())


def collect_osts(params: list[Param], warn=None) -> dict[str, OstReading]:
    """Group OST parameters by target name (every OST seen, complete or not).

    A parameter printed twice: the later one (:func:`latest`; ``warn`` is told). Capacity: an obdfilter
    value beats an osd-* value; between two osd-* modules the first wins. I/O counters and state switches
    come from ``obdfilter.<ost>.*`` only.
    """
    osts: dict[str, OstReading] = {}
    for param in latest(params, warn):
        parts = split_param(param.name)
        if parts is None:
            continue
        module, target, leaf = parts
        ident = ost_index(target)
        if ident is None:
            continue  # MDT, MGS, …
        ost = osts.setdefault(target, OstReading(target, ident[0], ident[1]))
        if module == "obdfilter" and leaf in FLAG_STATES:
            if leaf not in ost.flags:  # one value per name (latest); the guard is for sources that repeat
                ost.flags[leaf] = _single_integer(param) != 0
                ost.origin[leaf] = param.where()
            continue
        if module == "obdfilter" and leaf == "job_stats":
            ost.jobs = parse_job_stats(param)
            ost.origin["jobs"] = param.where()
            continue
        if leaf not in CAPACITY_PARAMS and not (module == "obdfilter" and leaf == "stats"):
            continue  # the OST exists (e.g. only brw_stats were printed); nothing else to take
        if leaf == "stats":
            for counter in parse_stats(param).values():
                attr = BYTE_COUNTERS[counter.name]
                setattr(ost, attr, counter.sum)
                ost.origin[attr] = param.where(counter.line)
            continue
        attr = CAPACITY_PARAMS[leaf]
        rank = 0 if module == "obdfilter" else 1
        value = _single_integer(param)
        if attr in ost._rank and ost._rank[attr] <= rank:
            continue
        setattr(ost, attr, value)
        ost._rank[attr] = rank
        ost.origin[attr] = param.where()
    return osts
