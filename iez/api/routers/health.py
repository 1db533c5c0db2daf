"""``/healthz`` and ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine, func, select

from iez.api import deps
from iez.api.metrics import ApiMetrics
from iez.api.schemas import Health
from iez.config import Settings
from iez.db.engine import DatabaseUnavailable, read
from iez.db.models import OssRow, utcnow
from iez.db.stats import stale_oss_count
from iez.freshness import StaleRule

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, responses={
    503: {"model": Health, "description": "a part is unhealthy: `detail` and `checks` say which and why"}})
async def healthz(request: Request) -> JSONResponse:
    """200 when the interaction DB is reachable, takes a write and (SQLite) has room, all within 3 s; 503 naming
    the part that is not (``checks``: ``reachable``, ``writable``, ``disk``; :mod:`iez.api.healthcheck`)."""
    healthy, answer = await request.app.state.health.run()
    return JSONResponse(answer, status_code=200 if healthy else 503, headers={} if healthy else {"Retry-After": "5"})


@router.get("/metrics", response_class=Response)
def metrics(
    engine: Engine = Depends(deps.engine),
    settings: Settings = Depends(deps.settings),
    api_metrics: ApiMetrics = Depends(deps.metrics),
) -> Response:
    """Prometheus text format."""
    try:
        stale, known = read(
            engine,
            lambda conn: (stale_oss_count(conn, utcnow(), StaleRule.from_settings(settings)),
                          conn.execute(select(func.count()).select_from(OssRow)).scalar_one()),
        )
        api_metrics.stale_oss.set(stale)
        api_metrics.known_oss.set(known)
    except DatabaseUnavailable:
        pass  # request metrics are still worth serving when the DB is down
    return Response(generate_latest(api_metrics.registry), media_type=CONTENT_TYPE_LATEST)
