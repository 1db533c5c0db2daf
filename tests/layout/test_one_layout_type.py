"""One layout type (issue 28): an allocation is a file plus its :class:`~iez.model.Layout` (plus policy and note),
so plain, composite (PFL) and mirrored layouts have one ``stripe_count``, one ``stripe_bytes`` and one JSON
form, which the parser reads back, the DB's lookups answer and ``POST /v1/allocate`` answers."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy import select

from iez import model
from iez.api.routers.allocations import layout_of
from iez.config import database_url
from iez.db.allocations import lookup, pending_requests, store_placement
from iez.db.engine import make_engine, read, write_session
from iez.db.lookup import LayoutReader
from iez.db.models import AllocationRow, utcnow
from iez.db.requests import RequestIn, application, upsert_requests
from iez.layout.emulated import parse_attr
from iez.layout.model import layout_from_json
from iez.model import EOF_END, Allocation, Component, Layout, WriteRequest
from iez.sim.engine import _pieces

MIB = 1 << 20
MIRRORS = ((Component(0, EOF_END, 2, MIB, None, (0, 1)),), (Component(0, EOF_END, 2, MIB, None, (4, 5)),))
PFL = (Component(0, MIB, 0, MIB, dom=True), Component(MIB, 8 * MIB, 2, MIB, "flash", (3, 5)),
       Component(8 * MIB, EOF_END, 4, 4 * MIB, "flash"))
# each built with the positional call the allocators use: file, stripe_size, osts, policy, pool, components,
# note, mirrors, preferred_mirror
KINDS = {
    "plain": Allocation("/l/plain", MIB, (6, 2), "iez"),
    "pooled": Allocation("/l/pooled", 4 * MIB, (2, 4), "iez", "disk"),
    "pfl": Allocation("/l/pfl", MIB, (3, 5), "iez", "flash", PFL, "used degraded OST 5"),
    "mirrored": Allocation("/l/mirrored", MIB, (0, 1), "iez", None, (), "", MIRRORS, 1),
}


@pytest.mark.parametrize("kind", KINDS)
def test_an_allocations_json_is_its_layouts_json_with_the_file_and_note(kind):
    a = KINDS[kind]
    layout = a.layout()
    assert isinstance(a, Layout) and type(layout) is Layout
    assert a.to_json() == {"file": a.file, **layout.to_json(), **({"note": a.note} if a.note else {})}
    assert (a.stripe_count, a.mirror_count, a.copies()) == (layout.stripe_count, layout.mirror_count, layout.copies())
    assert a.stripe_bytes(20 * MIB) == layout.stripe_bytes(20 * MIB) == model.stripe_bytes(a, 20 * MIB)
    # the API's response model carries exactly that JSON, mirrors and preferred_mirror included
    assert layout_of(a).model_dump(exclude_none=True) == a.to_json()


def test_the_json_says_each_kind_in_its_own_fields():
    got = {kind: a.to_json() for kind, a in KINDS.items()}
    assert got["plain"] == {"file": "/l/plain", "stripe_size": MIB, "stripe_count": 2, "osts": [6, 2]}
    assert got["pooled"] == {"file": "/l/pooled", "stripe_size": 4 * MIB, "stripe_count": 2, "osts": [2, 4],
                             "pool": "disk"}
    assert got["pfl"]["components"][0] == {"start": 0, "end": MIB, "stripe_size": MIB, "stripe_count": 0,
                                           "osts": [], "pattern": "mdt"}
    assert got["pfl"]["note"] == "used degraded OST 5" and got["pfl"]["pool"] == "flash"
    mirrored = got["mirrored"]
    assert mirrored["preferred_mirror"] == 1 and [m[0]["osts"] for m in mirrored["mirrors"]] == [[0, 1], [4, 5]]
    assert mirrored["components"] == mirrored["mirrors"][0]  # the primary, as the lookups have always said
    # one placed RAID-0 component over the whole file says no more than the plain fields
    one = Layout.from_components((Component(0, EOF_END, 2, MIB, "disk", (2, 4)),))
    assert one.to_json() == KINDS["pooled"].layout().to_json() | {"stripe_size": MIB}


@pytest.mark.parametrize("kind", KINDS)
def test_the_json_round_trips_through_the_one_parser(kind):
    layout = KINDS[kind].layout()
    parsed = layout_from_json(layout.to_json(), kind)
    assert parsed.to_json() == layout.to_json()
    # the same layout back; a mirrored one also lists its first copy as its components (as Lustre's does)
    assert parsed == (replace(layout, components=layout.mirrors[0]) if layout.mirrors else layout)
    if layout.mirrors:
        assert parsed.preferred_mirror == 1
    else:
        assert parsed.preferred_mirror is None and KINDS[kind].preferred_mirror is None  # no copy to prefer


def test_the_simulator_and_the_allocation_count_the_same_bytes_per_ost():
    for a in KINDS.values():
        request = WriteRequest("app", a.file, 20 * MIB, 1)
        assert [(ost, b) for ost, b, _ in _pieces(request, a, {})] == a.stripe_bytes(20 * MIB)
    pfl = KINDS["pfl"].stripe_bytes(20 * MIB)
    # [1, 8) MiB by file offset over two 1 MiB stripes (MiB 1, 3, 5, 7 on the second); DoM and [8, EOF) unplaced
    assert pfl == [(3, 3 * MIB), (5, 4 * MIB)]


def test_the_db_answers_each_allocation_in_the_allocations_own_json(db):
    engine = make_engine(database_url(db))
    try:
        with write_session(engine) as s:
            upsert_requests(s, "one-type", [RequestIn(a.file, 20 * MIB, 1) for a in KINDS.values()])
        with write_session(engine) as s:
            pending = {row.path: row for row in pending_requests(s, application(s, "one-type").id)}
            store_placement(s, [pending[a.file] for a in KINDS.values()], list(KINDS.values()), "iez", utcnow(),
                            3600)
        reader = LayoutReader(engine)
        for a in KINDS.values():
            stored = read(engine, lambda conn: lookup(conn, a.file))
            assert stored == reader.one(a.file) == a.to_json(), a.file
        text = read(engine, lambda conn: conn.execute(
            select(AllocationRow.layout).where(AllocationRow.path == "/l/mirrored")).scalar_one())
        assert parse_attr(text, "stored").to_json() == KINDS["mirrored"].layout().to_json()
    finally:
        engine.dispose()


def test_a_layout_pinned_as_an_allocation_is_a_new_placement():
    pinned = Allocation.of("/l/pinned", Layout.from_mirrors(MIRRORS, None, [1]), "manual")
    assert (pinned.file, pinned.policy, pinned.mirrors) == ("/l/pinned", "manual", MIRRORS)
    assert pinned.stale == () and pinned.preferred_mirror == 0  # every copy is written; the first read
    plain = Allocation.of("/l/plain", Layout(MIB, (1, 2), "disk"))
    assert plain.layout() == Layout(MIB, (1, 2), "disk") and plain.preferred_mirror is None
