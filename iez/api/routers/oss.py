"""``/v1/oss``: the latest report of every OSS, and whether it is stale."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy import Engine

from iez.api import deps
from iez.api.schemas import OssListOut
from iez.config import Settings
from iez.db.engine import read
from iez.db.models import utcnow
from iez.db.stats import oss_rows
from iez.freshness import StaleRule

router = APIRouter(prefix="/v1/oss", tags=["oss"])


@router.get("", response_model=OssListOut)
def get_oss(engine: Engine = Depends(deps.engine), settings: Settings = Depends(deps.settings)) -> dict:
    """``{"oss": [{oss_id, seq, cpu_pct, mem_pct, sample_time, received, stale, osts}]}``."""
    return {"oss": read(engine, lambda conn: oss_rows(conn, utcnow(), StaleRule.from_settings(settings)))}
