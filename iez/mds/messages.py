"""One agent message: JSON in a single ZeroMQ frame, schema ``iez.oss-stats`` version 1
(``agents/SCHEMA.md``). Anything else is rejected with one of a few causes, so
the service can count drops per cause and keep running."""

from __future__ import annotations

import json

from pydantic import ValidationError

from iez.api.schemas import OssStats

SCHEMA = "iez.oss-stats"
VERSION = 1
MAX_FRAME_BYTES = 4 * 1024 * 1024  # 10,000 OSTs of one OSS fit with room to spare
#: Why a message was dropped; counted per cause.
CAUSES = ("malformed", "version", "invalid", "unknown_oss", "replayed")


class Rejected(ValueError):
    def __init__(self, cause: str, detail: str):
        super().__init__(f"{cause}: {detail}")
        self.cause = cause
        self.detail = detail


def decode(frames: list[bytes]) -> OssStats:
    """The validated message, or :class:`Rejected` saying why not."""
    if len(frames) != 1:
        raise Rejected("malformed", f"{len(frames)} frames; an agent message is one frame")
    frame = frames[0]
    if len(frame) > MAX_FRAME_BYTES:
        raise Rejected("malformed", f"frame of {len(frame)} bytes exceeds {MAX_FRAME_BYTES}")
    try:
        obj = json.loads(frame)
    except (ValueError, UnicodeDecodeError) as err:
        raise Rejected("malformed", f"not JSON ({str(err)[:80]})") from None
    if not isinstance(obj, dict):
        raise Rejected("malformed", f"a JSON {type(obj).__name__}, not an object")
    schema, version = obj.get("schema", SCHEMA), obj.get("version", VERSION)
    if schema != SCHEMA:
        raise Rejected("version", f"schema {str(schema)[:40]!r} is not {SCHEMA!r}")
    if version != VERSION or isinstance(version, bool):
        raise Rejected("version", f"version {str(version)[:20]!r}; this MDS reads version {VERSION}")
    try:
        return OssStats.model_validate(obj)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "message"
        raise Rejected("invalid", f"{where}: {first.get('msg', 'invalid')}"[:200]) from None
