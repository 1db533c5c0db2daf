"""``/v1/allocate`` and ``/v1/allocations``: place an application's requests, and look layouts up.

The lookups are the placement library's hot path: they answer pre-serialised
JSON straight from a Core query, with no ORM objects or response-model pass.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from pydantic import AfterValidator
from sqlalchemy import Engine

from iez.api import deps
from iez.api.auth import Caller
from iez.api.metrics import ApiMetrics
from iez.api.schemas import (
    AllocateIn,
    Allocations,
    Layout,
    LookupIn,
    LookupOut,
    Problem,
    RefusedFile,
    _absolute_path,
)
from iez.config import Settings
from iez.freshness import StaleRule
from iez.db.engine import read
from iez.db.lookup import LayoutReader
from iez.db.owners import owner_of
from iez.db.requests import NotFound
from iez.db.models import utcnow
from iez.db.stats import stale_reasons
from iez.model import Allocation, MiB
from iez.placement import PlacementSettings, place_app

JSON = "application/json"
router = APIRouter(tags=["allocations"])
reads = APIRouter(tags=["allocations"])


def layout_of(a: Allocation) -> Layout:
    """The answer for one allocation: its JSON (:meth:`Allocation.to_json`), the form ``GET /v1/allocations``
    serves it in, as the response model."""
    return Layout.model_validate(a.to_json())


@router.post(
    "/v1/allocate",
    response_model=Allocations,
    response_model_exclude_none=True,
    responses={404: {"model": Problem}, 409: {"model": Problem}, 503: {"model": Problem}},
)
def allocate(
    body: AllocateIn,
    engine: Engine = Depends(deps.engine),
    settings: Settings = Depends(deps.settings),
    metrics: ApiMetrics = Depends(deps.metrics),
    who: Caller = Depends(deps.writer_or_user),
) -> Allocations:
    """Run the policy over the app's pending requests against the latest OST statistics less active reservations.

    Allocations and their reservations are stored in one transaction. Refusal is per file: files that cannot
    be placed are listed in ``refused`` with their reason (also stored on the request); 409 when none fits,
    503 naming the stale OSSs ("OSS oss1: no report for 42 s (stale after 9 s)") when some OSSs are stale.
    A user allocates only applications they own (404 for any other).
    """
    if not who.admin:
        exists, owner = read(engine, lambda conn: owner_of(conn, body.app))
        if not exists or owner != who.user:
            raise NotFound(f"no application named {body.app!r}")
    placement = PlacementSettings(body.policy, seed=body.seed, fill_cap=body.fill_cap, fill_weight=body.fill_weight,
                                  ost_bandwidth=body.ost_bandwidth_mib_s * MiB,
                                  oss_bandwidth=body.oss_bandwidth_mib_s * MiB)
    try:
        done = place_app(engine, body.app, placement, StaleRule.from_settings(settings), settings.reservation_ttl_s)
    except ImportError as err:  # a policy whose module this build lacks: the request asks what cannot be done
        raise HTTPException(422, f"policy {body.policy!r} is not available in this build: {err}") from err
    except ValueError:
        metrics.allocation_failures.inc()
        raise
    metrics.allocations.labels(body.policy).inc(len(done.placed))
    if done.refused and not done.placed:
        metrics.allocation_failures.inc()
        file, reason = done.refused[0]
        stale = read(engine, lambda conn: stale_reasons(conn, utcnow(), StaleRule.from_settings(settings)))
        if stale:  # name the real cause: the OSTs are left out because their OSSs stopped reporting
            raise HTTPException(503, f"no file of {body.app} could be placed ({len(done.refused)} refused): "
                                     f"{'; '.join(stale[:5])}{'; ...' if len(stale) > 5 else ''}; their OSTs are "
                                     f"left out until they report again (is iez-agent running there, and iez mds?); "
                                     f"{file}: {reason}")
        raise HTTPException(409, f"no file of {body.app} could be placed ({len(done.refused)} refused); "
                                 f"{file}: {reason}")
    return Allocations(
        allocations=[layout_of(a) for a in done.placed],
        refused=[RefusedFile(file=f, reason=r) for f, r in done.refused],
    )


def _owner_only(who: Caller) -> str | None:
    """The user whose files alone a lookup may answer (None: every file)."""
    return None if who.admin else who.user


@reads.get("/v1/allocations", response_model=Layout, responses={404: {"model": Problem}})
async def get_allocation(
    path: Annotated[str, Query(min_length=1, max_length=4096, pattern=r"^/[^\x00]*$",
                               description="absolute file path"),
                    AfterValidator(_absolute_path)],
    request: Request,
    reader: LayoutReader = Depends(deps.reader),
    who: Caller = Depends(deps.reader_of),
) -> Response:
    """The live layout of one file, or 404 (also, with owner reads, for another user's file)."""
    owner = _owner_only(who)
    layout = reader.one(path) if owner is None else request.app.state.owned.owned_one(path, owner)
    if layout is None:
        return Response(json.dumps({"detail": f"no allocation for {path}"}), 404, media_type=JSON)
    return Response(json.dumps(layout), media_type=JSON)


@reads.post("/v1/allocations/lookup", response_model=LookupOut)
async def lookup_batch(body: LookupIn, request: Request, reader: LayoutReader = Depends(deps.reader),
                       who: Caller = Depends(deps.reader_of)) -> Response:
    """Live layouts of many files in one call; paths without one (or another user's) are listed in ``missing``."""
    owner = _owner_only(who)
    found = reader.many(body.paths) if owner is None else request.app.state.owned.owned_many(body.paths, owner)
    missing = [p for p in body.paths if p not in found]
    layouts = [found[p] for p in dict.fromkeys(body.paths) if p in found]
    return Response(json.dumps({"allocations": layouts, "missing": missing}), media_type=JSON)
