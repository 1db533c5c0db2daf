"""A lean ASGI layer for the two lookup endpoints, the placement library's hot path.

FastAPI's routing, dependency solving and validation cost about 0.25 ms per
request on this class of machine, several times the SQLite query itself. This
layer answers well-formed ``GET /v1/allocations?path=...`` and
``POST /v1/allocations/lookup`` requests directly, with the same JSON the
FastAPI routes give. Anything it does not fully understand (a bad path, a
malformed body, a missing token when reads are closed) goes on unchanged to
those routes, which stay the documented interface (OpenAPI) and produce the
standard errors, so both paths always agree.

With ``IEZ_API_READS=owner`` the layer authenticates the caller itself (a
MUNGE credential can be decoded only once) and answers only the caller's own
files (:class:`~iez.db.owners.OwnedLayoutReader`); the service credential
sees every file, and a missing or refused credential gets the routes' 401/403.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from urllib.parse import parse_qsl

from iez.api.auth import AuthError, Authenticator
from iez.db.engine import DatabaseUnavailable
from iez.db.lookup import LayoutReader
from iez.db.models import MAX_PATH_BYTES

LOOKUP_ONE, LOOKUP_MANY = "/v1/allocations", "/v1/allocations/lookup"
MAX_BATCH = 100_000
MAX_BODY = MAX_BATCH * (MAX_PATH_BYTES + 8)
OFF_LOOP_BYTES = 256 * 1024  # bodies and batches past these sizes are parsed and looked up in a thread
OFF_LOOP_PATHS = 2_000
_JSON_HEADERS = [(b"content-type", b"application/json")]
_ANSWERED = object()  # the caller was refused and told so


def good_path(path: object) -> bool:
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        return False
    try:
        return len(path.encode("utf-8")) <= MAX_PATH_BYTES
    except UnicodeEncodeError:
        return False


class LookupFastPath:
    def __init__(self, app, reader: LayoutReader, token: str | None, auth: Authenticator | None = None,
                 owned=None):
        self.app = app
        self.reader = reader
        self.auth, self.owned = auth, owned  # set only when reads go to owners
        # A SQLite lookup (~30 us) is cheaper than a thread hop: run it on the event loop. A MariaDB
        # lookup waits on the network: run it in a thread so other connections proceed meanwhile.
        self._inline = reader.sqlite
        self._coalesced = None if self._inline else _CoalescedLookups(reader)
        self.token = token.encode() if token else None  # set only when reads need the token

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and self._authorised(scope):
            if scope["path"] == LOOKUP_ONE and scope["method"] == "GET":
                query = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
                if len(query) == 1 and query[0][0] == "path" and good_path(query[0][1]):
                    scope["iez_route"] = LOOKUP_ONE
                    owner = await self._owner(scope, send)
                    if owner is not _ANSWERED:
                        await self._one(query[0][1], owner, send)
                    return
            elif scope["path"] == LOOKUP_MANY and scope["method"] == "POST":
                owner = await self._owner(scope, send)  # with owner reads: who asks, before the body is read
                if owner is _ANSWERED:
                    return
                body = await _read_body(receive)
                # A large body is parsed in a thread: a 64 MiB one takes ~0.5 s that other lookups must not wait.
                paths = _paths(body) if body is None or len(body) < OFF_LOOP_BYTES \
                    else await asyncio.to_thread(_paths, body)
                if paths is not None:
                    scope["iez_route"] = LOOKUP_MANY
                    await self._many(paths, owner, send)
                    return
                receive = _replay(body)  # the route explains what is wrong (the caller is kept on the request)
        await self.app(scope, receive, send)

    async def _owner(self, scope, send):
        """The user whose files alone may be answered (None: all), or :data:`_ANSWERED` once an error went out
        (closing the connection when a body follows: it is not read)."""
        if self.auth is None:
            return None
        unread = {"Connection": "close"} if scope["method"] == "POST" else {}
        header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
        try:
            if self.auth.blocking and header and header.lstrip()[:6].lower() == "munge ":
                who = await asyncio.to_thread(self.auth.caller, header)
            else:
                who = self.auth.caller(header)
        except AuthError as err:
            await _answer(send, err.status, {"detail": err.detail}, {**err.headers, **unread})
            return _ANSWERED
        if who.anonymous:
            from iez.api.deps import SEND_CREDENTIALS

            await _answer(send, 401, {"detail": f"authentication needed: {SEND_CREDENTIALS}"},
                          {"WWW-Authenticate": "Bearer, MUNGE", **unread})
            return _ANSWERED
        scope["iez_caller"] = who
        return None if who.admin else who.user

    def _authorised(self, scope) -> bool:
        if self.token is None:
            return True
        for name, value in scope["headers"]:
            if name == b"authorization":
                return value[:7].lower() == b"bearer " and hmac.compare_digest(value[7:].strip(), self.token)
        return False

    async def _one(self, path: str, owner: str | None, send) -> None:
        try:
            if owner is not None:
                layout = self.owned.owned_one(path, owner) if self._inline \
                    else await asyncio.to_thread(self.owned.owned_one, path, owner)
            else:
                layout = self.reader.one(path) if self._coalesced is None else await self._coalesced.one(path)
        except DatabaseUnavailable as err:
            await _answer(send, 503, {"detail": str(err)})
            return
        if layout is None:
            await _answer(send, 404, {"detail": f"no allocation for {path}"})
        else:
            await _answer(send, 200, layout)

    async def _many(self, paths: list[str], owner: str | None, send) -> None:
        reader, args = (self.reader.many, (paths,)) if owner is None else (self.owned.owned_many, (paths, owner))
        try:
            found = reader(*args) if self._inline and len(paths) < OFF_LOOP_PATHS \
                else await asyncio.to_thread(reader, *args)
        except DatabaseUnavailable as err:
            await _answer(send, 503, {"detail": str(err)})
            return
        missing = [p for p in paths if p not in found]
        layouts = [found[p] for p in dict.fromkeys(paths) if p in found]
        await _answer(send, 200, {"allocations": layouts, "missing": missing})


class _CoalescedLookups:
    """Single lookups that arrive while a MariaDB query is in flight share the next query.

    A MariaDB round trip costs far more than the Python around it, so when many
    clients ask at once, one ``IN (...)`` query answers everyone who queued
    meanwhile. An idle server sends each lookup alone: no added latency.
    """

    def __init__(self, reader: LayoutReader):
        self.reader = reader
        self.waiting: list[tuple[str, asyncio.Future]] = []
        self.draining = False

    async def one(self, path: str) -> dict | None:
        answer = asyncio.get_running_loop().create_future()
        self.waiting.append((path, answer))
        if not self.draining:
            self.draining = True
            asyncio.create_task(self._drain())
        return await answer

    async def _drain(self) -> None:
        try:
            while self.waiting:
                batch, self.waiting = self.waiting, []
                paths = [path for path, _ in batch]
                found: dict[str, dict | None]
                try:
                    if len(paths) == 1:
                        found = {paths[0]: await asyncio.to_thread(self.reader.one, paths[0])}
                    else:
                        found = dict(await asyncio.to_thread(self.reader.many, paths))
                except Exception as err:  # every waiter gets the failure (503 for an unavailable DB)
                    for _, answer in batch:
                        if not answer.done():
                            answer.set_exception(err)
                    continue
                for path, answer in batch:
                    if not answer.done():
                        answer.set_result(found.get(path))
        finally:
            self.draining = False


def _paths(body: bytes | None) -> list[str] | None:
    """The paths of a well-formed lookup body, else None (FastAPI then explains what is wrong)."""
    if body is None:
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # nesting past the parser's depth guard: the route says 400
        return None
    if not isinstance(data, dict) or set(data) != {"paths"}:
        return None
    paths = data["paths"]
    if not isinstance(paths, list) or len(paths) > MAX_BATCH or not all(good_path(p) for p in paths):
        return None
    return paths


async def _read_body(receive) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        if size > MAX_BODY:
            return None
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes | None):
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body or b"", "more_body": False}

    return receive


async def _answer(send, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(payload).encode()
    extra = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status,
                "headers": _JSON_HEADERS + extra + [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
