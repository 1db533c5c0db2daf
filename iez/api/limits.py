"""The request body limit, enforced before a byte of an oversized body is read.

A body is refused with 413 as soon as it is known to be too large: at once when
its ``Content-Length`` says so (the body is never read; the connection is closed
after the answer, so the client stops sending), and for a chunked body when the
bytes counted while it streams in pass the limit. This layer sits outside the
lookup fast path (:mod:`iez.api.fastpath`) and every route, so nothing reads
more than the limit.

The default, 64 MiB, holds 100,000 write requests in one ``POST /v1/requests``
with room to spare: a request such as ``{"file": "/lustre/project/run/out.000001",
"write_bytes": 1073741824, "stripe_count": 4, "rank": 17}`` takes about 100 bytes
plus its path, so 100,000 of them fit in 64 MiB with paths up to about 500 bytes
(and 100,000 lookup paths of up to about 650 bytes in ``POST /v1/allocations/lookup``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.exceptions import HTTPException

from iez.config import DEFAULT_MAX_BODY as DEFAULT_MAX_BODY  # the default lives with the setting
from iez.config import Settings
from iez.config import parse_size as parse_size  # `iez api --max-body` parses with it too
from iez.errors import InputError, StorageUnavailable

ENV_MAX_BODY = "IEZ_API_MAX_BODY"


def max_body_from_env(env: dict[str, str] | None = None) -> int:
    """``IEZ_API_MAX_BODY`` in bytes (default 64 MiB; :class:`iez.config.Settings`)."""
    return Settings.from_env(env=env).api_max_body


class BodyTooLarge(HTTPException, InputError):
    """Raised from ``receive`` once a streamed body passes the limit: routes answer it as a 413."""

    def __init__(self, limit: int):
        super().__init__(413, too_large(limit))


def too_large(limit: int) -> str:
    return f"request body larger than the limit of {limit} bytes (IEZ_API_MAX_BODY, iez api --max-body)"


_CLOSE = (b"connection", b"close")


class BodiesBusy(HTTPException, StorageUnavailable):
    """Raised from ``receive`` when a streamed body would take the large bodies in flight past their budget."""

    def __init__(self, budget: int):
        super().__init__(503, busy(budget), headers={"Retry-After": "1"})


def busy(budget: int) -> str:
    return (f"too many large request bodies at once (more than {budget} bytes in flight, twice IEZ_API_MAX_BODY): "
            "retry in a moment")


#: Bodies up to this size are never held back by the budget (lookups, statistics, most requests).
SMALL_BODY = 256 * 1024


class BodyLimit:
    """Pure ASGI middleware: 413 for a body over ``limit`` bytes, before it is read; 503 for a large body that
    would take those in flight past ``2 * limit`` bytes (the memory a worker gives bodies and what is parsed
    from them while they are served), so concurrent maximal bodies cannot exhaust it either."""

    def __init__(self, app, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.budget = 2 * limit
        self.in_flight = 0  # bytes of large bodies being received or served (one event loop: no lock)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None:
            if not declared.strip().isdigit():
                await refuse(send, 400, f"Content-Length {declared.decode('latin-1')!r} is not a byte count")
                return
            if int(declared) > self.limit:
                await refuse(send, 413, too_large(self.limit))
                return
        held = int(declared) if declared is not None and int(declared) > SMALL_BODY else 0
        if held and self.in_flight + held > self.budget:
            await refuse(send, 503, busy(self.budget), {"Retry-After": "1"})
            return
        self.in_flight += held
        received = 0
        complete = declared is not None and held == 0
        started = False

        async def counted() -> dict:
            nonlocal received, held, complete
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                complete = not message.get("more_body", False)
                if received > self.limit:
                    raise BodyTooLarge(self.limit)
                if received > max(held, SMALL_BODY):  # a chunked body grows into the budget as it comes
                    if self.in_flight - held + received > self.budget:
                        raise BodiesBusy(self.budget)
                    self.in_flight += received - held
                    held = received
            return message

        async def closing(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if message["status"] == 413 or (message["status"] == 503 and not complete):
                    # the rest of the body is not wanted: stop the client sending it
                    message = {**message, "headers": [*message.get("headers", []), _CLOSE]}
            await send(message)

        try:
            await self.app(scope, counted, closing)
        except (BodyTooLarge, BodiesBusy) as err:  # raised where no route answers it (the lookup fast path)
            if started:
                raise
            await refuse(send, err.status_code, err.detail, err.headers)
        finally:
            self.in_flight -= held


async def refuse(send, status: int, detail: str, headers: Mapping[str, str] | None = None) -> None:
    """Answer ``status`` with ``{"detail": ...}`` and close the connection (its body is left unread)."""
    body = json.dumps({"detail": detail}).encode()
    extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            _CLOSE, *extra]})
    await send({"type": "http.response.body", "body": body})
