"""What endpoints get handed: the engine, the settings, the metrics, and who is calling (:mod:`iez.api.auth`).

Every dependency is ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool,
a thread hop per dependency per request that the lookup hot path cannot afford.
"""

from __future__ import annotations

import asyncio
import hmac

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine

from iez.api.auth import AuthError, Caller, SERVICE
from iez.api.metrics import ApiMetrics
from iez.config import Settings
from iez.db.lookup import LayoutReader

bearer = HTTPBearer(auto_error=False, description="IEZ_API_TOKEN of the server, or a user's token")
#: Said to a caller without credentials where users may authenticate.
SEND_CREDENTIALS = "send 'Authorization: MUNGE <credential>' (munge -n) or 'Authorization: Bearer <token>'"


async def engine(request: Request) -> Engine:
    return request.app.state.engine


async def reader(request: Request) -> LayoutReader:
    return request.app.state.reader


async def settings(request: Request) -> Settings:
    return request.app.state.settings


async def metrics(request: Request) -> ApiMetrics:
    return request.app.state.metrics


def _check_token(expected: str | None, credentials: HTTPAuthorizationCredentials | None, what: str) -> None:
    if expected is None:
        raise HTTPException(403, f"{what} are disabled: the server was started without IEZ_API_TOKEN")
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            401, "missing bearer token: send 'Authorization: Bearer <IEZ_API_TOKEN>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not hmac.compare_digest(credentials.credentials.encode(), expected.encode()):
        raise HTTPException(403, "invalid bearer token")


async def require_writer(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
) -> None:
    _check_token(request.app.state.settings.api_token, credentials, "writes")


async def require_reader(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
) -> None:
    """Only attached to read routers when IEZ_API_READS=token."""
    _check_token(request.app.state.settings.api_token, credentials, "reads")


async def caller(request: Request) -> Caller:
    """The authenticated caller (anonymous without a header); 401/403/503 when the credential does not hold.

    Remembered on the request, so a MUNGE credential is decoded once (munged refuses a second decode as a
    replay), also when the lookup fast path decoded it already.
    """
    known = request.scope.get("iez_caller")
    if known is not None:
        return known
    auth = request.app.state.auth
    header = request.headers.get("authorization")
    try:
        if auth.blocking and header and header.lstrip()[:6].lower() == "munge ":
            who = await asyncio.to_thread(auth.caller, header)
        else:
            who = auth.caller(header)
    except AuthError as err:
        raise HTTPException(err.status, err.detail, headers=err.headers) from None
    request.scope["iez_caller"] = who
    return who


async def reader_of(request: Request) -> Caller:
    """Whose files a read may show: the caller with IEZ_API_READS=owner; otherwise every file (the service's
    view, as the lookup fast path answers), without looking at credentials reads do not need."""
    if request.app.state.settings.reads != "owner":
        return SERVICE
    return await require_user(await caller(request))


async def require_user(who: Caller = Depends(caller)) -> Caller:
    """Any authenticated caller: a user or the service credential (reads with IEZ_API_READS=owner)."""
    if who.anonymous:
        raise HTTPException(401, f"authentication needed: {SEND_CREDENTIALS}",
                            headers={"WWW-Authenticate": "Bearer, MUNGE"})
    return who


async def writer_or_user(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
) -> Caller:
    """Writes an owner may make (requests, allocate): the service credential, or a user once users can
    authenticate; without user authentication exactly :func:`require_writer`."""
    auth = request.app.state.auth
    if not auth.users:
        _check_token(request.app.state.settings.api_token, credentials, "writes")
        return SERVICE
    return await require_user(await caller(request))
