"""``/v1/allocate`` and ``/v1/allocations``: place an application's requests, and look layouts up.

The lookups are the placement library's hot path: they answer pre-serialised
JSON straight from a Core query, with no ORM objects or response-model pass.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from pydantic import AfterValidator
from sqlalchemy import Engine

from iez.api import deps
from iez.api.metrics import ApiMetrics
from iez.api.schemas import AllocateIn, Allocations, Layout, LookupIn, LookupOut, Problem, _absolute_path
from iez.config import Settings
from iez.db.allocations import allocate_app
from iez.db.lookup import LayoutReader

JSON = "application/json"
router = APIRouter(tags=["allocations"])
reads = APIRouter(tags=["allocations"])


@router.post(
    "/v1/allocate",
    response_model=Allocations,
    dependencies=[Depends(deps.require_writer)],
    responses={404: {"model": Problem}, 409: {"model": Problem}},
)
def allocate(
    body: AllocateIn,
    engine: Engine = Depends(deps.engine),
    settings: Settings = Depends(deps.settings),
    metrics: ApiMetrics = Depends(deps.metrics),
) -> Allocations:
    """Run the policy over the app's pending requests against the latest OST statistics less active reservations.

    Allocations and their reservations are stored in one transaction; 409 when the requests do not fit.
    """
    try:
        placed = allocate_app(engine, body.app, body.policy, settings.oss_stale_s, settings.reservation_ttl_s,
                              seed=body.seed)
    except ImportError as err:  # a policy whose module this build lacks
        raise HTTPException(501, f"policy {body.policy!r} is not available in this build: {err}") from err
    except ValueError:
        metrics.allocation_failures.inc()
        raise
    metrics.allocations.labels(body.policy).inc(len(placed))
    return Allocations(
        allocations=[Layout(file=a.file, stripe_size=a.stripe_size, stripe_count=a.stripe_count, osts=list(a.osts))
                     for a in placed]
    )


@reads.get("/v1/allocations", response_model=Layout, responses={404: {"model": Problem}})
async def get_allocation(
    path: Annotated[str, Query(min_length=1, max_length=4096, description="absolute file path"),
                    AfterValidator(_absolute_path)],
    reader: LayoutReader = Depends(deps.reader),
) -> Response:
    """The live layout of one file, or 404."""
    layout = reader.one(path)
    if layout is None:
        return Response(json.dumps({"detail": f"no allocation for {path}"}), 404, media_type=JSON)
    return Response(json.dumps(layout), media_type=JSON)


@reads.post("/v1/allocations/lookup", response_model=LookupOut)
async def lookup_batch(body: LookupIn, reader: LayoutReader = Depends(deps.reader)) -> Response:
    """Live layouts of many files in one call; paths without one are listed in ``missing``."""
    found = reader.many(body.paths)
    missing = [p for p in body.paths if p not in found]
    layouts = [found[p] for p in dict.fromkeys(body.paths) if p in found]
    return Response(json.dumps({"allocations": layouts, "missing": missing}), media_type=JSON)
