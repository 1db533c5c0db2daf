"""``/v1/requests``: the write requests an application will make (traced, predicted or from Darshan)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from sqlalchemy import Engine

from iez.api import deps
from iez.api.schemas import RequestIds, RequestsIn
from iez.db.engine import write_session
from iez.db.requests import RequestIn, upsert_requests
from iez.layout.model import request_policy

router = APIRouter(prefix="/v1/requests", tags=["requests"])


@router.post("", status_code=201, response_model=RequestIds, dependencies=[Depends(deps.require_writer)])
def post_requests(body: RequestsIn, engine: Engine = Depends(deps.engine)) -> RequestIds:
    """Store requests; posting the same (app, file) again updates its row and keeps its id.

    A request may carry its file's ``pool`` and PFL template (``components``), and ``rank`` -1 for a shared file.
    """
    requests = []
    for r in body.requests:
        values = r.model_dump()
        values["pool"], values["components"] = request_policy(r.pool, r.components, r.file)
        requests.append(RequestIn(**values))
    with write_session(engine) as session:
        ids = upsert_requests(session, body.app, requests, body.fingerprint)
    return RequestIds(ids=ids)
