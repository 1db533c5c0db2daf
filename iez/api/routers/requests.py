"""``/v1/requests``: the write requests an application will make (traced, predicted or from Darshan)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from iez.api import deps
from iez.api.auth import Caller
from iez.api.schemas import RequestIds, RequestsIn
from iez.db.engine import write_transaction
from iez.db.models import Application
from iez.db.requests import set_owner, upsert_requests

router = APIRouter(prefix="/v1/requests", tags=["requests"])


@router.post("", status_code=201, response_model=RequestIds)
def post_requests(body: RequestsIn, engine: Engine = Depends(deps.engine),
                  who: Caller = Depends(deps.writer_or_user)) -> RequestIds:
    """Store requests; posting the same (app, file) again updates its row and keeps its id.

    A request may carry its file's ``pool`` and PFL template (``components``), and ``rank`` -1 for a shared file.
    A user's requests create an application owned by that user, and only its owner may add to it; the service
    credential writes any application and may give it to ``owner``.
    """
    if not who.admin and body.owner not in (None, who.user):
        raise HTTPException(403, f"owner: only the service credential gives an application to another user "
                                 f"(you are {who.user!r})")
    requests = [r.stored() for r in body.requests]

    def store(session: Session) -> list[int]:  # may run twice (write_transaction): DB work only
        if not who.admin:
            owner = session.scalar(select(Application.owner).where(Application.name == body.app))
            exists = owner is not None or session.scalar(
                select(Application.id).where(Application.name == body.app)) is not None
            if exists and owner != who.user:
                raise HTTPException(403, f"application {body.app!r} is another user's: choose another name")
        ids = upsert_requests(session, body.app, requests, body.fingerprint, owner=body.owner or who.user)
        if who.admin and body.owner is not None:
            set_owner(session, body.app, body.owner)
        return ids

    return RequestIds(ids=write_transaction(engine, store))
