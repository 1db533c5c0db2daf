"""The message an agent publishes (schema ``iez.oss-stats``, version 2; see SCHEMA.md).

One message per interval: OSS identity, a sequence number, the sample time, CPU and
memory utilisation, and one entry per OST with its capacity, I/O counters and
state (version 2: ``active``, ``degraded``, ``nocreate`` or ``readonly``, from the
OST's own switches). Encoded as one UTF-8 JSON object.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable

from agents import AgentError
from agents.lctl import FLAG_STATES, OstReading, ost_index

__all__ = [
    "LimitError",
    "MAX_FRAME_BYTES",
    "MAX_OSTS",
    "SCHEMA",
    "VERSION",
    "Sequencer",
    "build_message",
    "encode",
    "select_osts",
    "job_entries",
    "TOP_JOBS",
]

SCHEMA = "iez.oss-stats"
VERSION = 2
INT64_MAX = 2**63 - 1
MAX_OST_INDEX = 65535
#: The schema's limits, which the MDS enforces by dropping the whole message: the agent checks them first.
MAX_OSTS = 10_000
MAX_TEXT = 255  # oss_id, host, OST names
MAX_FRAME_BYTES = 4 * 1024 * 1024  # the MDS's iez.mds.messages.MAX_FRAME_BYTES
MAX_OST_KBYTES = 2**42  # 4 PiB: the MDS's and the API's bound on an OST's size
#: Jobs published per OST: the K with the most bytes (read + written) in its ``job_stats``. Bounds the
#: message (10,000 OSTs x 32 jobs still fits a frame only for short ids; the agent checks the frame) and
#: the MDS's job series; a site with more jobs per OST sees its heaviest.
TOP_JOBS = 32
#: OSTs whose jobs one message lists (the readers' bound): those with the most job bytes.
MAX_JOB_OSTS = 1024


class LimitError(AgentError):
    """A message the MDS would drop (too many OSTs, a name too long, a frame too big): the agent stops."""


class Sequencer:
    """``seq`` values: a time-based start (Unix milliseconds), then +1 per message.

    An agent that restarts starts again from the clock, which is ahead of every
    value the previous run used (it sent at most one message per second), so the
    MDS sees ``seq`` keep increasing for an OSS across restarts.
    """

    def __init__(self, start: int | None = None) -> None:
        self._next = int(time.time() * 1000) if start is None else int(start)

    def next(self) -> int:
        value = self._next
        self._next += 1
        return value


def select_osts(readings: dict[str, OstReading], *, wanted: Iterable[str] = (), fsname: str | None = None,
                warn: Callable[[str], None] = lambda _msg: None) -> list[dict]:
    """The OST entries of a message, sorted by file system and index.

    ``wanted``: the OSTs declared for this OSS (others are left out; declared ones
    that are missing or incomplete produce a warning). ``fsname``: keep one file
    system. OSTs without both capacity values, with zero capacity or an index
    above 65535 are left out with a warning. Each entry carries the OST's
    ``state`` and its switches as read (``degraded``, ``readonly``,
    ``no_precreate``: true, false, or null when the source did not print it). Two OSTs with the same index (two
    file systems on one OSS) are an error: the MDS keys OSTs by index.
    """
    by_key = {(r.fsname, r.index): r for r in readings.values()}
    chosen: list[OstReading] = []
    if wanted:
        for name in dict.fromkeys(wanted):
            ident = ost_index(name)
            reading = by_key.get(ident) if ident else None
            if reading is None:
                warn(f"declared OST {name} not found")
            elif reading not in chosen:
                chosen.append(reading)
    else:
        chosen = list(readings.values())
    if fsname:
        chosen = [r for r in chosen if r.fsname == fsname]

    entries: list[dict] = []
    owner: dict[int, str] = {}
    for r in sorted(chosen, key=lambda r: (r.fsname, r.index)):
        if not r.complete:
            missing = " and ".join(p for p, v in (("kbytestotal", r.kbytes_total), ("kbytesavail", r.kbytes_avail))
                                   if v is None)
            warn(f"skipping {r.name}: no {missing}")
            continue
        if r.kbytes_total == 0:
            warn(f"skipping {r.name}: kbytestotal is 0 ({r.origin.get('kbytes_total', '?')})")
            continue
        if r.index > MAX_OST_INDEX:
            warn(f"skipping {r.name}: OST index {r.index} is above {MAX_OST_INDEX}")
            continue
        if r.index in owner:
            raise AgentError(f"{owner[r.index]} and {r.name} have the same OST index {r.index}; "
                             f"choose one file system with fsname= or list the OSTs with osts=")
        owner[r.index] = r.name
        total = min(r.kbytes_total, INT64_MAX)  # type: ignore[type-var]
        avail = r.kbytes_avail
        if avail > total:  # type: ignore[operator]
            warn(f"{r.name}: kbytesavail {avail} exceeds kbytestotal {total}; reporting {total}")
            avail = total
        entry = {"name": r.name, "index": r.index, "kbytes_total": total, "kbytes_avail": avail}
        for key in ("read_bytes", "write_bytes"):
            value = getattr(r, key)
            entry[key] = value if value is None or value <= INT64_MAX else None
        entry["state"] = r.state
        for flag in FLAG_STATES:
            entry[flag] = r.flags.get(flag)
        entries.append(entry)
    return entries


def job_entries(readings: dict[str, OstReading], osts: list[dict], top: int = TOP_JOBS) -> list[dict] | None:
    """The ``job_stats`` field: per published OST whose ``job_stats`` were read, its ``top`` jobs by bytes
    ``[{"index", "jobs": [{"job_id", "read_bytes", "write_bytes"}]}]`` (heaviest first, ties by id); None when
    no OST printed ``job_stats`` (the field is then left out). Job ids longer than 255 characters are cut."""
    by_name = {r.name: r for r in readings.values()}
    out, seen = [], False
    for entry in osts:
        r = by_name.get(entry["name"])
        if r is None or r.jobs is None:
            continue
        seen = True
        ranked = sorted(r.jobs.items(), key=lambda kv: (-(kv[1][0] + kv[1][1]), kv[0]))[:top]
        jobs = [{"job_id": job[:MAX_TEXT], "read_bytes": min(rb, INT64_MAX), "write_bytes": min(wb, INT64_MAX)}
                for job, (rb, wb) in ranked]
        out.append({"index": entry["index"], "jobs": jobs})
    if len(out) > MAX_JOB_OSTS:  # the OSTs with the most job bytes, in the message's OST order
        keep = sorted(range(len(out)), key=lambda k: -sum(j["read_bytes"] + j["write_bytes"] for j in out[k]["jobs"]))
        out = [out[k] for k in sorted(keep[:MAX_JOB_OSTS])]
    return out if seen else None


def check_limits(*, oss_id: str, host: str, osts: list[dict]) -> None:
    """:class:`LimitError` naming the first of the schema's limits the message would break."""
    if len(osts) > MAX_OSTS:
        raise LimitError(f"this OSS has {len(osts)} OSTs; a message holds at most {MAX_OSTS} (agents/SCHEMA.md): "
                         f"split them over several agents with osts= or fsname=")
    for o in osts:
        if o["kbytes_total"] > MAX_OST_KBYTES:
            raise LimitError(f"{o['name']}: kbytestotal {o['kbytes_total']} KiB is above the schema's "
                             f"{MAX_OST_KBYTES} (4 PiB)")
    for what, text in (("oss_id", oss_id), ("host", host), *(("OST name", o["name"]) for o in osts)):
        if not 1 <= len(text) <= MAX_TEXT:
            raise LimitError(f"{what} {text[:40]!r}{'...' if len(text) > 40 else ''} is {len(text)} characters; "
                             f"the schema allows 1..{MAX_TEXT}")


def build_message(*, oss_id: str, host: str, seq: int, sample_time: float, interval_s: float,
                  cpu_pct: float, mem_pct: float, osts: list[dict], source: str,
                  job_stats: list[dict] | None = None) -> dict:
    """A version-2 message (field order as in SCHEMA.md); :class:`LimitError` when the MDS would drop it."""
    check_limits(oss_id=oss_id, host=host, osts=osts)
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "oss_id": oss_id,
        "host": host,
        "seq": seq,
        "time": round(sample_time, 3),
        "interval_s": int(interval_s) if float(interval_s).is_integer() else interval_s,
        "cpu_pct": cpu_pct,
        "mem_pct": mem_pct,
        "source": source,
        "osts": osts,
        **({"job_stats": job_stats} if job_stats is not None else {}),
    }


def encode(message: dict) -> bytes:
    """Compact UTF-8 JSON, one object (no NaN or infinity); :class:`LimitError` past the MDS's frame limit."""
    data = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    if len(data) > MAX_FRAME_BYTES:
        raise LimitError(f"the message is {len(data)} bytes; the MDS takes at most {MAX_FRAME_BYTES}")
    return data
