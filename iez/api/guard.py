"""Writes (and, with ``IEZ_API_READS=token``, batch lookups) are authenticated before their body is read.

FastAPI reads and parses a route's body before it solves the route's
dependencies, so a write without a credential would cost the server its whole
body first. This pure ASGI layer runs the write routes' own credential checks
(:func:`iez.api.deps.require_writer`, :func:`iez.api.deps.writer_or_user`) on
the headers alone and answers 401/403 at once; the routes run them again, at
no cost (a MUNGE credential is decoded once: the caller is kept on the request).
"""

from __future__ import annotations

import json

from fastapi import HTTPException
from starlette.requests import Request

from iez.api import deps

#: The writes, and the check each needs: the service credential alone, or the service or a user.
WRITES = {
    ("POST", "/v1/stats"): "service",
    ("POST", "/v1/requests"): "writer",
    ("POST", "/v1/allocate"): "writer",
}
BATCH_LOOKUP = ("POST", "/v1/allocations/lookup")


class WriteGuard:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        need = WRITES.get((scope.get("method"), scope.get("path"))) if scope["type"] == "http" else None
        if need is None and scope["type"] == "http" and (scope["method"], scope["path"]) == BATCH_LOOKUP \
                and scope["app"].state.settings.reads == "token":
            need = "reader"  # a read with a body (owner reads: the lookup fast path asks first itself)
        if need is not None:
            request = Request(scope)
            try:
                credentials = await deps.bearer(request)
                if need == "service":
                    await deps.require_writer(request, credentials)
                elif need == "reader":
                    await deps.require_reader(request, credentials)
                else:
                    await deps.writer_or_user(request, credentials)
            except HTTPException as err:
                await _answer(send, err.status_code, str(err.detail), dict(err.headers or {}))
                return
        await self.app(scope, receive, send)


async def _answer(send, status: int, detail: str, headers: dict[str, str]) -> None:
    """The routes' own error answer, and the connection closed: the body it came with stays unread."""
    body = json.dumps({"detail": detail}).encode()
    extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *extra]})
    await send({"type": "http.response.body", "body": body})
