"""``/v1/stats``: OSS agent reports pushed over HTTP."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy import Engine

from iez.api import deps
from iez.api.schemas import OssStats, StatsStored
from iez.db.engine import write_transaction
from iez.db.stats import ingest

router = APIRouter(prefix="/v1/stats", tags=["stats"])


@router.post("", status_code=201, response_model=StatsStored, dependencies=[Depends(deps.require_writer)])
def post_stats(message: OssStats, engine: Engine = Depends(deps.engine)) -> StatsStored:
    """Store one agent message: OSS load and the space of its OSTs."""
    report = message.to_report()
    write_transaction(engine, lambda session: ingest(session, report))
    return StatsStored(oss_id=message.oss_id, osts=len(message.osts))
