"""``/healthz`` and ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine, func, select, text

from iez.api import deps
from iez.api.metrics import ApiMetrics
from iez.config import Settings, describe
from iez.db.engine import DatabaseUnavailable, read
from iez.db.models import OssRow, utcnow
from iez.db.stats import stale_oss_count
from iez.freshness import StaleRule

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(engine: Engine = Depends(deps.engine)) -> dict:
    """200 when the interaction DB answers; 503 with the reason when it does not."""
    read(engine, lambda conn: conn.execute(text("SELECT 1")).scalar())
    return {"status": "ok", "db": describe(engine.url)}


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
                          conn.scalar(select(func.count()).select_from(OssRow))),
        )
        api_metrics.stale_oss.set(stale)
        api_metrics.known_oss.set(known)
    except DatabaseUnavailable:
        pass  # request metrics are still worth serving when the DB is down
    return Response(generate_latest(api_metrics.registry), media_type=CONTENT_TYPE_LATEST)
