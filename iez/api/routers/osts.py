"""``/v1/osts``: the latest statistics of every OST, with the space reservations hold and Lustre's policy for it."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy import Engine

from iez.api import deps
from iez.api.schemas import OstsOut
from iez.db.engine import read
from iez.db.models import utcnow
from iez.db.stats import ost_rows

router = APIRouter(prefix="/v1/osts", tags=["osts"])


@router.get("", response_model=OstsOut)
def get_osts(engine: Engine = Depends(deps.engine)) -> dict:
    """``{"osts": [{index, name, oss_id, kbytes_total, kbytes_avail, bytes_reserved, read_bytes, write_bytes,
    sample_time, state, pools, reserved_kbytes}]}``: ``bytes_reserved`` is what iez's allocations hold,
    ``reserved_kbytes`` what Lustre keeps back (``osp.*.reserved_mb_low``), ``state`` the most restrictive
    of what the OST's OSS and the MDS say, ``pools`` its OST pools."""
    return {"osts": read(engine, lambda conn: ost_rows(conn, utcnow()))}
