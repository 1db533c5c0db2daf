"""What endpoints get handed: the engine, the settings, the metrics, and the bearer-token checks.

Every dependency is ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool,
a thread hop per dependency per request that the lookup hot path cannot afford.
"""

from __future__ import annotations

import hmac

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine

from iez.api.metrics import ApiMetrics
from iez.config import Settings
from iez.db.lookup import LayoutReader

bearer = HTTPBearer(auto_error=False, description="IEZ_API_TOKEN of the server")


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
