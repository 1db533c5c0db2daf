"""The REST API application, built by :func:`create_app` so tests and ``iez api`` start it on a real port."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from sqlalchemy import Engine
from sqlalchemy.exc import DataError, IntegrityError, OperationalError, SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from iez import __version__
from iez.api import deps
from iez.api.auth import Authenticator
from iez.api.fastpath import LookupFastPath
from iez.api.guard import WriteGuard
from iez.api.healthcheck import HealthCheck, min_free_from_env
from iez.api.limits import BodyLimit, max_body_from_env
from iez.api.metrics import ApiMetrics, MetricsMiddleware
from iez.api.routers import allocations, apps, health, oss, osts, requests, stats
from iez.api.schemas import Problem
from iez.config import Settings, describe, settings as env_settings
from iez.db import open_db
from iez.db.engine import unavailable
from iez.db.lookup import LayoutReader
from iez.db.owners import OwnedLayoutReader
from iez.errors import IezError, http_status

log = logging.getLogger("iez.api")


def create_app(settings: Settings | None = None, engine: Engine | None = None,
               max_body: int | None = None) -> FastAPI:
    """The API over ``settings.db``; raises :class:`~iez.db.SchemaOutOfDate` if the schema is not current.

    ``max_body`` is the request body limit in bytes (default ``IEZ_API_MAX_BODY``, 64 MiB: :mod:`iez.api.limits`).
    """
    settings = settings or env_settings()
    max_body = max_body or max_body_from_env()
    auth = Authenticator(settings)  # refuses a tokens file or socket it cannot use before anything starts
    engine = engine or open_db(settings)
    if settings.api_token is None:
        log.warning("IEZ_API_TOKEN is not set: every write will be refused with 403"
                    + (" (except users' own requests and allocations)" if auth.users else ""))
    if settings.reads == "open":
        log.warning("IEZ_API_READS=open: anyone who reaches the API reads every application's layouts")

    health_check = HealthCheck(engine, min_free_from_env())

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        health_check.dispose()
        engine.dispose()

    # /docs from the files fastapi-offline ships (no CDN: an air-gapped site sees them too). No /redoc: ReDoc's
    # bundle fetches its logo from a CDN.
    app = FastAPIOffline(
        redoc_url=None,
        swagger_ui_parameters={"validatorUrl": None},  # Swagger UI would otherwise ask validator.swagger.io
        title="iez interaction API",
        version=__version__,
        description="Statistics in, write requests in, OST layouts out. Writes need `Authorization: Bearer`; "
                    "users authenticate with `Authorization: MUNGE <credential>` or their own bearer token.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.health = health_check
    app.state.metrics = ApiMetrics()
    app.state.reader = LayoutReader(engine)
    app.state.auth = auth
    app.state.owned = OwnedLayoutReader(engine) if settings.reads == "owner" else None
    read_guard = {"token": [Depends(deps.require_reader)],
                  "owner": [Depends(deps.require_user)]}.get(settings.reads, [])
    app.include_router(stats.router, responses=ERRORS)
    app.include_router(requests.router, responses=ERRORS)
    app.include_router(allocations.router, responses=ERRORS)
    app.include_router(allocations.reads, dependencies=read_guard, responses=ERRORS)
    app.include_router(osts.router, dependencies=read_guard, responses=ERRORS)
    app.include_router(oss.router, dependencies=read_guard, responses=ERRORS)
    app.include_router(apps.router, dependencies=read_guard, responses=ERRORS)
    app.include_router(health.router, responses={413: ERRORS[413]})
    _add_error_handlers(app)
    # Innermost first: the lookup fast path answers inside the metrics layer, so it is counted too.
    app.add_middleware(LookupFastPath, reader=app.state.reader,
                       token=settings.api_token if settings.reads == "token" else None,
                       auth=auth if settings.reads == "owner" else None, owned=app.state.owned)
    # Writes are authenticated, and bodies measured, before anything reads them (the fast path included).
    app.add_middleware(WriteGuard)
    app.add_middleware(BodyLimit, limit=max_body)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    log.info("serving interaction DB %s (reads %s)", describe(engine.url), settings.reads)
    return app


#: The error answers every route may give, all with the :class:`~iez.api.schemas.Problem` body.
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem, "description": description} for status, description in (
    (400, "the body is not JSON the API can parse (e.g. nested too deeply)"),
    (401, "a credential is needed (`Authorization: Bearer ...` or `MUNGE ...`)"),
    (403, "the credential does not hold, or does not allow this"),
    (404, "no such application or allocation"),
    (413, "the body is larger than the limit (IEZ_API_MAX_BODY, default 64 MiB)"),
    (422, "the request is invalid: `detail` says why in one line, `errors` per field"),
    (503, "the interaction DB cannot serve this now (unreachable, stalled, read-only, full), or too many large "
          "bodies are in flight: `detail` says which; retry after `Retry-After` seconds"),
)}


def app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory`` (several workers): settings from the environment."""
    return create_app(env_settings())


def _field(loc: tuple) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    out = ""
    for part in parts:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out or "body"


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = []
        for err in exc.errors():
            field = _field(tuple(err.get("loc", ())))
            message = str(err.get("msg", "invalid"))
            if err.get("type") == "json_invalid":
                field, message = "body", f"invalid JSON: {err.get('ctx', {}).get('error', message)}"
            errors.append({"field": field, "message": message.removeprefix("Value error, ")})
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
        return JSONResponse({"detail": detail, "errors": errors}, status_code=422)

    @app.exception_handler(IezError)
    async def tree_error(_request: Request, exc: IezError) -> JSONResponse:
        # The error tree's table (iez/errors.py) gives the status: 422 input, 404 not found, 409 infeasible,
        # 503 unavailable (retry: Retry-After), 500 configuration or anything else iez raised on purpose.
        status = http_status(exc)
        headers = {"Retry-After": "5"} if status == 503 else None
        return JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)

    @app.exception_handler(OperationalError)
    async def db_broken(request: Request, exc: OperationalError) -> JSONResponse:
        return await tree_error(request, unavailable(request.app.state.engine, exc))

    @app.exception_handler(IntegrityError)
    async def conflict(_request: Request, exc: IntegrityError) -> JSONResponse:
        return JSONResponse({"detail": f"conflicting write, retry: {str(exc.orig).splitlines()[0]}"}, status_code=409)

    @app.exception_handler(DataError)
    async def out_of_range(_request: Request, exc: DataError) -> JSONResponse:
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        return JSONResponse({"detail": f"a value does not fit the interaction DB: {reason}"}, status_code=422)

    @app.exception_handler(SQLAlchemyError)
    async def db_error(_request: Request, exc: SQLAlchemyError) -> JSONResponse:
        # Anything else the DB refuses (a dropped table, a refused privilege, a full disk) is the DB's state,
        # not the request's: 503 naming the cause, so clients retry and operators see what broke.
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        log.error("interaction DB error: %s", reason)
        return JSONResponse({"detail": f"interaction DB {describe(app.state.engine.url)} cannot serve this: "
                                       f"{reason}"}, status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code in (204, 304):
            return Response(status_code=exc.status_code, headers=exc.headers)
        detail = exc.detail
        if isinstance(exc.__cause__, RecursionError):  # FastAPI's "error parsing the body", said plainly
            detail = "invalid JSON: nested too deeply"
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def bug(_request: Request, exc: Exception) -> JSONResponse:
        # A bug: still a JSON answer naming it (the traceback goes to the log, not to the client).
        return JSONResponse({"detail": f"internal error: {type(exc).__name__}: {exc}"[:500]}, status_code=500)
