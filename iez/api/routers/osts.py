"""``/v1/osts``: the latest statistics of every OST, with the space reservations hold."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy import Engine

from iez.api import deps
from iez.db.engine import read
from iez.db.models import utcnow
from iez.db.stats import ost_rows

router = APIRouter(prefix="/v1/osts", tags=["osts"])


@router.get("")
def get_osts(engine: Engine = Depends(deps.engine)) -> dict:
    """``{"osts": [{index, name, oss_id, kbytes_total, kbytes_avail, bytes_reserved, ...}]}``."""
    return {"osts": read(engine, lambda conn: ost_rows(conn, utcnow()))}
