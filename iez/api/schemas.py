"""Request and response bodies of the REST API, in one place.

Limits follow Lustre and the database: absolute paths up to 4096 bytes, byte
counts below 2^63 (OST sizes up to 2^42 KiB and announced file sizes up to 2^55
bytes, so that the sums the allocator and the DB form stay below 2^63), stripe counts 1..2000 or -1 (all OSTs), OST indices 0..65535,
pool names as Lustre's (up to 15 letters, digits, ``_`` or ``-``). A request's
``components`` is the contract's PFL template (``[{"end", "stripe_count",
"stripe_size", "pool"}, ...]``, checked by :func:`iez.layout.model.components_from_json`);
a bad one is a 422 naming the request, the component and what is wrong.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

from iez.allocate import POLICY_NAMES
from iez.db.models import MAX_PATH_BYTES
from iez.db.requests import RequestIn
from iez.db.stats import OssReport, OstReport
from iez.layout.emulated import canonical_template, parse_attr
from iez.layout.model import components_from_json, request_policy
from iez.lustre_limits import MAX_OST_INDEX, MAX_POOL_NAME, MAX_STRIPE_COUNT
from iez.model import check_pool_name

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
#: The largest OST (4 PiB, in KiB): its bytes, and those of 10,000 such OSTs summed, stay within a 64-bit column.
MAX_OST_KBYTES = 2**42
#: The largest file a request may announce (32 PiB, above Lustre's largest file): 256 of them on one OST
#: still sum within a 64-bit column.
MAX_FILE_BYTES = 2**55


def _encodable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    if "\x00" in text:
        raise ValueError("must not contain a NUL character")
    return text


def _absolute_path(path: str) -> str:
    _encodable(path)
    if not path.startswith("/"):
        raise ValueError("must be an absolute path (start with /)")
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise ValueError(f"must be at most {MAX_PATH_BYTES} bytes long")
    return path


def _stripe_count(count: int) -> int:
    if count != -1 and not 1 <= count <= MAX_STRIPE_COUNT:
        raise ValueError(f"must be 1..{MAX_STRIPE_COUNT}, or -1 for all OSTs")
    return count


def _pool(name: str) -> str:
    try:
        return check_pool_name(name, "@")
    except ValueError as err:
        raise ValueError(str(err).removeprefix("@: ")) from None


def _template(items: list) -> list:
    """The template as given, once :func:`components_from_json` accepts it (extents chained, counts valid)."""
    try:
        components_from_json(items, "@")
    except ValueError as err:
        raise ValueError(str(err).removeprefix("@: ")) from None
    return items


def _default_layout(text: str) -> str:
    """Layout text of the directory default the request was learnt under, kept in canonical form."""
    if text == "":
        return text
    try:
        return canonical_template(parse_attr(text, "@"))
    except ValueError as err:
        raise ValueError(str(err).removeprefix("@: ")) from None


def _json_int(value: object) -> object:
    """What JSON calls an integer: ``5`` or ``5.0``, never ``true`` or ``"5"`` (models are strict)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**64:
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_json_int)]
Text = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^\x00]*$"), AfterValidator(_encodable)]
FilePath = Annotated[str, Field(min_length=1, max_length=MAX_PATH_BYTES, pattern=r"^/[^\x00]*$"),
                     AfterValidator(_absolute_path)]
Bytes = Annotated[JsonInt, Field(ge=0, le=INT64_MAX)]
Percent = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
StripeCount = Annotated[JsonInt, Field(ge=-1, le=MAX_STRIPE_COUNT), AfterValidator(_stripe_count), WithJsonSchema(
    {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_STRIPE_COUNT}, {"const": -1}],
     "description": f"1..{MAX_STRIPE_COUNT}, or -1 for all OSTs"})]

#: Unknown fields refused, and no coercion (``false`` is not 0, ``"1"`` is not 1): the OpenAPI types are exact.
Strict = ConfigDict(extra="forbid", strict=True)


class OstStats(BaseModel):
    model_config = Strict
    name: Text = Field(description="Lustre target name, e.g. fs-OST0001")
    index: JsonInt = Field(ge=0, le=MAX_OST_INDEX, description="OST index (1 for OST0001)")
    kbytes_total: JsonInt = Field(gt=0, le=MAX_OST_KBYTES, description="KiB, at most 2^42 (4 PiB)")
    kbytes_avail: JsonInt = Field(ge=0, le=MAX_OST_KBYTES, description="KiB, at most kbytes_total")
    read_bytes: Bytes | None = None
    write_bytes: Bytes | None = None
    # message version 2 (agents/SCHEMA.md): the state the OSS reports, and the switches it read
    state: Literal["active", "degraded", "nocreate", "readonly"] | None = None
    degraded: bool | None = None
    no_precreate: bool | None = None
    readonly: bool | None = None

    @model_validator(mode="after")
    def _avail_within_total(self) -> "OstStats":
        if self.kbytes_avail > self.kbytes_total:
            raise ValueError(f"kbytes_avail={self.kbytes_avail} exceeds kbytes_total={self.kbytes_total}")
        return self


#: Jobs one OST's entry of ``job_stats`` may list, and OSTs it may list (as iez.mds.messages).
MAX_JOBS_PER_OST = 32
MAX_JOB_OSTS = 1024


class JobBytes(BaseModel):
    model_config = Strict
    job_id: Text = Field(description="Lustre job id (jobid_var / jobid_name), e.g. the Slurm job id")
    read_bytes: Bytes = Field(description="cumulative sum of the job's read_bytes on the OST (job_stats)")
    write_bytes: Bytes = Field(description="cumulative sum of the job's write_bytes on the OST (job_stats)")


class OstJobs(BaseModel):
    model_config = Strict
    index: JsonInt = Field(ge=0, le=MAX_OST_INDEX, description="an OST of osts")
    jobs: list[JobBytes] = Field(max_length=MAX_JOBS_PER_OST)


class OssStats(BaseModel):
    """The message an OSS agent publishes (``iez-agent --json``)."""

    model_config = ConfigDict(extra="ignore", strict=True)  # agents may add fields; we keep what we know
    oss_id: Text
    seq: Bytes
    time: Annotated[datetime, WithJsonSchema({"anyOf": [{"type": "string", "format": "date-time"},
                                                         {"type": "number"}]})] = Field(
        strict=False, description="sample time: Unix seconds or ISO 8601")
    cpu_pct: Percent
    mem_pct: Percent
    osts: list[OstStats] = Field(default_factory=list, max_length=10000)
    version: Literal[1, 2] = Field(default=1, description="message schema version (agents/SCHEMA.md)")
    interval_s: float | None = Field(default=None, gt=0, le=86400, allow_inf_nan=False,
                                     description="the agent's report interval")
    job_stats: list[OstJobs] | None = Field(default=None, max_length=MAX_JOB_OSTS,
                                            description="per OST, its top jobs' cumulative bytes (agents/SCHEMA.md)")

    @model_validator(mode="after")
    def _distinct_osts(self) -> "OssStats":
        indices = [ost.index for ost in self.osts]
        if len(set(indices)) != len(indices):
            raise ValueError("osts: an OST index appears twice")
        for n, ost in enumerate(self.osts):  # the same rules as iez.mds.messages.decode
            v2_fields = (ost.state, ost.degraded, ost.no_precreate, ost.readonly)
            if self.version == 1 and any(value is not None for value in v2_fields):
                raise ValueError(f"osts.{n}: state, degraded, no_precreate, readonly are version-2 fields; "
                                 "this message is version 1")
            if self.version == 2 and ost.state is None:
                raise ValueError(f"osts.{n}.state: required in version 2")
        seen: set[int] = set()
        for n, entry in enumerate(self.job_stats or ()):
            if entry.index not in indices:
                raise ValueError(f"job_stats.{n}.index: OST {entry.index} is not in osts")
            if entry.index in seen:
                raise ValueError(f"job_stats.{n}.index: OST {entry.index} appears twice")
            seen.add(entry.index)
            if len({job.job_id for job in entry.jobs}) != len(entry.jobs):
                raise ValueError(f"job_stats.{n}.jobs: a job id appears twice")
        return self

    def naive_utc_time(self) -> datetime:
        if self.time.tzinfo is None:
            return self.time
        return self.time.astimezone(timezone.utc).replace(tzinfo=None)

    def to_report(self) -> OssReport:
        return OssReport(oss_id=self.oss_id, seq=self.seq, time=self.naive_utc_time(), cpu_pct=self.cpu_pct,
                         mem_pct=self.mem_pct,
                         osts=[OstReport(**{**ost.model_dump(), "state": ost.state or "active"}) for ost in self.osts],
                         interval_s=self.interval_s,
                         jobs=None if self.job_stats is None else
                         {e.index: [(j.job_id, j.read_bytes, j.write_bytes) for j in e.jobs] for e in self.job_stats})


class StatsStored(BaseModel):
    oss_id: str
    osts: int


#: The PFL template's JSON Schema. What it cannot say: each component starts where the one before ends
#: (``start``, when given, must be that), and only the last may have ``end`` -1.
TEMPLATE_SCHEMA = {"type": "array", "minItems": 1, "maxItems": 64, "items": {
    "type": "object", "required": ["end"], "additionalProperties": False, "properties": {
        "start": {"type": "integer", "minimum": 0},
        "end": {"type": "integer", "minimum": -1, "description": "bytes; -1: the end of the file"},
        "stripe_count": {"type": "integer", "minimum": -1},
        "stripe_size": {"type": "integer", "minimum": 1},
        "pool": {"type": "string", "pattern": f"^[A-Za-z0-9_-]{{1,{MAX_POOL_NAME}}}$"},
        "osts": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "pattern": {"enum": ["raid0", "mdt", "dom", None]},
        "overstriping": {"type": "boolean"}}}}


class WriteRequestIn(BaseModel):
    model_config = Strict
    file: FilePath
    write_bytes: JsonInt = Field(ge=0, le=MAX_FILE_BYTES, description="bytes the file will receive, at most 2^55 (32 PiB)")
    stripe_count: StripeCount
    rank: JsonInt = Field(default=0, ge=-1, le=INT32_MAX, description="MPI rank; -1 for a file several ranks share")
    stripe_size: JsonInt | None = Field(default=None, gt=0, le=INT64_MAX)
    source: Literal["traced", "predicted", "darshan"] = "predicted"
    pool: Annotated[str, AfterValidator(_pool)] | None = Field(default=None, description="the file's OST pool")
    components: Annotated[list[dict], Field(min_length=1, max_length=64), AfterValidator(_template),
                          WithJsonSchema(TEMPLATE_SCHEMA)] | None = Field(
        default=None, description="PFL template: [{end (-1: end of file), stripe_count, stripe_size, pool}, ...]")
    default_layout: Annotated[str, Field(max_length=65536), AfterValidator(_default_layout)] | None = Field(
        default=None, description="layout text of the directory default the request was learnt under ('' none)")
    mirror_count: JsonInt = Field(default=1, ge=1, le=4,
                                  description="copies of the file (Lustre FLR mirrors), each in its own failure domains")

    def stored(self) -> RequestIn:
        """The request as the DB stores it: the one place the API's request becomes a row's values (its pool and
        template checked and parsed as every stored request's are)."""
        values = self.model_dump()
        values["pool"], values["components"] = request_policy(self.pool, self.components, self.file)
        return RequestIn(**values)


class RequestsIn(BaseModel):
    model_config = Strict
    app: Text
    fingerprint: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$",
                                    description="SHA-256 hex of executable, arguments and working directory")
    owner: Text | None = Field(default=None, description="the user who owns the application (service credential "
                               "only; a user's requests make the application theirs)")
    requests: list[WriteRequestIn] = Field(max_length=100000)


class RequestIds(BaseModel):
    ids: list[int]


class AllocateIn(BaseModel):
    model_config = Strict
    app: Text
    policy: Literal[POLICY_NAMES] = "iez"  # type: ignore[valid-type]
    seed: JsonInt = Field(default=0, ge=0, le=INT32_MAX)
    fill_cap: float = Field(default=0.95, gt=0, le=1, description="no OST is pushed past this fill")
    fill_weight: float = Field(default=0.0, ge=0, le=10,
                               description="share of the job's I/O time that may be given up to even out fill")
    ost_bandwidth_mib_s: float = Field(default=200.0, gt=0, le=1e9)
    oss_bandwidth_mib_s: float = Field(default=600.0, gt=0, le=1e9)


# One allocation on the wire: iez.model.Allocation.to_json(), key for key (the routes validate that dict into it,
# so the answer of POST /v1/allocate is the lookups' own).
class Layout(BaseModel):
    file: str
    stripe_size: int
    stripe_count: int
    osts: list[int]
    pool: str | None = Field(default=None, description="present when the layout has a pool")
    components: list[dict] | None = Field(
        default=None, description="present for a composite (PFL) layout: {start, end, stripe_size, stripe_count, "
        "osts} per component")
    note: str | None = Field(default=None, description="present when the policy had to give something up for "
                             "the file, e.g. a degraded OST used because no other could take it")
    mirrors: list[list[dict]] | None = Field(
        default=None, description="present for a mirrored (FLR) file: every copy as its list of components, the "
        "first one also in the plain fields")
    preferred_mirror: int | None = Field(default=None, description="with mirrors: the copy reads prefer (0-based)")
    stale_mirrors: list[int] | None = Field(default=None, description="with mirrors: copies not yet resynced")


class RefusedFile(BaseModel):
    file: str
    reason: str


class Allocations(BaseModel):
    allocations: list[Layout]
    refused: list[RefusedFile] = []


class LookupIn(BaseModel):
    model_config = Strict
    paths: list[FilePath] = Field(max_length=100000)


class LookupOut(BaseModel):
    allocations: list[Layout]
    missing: list[str]


class FieldProblem(BaseModel):
    field: str = Field(description="where in the request, e.g. requests[0].write_bytes")
    message: str


class Problem(BaseModel):
    """Every error answer: what is wrong in one line; ``errors`` per field for an invalid request (422)."""

    detail: str
    errors: list[FieldProblem] | None = None


class HealthPart(BaseModel):
    ok: bool
    detail: str | None = Field(default=None, description="what is wrong, when not ok")
    free_bytes: int | None = Field(default=None, description="disk: bytes free where the SQLite file is")


class Health(BaseModel):
    status: Literal["ok", "unhealthy"]
    db: str
    checks: dict[str, HealthPart] = Field(description="reachable, writable and (SQLite) disk")
    seconds: float | None = None
    detail: str | None = Field(default=None, description="the unhealthy parts and why, when not ok")


class OstOut(BaseModel):
    """One OST as ``GET /v1/osts`` lists it."""

    index: int
    name: str
    oss_id: str
    kbytes_total: int
    kbytes_avail: int
    bytes_reserved: int = Field(description="what iez's live allocations hold on it until the reports show it written")
    read_bytes: int | None = Field(description="the OST's cumulative counter; null when its OSS does not send it")
    write_bytes: int | None
    sample_time: str = Field(description="when its OSS measured it (ISO 8601, UTC)")
    state: str = Field(description="the most restrictive of what its OSS and the MDS say (active, degraded, ...)")
    pools: list[str]
    reserved_kbytes: int = Field(description="what Lustre keeps back (osp.*.reserved_mb_low)")


class OstsOut(BaseModel):
    osts: list[OstOut]


class OssOut(BaseModel):
    """One OSS as ``GET /v1/oss`` lists it; ``stale`` by the one freshness rule (:mod:`iez.freshness`)."""

    oss_id: str
    seq: int
    cpu_pct: float | None
    mem_pct: float | None
    sample_time: str
    received: str
    stale: bool
    age_s: float = Field(description="seconds since its last accepted report")
    osts: int


class OssListOut(BaseModel):
    oss: list[OssOut]


class RunOut(BaseModel):
    id: int
    started: str
    ended: str | None
    files_found: int | None
    files_missed: int | None
    files_skipped: int | None


class AppOut(BaseModel):
    """``GET /v1/apps/{name}``: an application, its requests (each with its live allocation or null) and runs."""

    name: str
    owner: str | None
    fingerprint: str | None
    created: str
    requests: list[dict] = Field(description="id, file, write_bytes, stripe_count, stripe_size, rank, source, "
                                             "pool/components, default_layout, allocation (null: pending)")
    pending: int
    runs: list[RunOut]
