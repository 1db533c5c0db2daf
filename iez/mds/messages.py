"""One agent message: JSON in a single ZeroMQ frame, schema ``iez.oss-stats`` version 2
or 1 (``agents/SCHEMA.md``; version 1 has no OST state, and its OSTs are read as ``active``). Anything else is rejected with one of a few causes, so
the service can count drops per cause and keep running.

The rules are those of the REST API's :class:`iez.api.schemas.OssStats` in
strict mode (``tests/mds`` compares the two on random messages), expressed as
msgspec structs: msgspec parses and checks a typical 8-OST message in about
8 µs where pydantic takes over 100 µs, and the MDS must take 10,000 messages
a second (``benchmarks/mds_bench.py``). JSON types are taken as they are: a
number sent as a string is invalid here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Literal, Union

import msgspec

from iez.db.stats import OssReport
from iez.errors import InputError
from iez.lustre_limits import MAX_OST_INDEX

SCHEMA = "iez.oss-stats"
VERSION = 2
VERSIONS = (1, 2)
#: The states an agent reports (``inactive`` is the MDS's own, from ``osp.*.active``).
AGENT_STATES = ("active", "degraded", "nocreate", "readonly")
#: OST fields version 2 added; a version-1 message must not carry them.
V2_OST_FIELDS = ("state", "degraded", "no_precreate", "readonly")
MAX_FRAME_BYTES = 4 * 1024 * 1024  # 10,000 OSTs of one OSS fit with room to spare
INT64_MAX = 2**63 - 1
MAX_OST_KBYTES = 2**42  # 4 PiB, as the API's schema: a claim of 2^50 KiB free must not steer placement
#: Why a message was dropped; counted per cause. ``wrong_key``: its ``oss_id`` is not the one its CURVE key
#: is bound to; ``future``: its ``time`` is further ahead of the MDS clock than the allowed skew.
CAUSES = ("malformed", "version", "invalid", "unknown_oss", "replayed", "wrong_key", "future")
#: Why one OST of an accepted message was left out; counted per cause. ``other_fs``: another file system
#: than the MDS's; ``conflict``: its index is held by another OSS that is still fresh; ``bad_name``: the
#: name is not ``FS-OSTxxxx`` with the message's index.
OST_CAUSES = ("other_fs", "conflict", "bad_name")

Text = Annotated[str, msgspec.Meta(min_length=1, max_length=255)]
Count = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
Percent = Annotated[float, msgspec.Meta(ge=0, le=100)]
#: Jobs one OST's entry of ``job_stats`` may list (agents send their top 32, agents.message.TOP_JOBS), and OSTs
#: ``job_stats`` may list: at most 32,768 jobs (~1.6 MB of JSON) a message.
MAX_JOBS_PER_OST = 32
MAX_JOB_OSTS = 1024


class Ost(msgspec.Struct, forbid_unknown_fields=True):
    """One OST of a message; the attribute names are :class:`iez.db.stats.OstReport`'s."""

    name: Text
    index: Annotated[int, msgspec.Meta(ge=0, le=MAX_OST_INDEX)]
    kbytes_total: Annotated[int, msgspec.Meta(gt=0, le=MAX_OST_KBYTES)]
    kbytes_avail: Annotated[int, msgspec.Meta(ge=0, le=MAX_OST_KBYTES)]
    read_bytes: Union[Count, None] = None
    write_bytes: Union[Count, None] = None
    # version 2: the state the OSS reports (required there), and the switches it read
    state: Union[Literal["active", "degraded", "nocreate", "readonly"], None] = None
    degraded: Union[bool, None] = None
    no_precreate: Union[bool, None] = None
    readonly: Union[bool, None] = None


class Job(msgspec.Struct, forbid_unknown_fields=True):
    job_id: Text
    read_bytes: Count
    write_bytes: Count


class OstJobs(msgspec.Struct, forbid_unknown_fields=True):
    """One element of the optional top-level ``job_stats``: an OST of ``osts`` and its jobs' cumulative bytes."""

    index: Annotated[int, msgspec.Meta(ge=0, le=MAX_OST_INDEX)]
    jobs: Annotated[list[Job], msgspec.Meta(max_length=MAX_JOBS_PER_OST)]


class Message(msgspec.Struct):
    oss_id: Text
    seq: Count
    time: Union[float, datetime]  # Unix seconds or ISO 8601
    cpu_pct: Percent
    mem_pct: Percent
    osts: Annotated[list[Ost], msgspec.Meta(max_length=10_000)] = []
    interval_s: Union[Annotated[float, msgspec.Meta(gt=0, le=86400)], None] = None
    job_stats: Union[Annotated[list[OstJobs], msgspec.Meta(max_length=MAX_JOB_OSTS)], None] = None
    schema: Any = SCHEMA  # checked by hand, so a wrong one is a "version" drop
    version: Any = VERSION


_decoder = msgspec.json.Decoder(Message)
#: The integer fields, where JSON's ``5.0`` is the integer 5 (as the API's ``JsonInt``).
_INT_FIELDS = frozenset(("seq", "index", "kbytes_total", "kbytes_avail", "read_bytes", "write_bytes"))


def _json_ints(value: Any, key: str = "") -> Any:
    """``value`` with every integral float in an integer field made an int: what JSON calls an integer."""
    if isinstance(value, dict):
        return {k: _json_ints(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_ints(v, key) for v in value]
    if key in _INT_FIELDS and isinstance(value, float) and value.is_integer() and abs(value) < 2**64:
        return int(value)
    return value


class Rejected(InputError):
    def __init__(self, cause: str, detail: str):
        super().__init__(f"{cause}: {detail}")
        self.cause = cause
        self.detail = detail


def _invalid(detail: str) -> Rejected:
    return Rejected("invalid", detail[:200])


def _naive_utc(value: float | datetime) -> datetime:
    try:
        if isinstance(value, datetime):
            return value.astimezone(timezone.utc).replace(tzinfo=None) if value.tzinfo else value
        return datetime.fromtimestamp(value, timezone.utc).replace(tzinfo=None)
    except (ValueError, OverflowError, OSError):
        raise _invalid("time: must be Unix seconds or an ISO 8601 time") from None


def _unicode(text: str, where: str) -> None:
    if "\x00" in text:  # as the API's Text (a C string in the DB and the preload library ends there)
        raise _invalid(f"{where}: must not contain a NUL character")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise _invalid(f"{where}: must be valid Unicode text (no lone surrogates)") from None


def decode(frames: list[bytes]) -> OssReport:
    """The validated report, or :class:`Rejected` saying why not."""
    if len(frames) != 1:
        raise Rejected("malformed", f"{len(frames)} frames; an agent message is one frame")
    frame = frames[0]
    if len(frame) > MAX_FRAME_BYTES:
        raise Rejected("malformed", f"frame of {len(frame)} bytes exceeds {MAX_FRAME_BYTES}")
    if frame.lstrip()[:1] != b"{":
        raise Rejected("malformed", "not a JSON object")
    try:
        msg = _decoder.decode(frame)
    except msgspec.ValidationError as err:
        if "got `float`" not in str(err):
            raise _invalid(str(err)) from None
        # rare, so off the fast path: an integer written as 5.0, which JSON (and the API) reads as 5
        try:
            msg = msgspec.convert(_json_ints(msgspec.json.decode(frame)), Message)
        except msgspec.ValidationError as again:
            raise _invalid(str(again)) from None
    except msgspec.DecodeError as err:
        raise Rejected("malformed", f"not JSON ({str(err)[:80]})") from None
    if msg.schema != SCHEMA:
        raise Rejected("version", f"schema {str(msg.schema)[:40]!r} is not {SCHEMA!r}")
    if type(msg.version) is not int or msg.version not in VERSIONS:
        raise Rejected("version", f"version {str(msg.version)[:20]!r}; this MDS reads versions 1 and 2")
    _unicode(msg.oss_id, "oss_id")
    seen = set()
    for n, ost in enumerate(msg.osts):
        if ost.kbytes_avail > ost.kbytes_total:
            raise _invalid(f"osts.{n}: kbytes_avail={ost.kbytes_avail} exceeds kbytes_total={ost.kbytes_total}")
        _unicode(ost.name, f"osts.{n}.name")
        if msg.version == 1:
            if ost.state is not None or ost.degraded is not None or ost.no_precreate is not None \
                    or ost.readonly is not None:
                raise _invalid(f"osts.{n}: {', '.join(V2_OST_FIELDS)} are version-2 fields; this message is version 1")
            ost.state = "active"
        elif ost.state is None:
            raise _invalid(f"osts.{n}.state: required in version 2 (one of {', '.join(AGENT_STATES)})")
        seen.add(ost.index)
    if len(seen) != len(msg.osts):
        raise _invalid("osts: an OST index appears twice")
    jobs = None
    if msg.job_stats is not None:
        jobs = {}
        for n, entry in enumerate(msg.job_stats):  # the same rules as iez.api.schemas.OssStats
            if entry.index not in seen:
                raise _invalid(f"job_stats.{n}.index: OST {entry.index} is not in osts")
            if entry.index in jobs:
                raise _invalid(f"job_stats.{n}.index: OST {entry.index} appears twice")
            ids = set()
            for k, job in enumerate(entry.jobs):
                _unicode(job.job_id, f"job_stats.{n}.jobs.{k}.job_id")
                ids.add(job.job_id)
            if len(ids) != len(entry.jobs):
                raise _invalid(f"job_stats.{n}.jobs: a job id appears twice")
            jobs[entry.index] = [(job.job_id, job.read_bytes, job.write_bytes) for job in entry.jobs]
    return OssReport(msg.oss_id, msg.seq, _naive_utc(msg.time), msg.cpu_pct, msg.mem_pct, msg.osts, msg.interval_s,
                     jobs)
