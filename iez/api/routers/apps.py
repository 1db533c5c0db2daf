"""``/v1/apps/{name}``: one application with its requests, their allocations, and its runs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from sqlalchemy import Engine

from iez.api import deps
from iez.api.schemas import Problem
from iez.db.engine import read
from iez.db.requests import app_summary

router = APIRouter(prefix="/v1/apps", tags=["apps"])


@router.get("/{name}", responses={404: {"model": Problem}})
def get_app(name: Annotated[str, Path(min_length=1, max_length=255)], engine: Engine = Depends(deps.engine)) -> dict:
    """``{name, fingerprint, created, requests: [... allocation or null], pending, runs}``; 404 if unknown."""
    return read(engine, lambda conn: app_summary(conn, name))
