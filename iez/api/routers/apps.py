"""``/v1/apps/{name}``: one application with its requests, their allocations, and its runs; and its layout map.

With ``IEZ_API_READS=owner`` only the application's owner (and the service credential) gets an answer;
anyone else gets the 404 of an application that does not exist.
"""

from __future__ import annotations

import tempfile
from pathlib import Path as FilePath
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response
from sqlalchemy import Engine

from iez.api import deps
from iez.api.auth import Caller
from iez.api.schemas import AppOut, Problem
from iez.db.engine import read
from iez.db.owners import owner_of
from iez.db.requests import NotFound, app_summary

router = APIRouter(prefix="/v1/apps", tags=["apps"])

AppName = Annotated[str, Path(min_length=1, max_length=255)]


def check_owner(engine: Engine, name: str, who: Caller) -> None:
    """NotFound (404) for an application ``who`` may not read, worded as for one that does not exist."""
    if who.admin:  # also every reader when reads are not limited to owners (deps.reader_of)
        return
    exists, owner = read(engine, lambda conn: owner_of(conn, name))
    if not exists or not who.may_read(owner):
        raise NotFound(f"no application named {name!r}")


@router.get("/{name}", response_model=AppOut, responses={404: {"model": Problem}})
def get_app(name: AppName, engine: Engine = Depends(deps.engine),
            who: Caller = Depends(deps.reader_of)) -> dict:
    """``{name, owner, fingerprint, created, requests: [... allocation or null], pending, runs}``; 404 if
    unknown (or, with owner reads, not the caller's)."""
    check_owner(engine, name, who)
    return read(engine, lambda conn: app_summary(conn, name))


@router.get("/{name}/map", response_class=Response, responses={
    200: {"content": {"application/octet-stream": {}}, "description": "the layout map (CDB, iez.maps)"},
    404: {"model": Problem}})
def get_map(name: AppName, engine: Engine = Depends(deps.engine),
            who: Caller = Depends(deps.reader_of)) -> Response:
    """The application's live layouts as a layout map (the file ``iez map export`` writes, for ``IEZ_MAP``);
    404 if unknown (or, with owner reads, not the caller's). ``X-Iez-Map-Entries`` says how many files it holds.
    """
    from iez.maps import app_exists, export_map

    check_owner(engine, name, who)
    if not read(engine, lambda conn: app_exists(conn, name)):
        raise NotFound(f"no application named {name!r}")
    with tempfile.TemporaryDirectory(prefix="iez-map-") as tmp:
        done = export_map(engine, name, FilePath(tmp) / "layouts.map")
        data = FilePath(done["path"]).read_bytes()
    return Response(data, media_type="application/octet-stream",
                    headers={"X-Iez-Map-Entries": str(done["entries"]),
                             "Content-Disposition": 'attachment; filename="layouts.map"'})
