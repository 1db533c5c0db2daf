"""A request's Lustre policy in the DB (SQLite and MariaDB): pool, PFL template and learnt directory default
stored and compared; composite allocations stored with their layout text, the default and per-component
reservations; lookups answer pool and components."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from iez.allocate import AllocationError
from iez.config import database_url
from iez.db.allocations import lookup, lookup_many, pending_requests, store_placement
from iez.db.engine import make_engine, read, write_session
from iez.db.lookup import LayoutReader
from iez.db.models import AllocationRow, Reservation, WriteRequestRow, utcnow
from iez.db.requests import RequestIn, app_summary, application, row_policy, upsert_requests
from iez.layout.emulated import format_attr, parse_attr
from iez.layout.model import Layout
from iez.model import EOF_END, OST, Allocation, ClusterState, Component, WriteRequest
from iez.placement import check_capacity

MIB = 1 << 20
TEMPLATE = (Component(0, MIB, 0, MIB, dom=True), Component(MIB, 8 * MIB, 2, MIB, "flash"),
            Component(8 * MIB, EOF_END, 4, 4 * MIB, "flash"))
DEFAULT = ("version=2 comp=0:1048576:1048576:0:mdt comp=1048576:8388608:1048576:2:-:pool=flash "
           "comp=8388608:eof:4194304:4:-:pool=flash")
PLACED = (Component(0, MIB, 0, MIB, dom=True), Component(MIB, 8 * MIB, 2, MIB, "flash", (3, 5)),
          Component(8 * MIB, EOF_END, 4, 4 * MIB, "flash", (1, 3, 5, 7)))


@pytest.fixture
def engine(db):
    engine = make_engine(database_url(db))
    yield engine
    engine.dispose()


def store(engine, request: RequestIn) -> None:
    with write_session(engine) as s:
        upsert_requests(s, "pfl", [request])


def place_by_hand(engine, outcome) -> None:
    """Save one pass whose only outcome is ``outcome`` (the allocators' own output is tested elsewhere)."""
    with write_session(engine) as s:
        pending = pending_requests(s, application(s, "pfl").id)
        store_placement(s, pending, [outcome], "iez", utcnow(), 3600)


def test_the_policy_is_stored_and_read_back(engine):
    store(engine, RequestIn("/l/pfl", 40 * MIB, 4, rank=-1, pool="flash", components=TEMPLATE,
                            default_layout=DEFAULT))
    store(engine, RequestIn("/l/plain", MIB, 1))
    with Session(engine) as s:
        rows = {r.path: r for r in s.scalars(select(WriteRequestRow))}
        assert row_policy(rows["/l/pfl"]) == ("flash", TEMPLATE)
        assert rows["/l/pfl"].default_layout == DEFAULT and rows["/l/pfl"].rank == -1
        assert (rows["/l/plain"].pool, rows["/l/plain"].components, rows["/l/plain"].default_layout) == (
            None, None, None)
        assert row_policy(rows["/l/plain"]) == (None, ())
    summary = {r["file"]: r for r in read(engine, lambda c: app_summary(c, "pfl"))["requests"]}
    assert summary["/l/pfl"]["components"][0] == {"end": MIB, "stripe_count": 0, "stripe_size": MIB,
                                                   "pattern": "mdt"}


def test_a_composite_allocation_keeps_its_layout_default_note_and_per_component_reservations(engine):
    store(engine, RequestIn("/l/pfl", 40 * MIB, 4, rank=-1, pool="flash", components=TEMPLATE,
                            default_layout=DEFAULT))
    allocation = Allocation("/l/pfl", MIB, (3, 5, 1, 3, 5, 7), "iez", "flash", PLACED, note="used degraded OST 7")
    place_by_hand(engine, allocation)
    with Session(engine) as s:
        row = s.scalar(select(AllocationRow))
        assert (row.pool, row.default_layout, row.note, row.stripe_count, row.osts) == (
            "flash", DEFAULT, "used degraded OST 7", 6, "3 5 1 3 5 7")
        assert parse_attr(row.layout, "stored") == Layout.from_components(PLACED)
        assert row.layout == format_attr(Layout(MIB, allocation.osts, "flash", PLACED))
        reserved = sorted((r.ost_index, r.bytes) for r in s.scalars(select(Reservation)))
    # 40 MiB: [1, 8) MiB is 7 MiB over OSTs 3 and 5, striped by file offset: stripe 1 (OST 5) holds MiB
    # 1, 3, 5, 7 and stripe 0 (OST 3) MiB 2, 4, 6; [8, 40) MiB is 32 MiB over 4 OSTs of 4 MiB stripes: 8 each
    assert reserved == sorted([(3, 3 * MIB), (5, 4 * MIB), (1, 8 * MIB), (3, 8 * MIB), (5, 8 * MIB), (7, 8 * MIB)])
    assert sum(b for _, b in reserved) == 39 * MIB  # the first MiB is on the MDT
    answer = read(engine, lambda c: lookup(c, "/l/pfl"))
    assert answer["pool"] == "flash" and answer["osts"] == [3, 5, 1, 3, 5, 7]
    assert [(c["start"], c["end"], c["osts"]) for c in answer["components"]] == [
        (0, MIB, []), (MIB, 8 * MIB, [3, 5]), (8 * MIB, -1, [1, 3, 5, 7])]
    assert answer["components"][0]["pattern"] == "mdt"
    assert read(engine, lambda c: lookup_many(c, ["/l/pfl"]))["/l/pfl"] == answer
    assert LayoutReader(engine).one("/l/pfl") == answer  # the API's hot path answers the same


def test_a_small_object_is_reserved_up_to_one_stripe_of_its_extent(engine):
    """2 MiB reaches [1, 8) MiB for 1 MiB: OST 5's object is empty, yet reserved as 1 MiB."""
    store(engine, RequestIn("/l/small", 2 * MIB, 4, pool="flash", components=TEMPLATE))
    place_by_hand(engine, Allocation("/l/small", MIB, (3, 5), "iez", "flash", (
        PLACED[0], PLACED[1], PLACED[2].template())))
    with Session(engine) as s:
        assert sorted((r.ost_index, r.bytes) for r in s.scalars(select(Reservation))) == [(3, MIB), (5, MIB)]


@pytest.mark.slow
def test_a_plain_allocation_has_no_layout_text_but_keeps_its_pool_and_default(engine):
    store(engine, RequestIn("/l/p", 4 * MIB, 2, pool="disk", default_layout=""))
    place_by_hand(engine, Allocation("/l/p", MIB, (2, 4), "iez", "disk"))
    with Session(engine) as s:
        row = s.scalar(select(AllocationRow))
        assert (row.pool, row.default_layout) == ("disk", "")
        assert parse_attr(row.layout, "stored") == Layout.from_components(
            (Component(0, EOF_END, 2, MIB, "disk", (2, 4)),))  # a pool needs the version-2 text
    assert read(engine, lambda c: lookup(c, "/l/p")) == {"file": "/l/p", "stripe_size": MIB, "stripe_count": 2,
                                                       "osts": [2, 4], "pool": "disk"}
    store(engine, RequestIn("/l/q", MIB, 1))
    place_by_hand(engine, Allocation("/l/q", MIB, (6,), "iez"))
    with Session(engine) as s:
        row = s.scalar(select(AllocationRow).where(AllocationRow.path == "/l/q"))
        assert (row.pool, row.layout, row.default_layout, row.note) == (None, None, None, None)


@pytest.mark.slow
@pytest.mark.parametrize("change", [dict(pool="disk"), dict(components=TEMPLATE[1:2] + (TEMPLATE[2],)),
                                    dict(default_layout="")])
def test_a_changed_policy_retires_the_allocation(engine, change):
    base = dict(file="/l/pfl", write_bytes=40 * MIB, stripe_count=4, pool="flash", components=TEMPLATE,
                default_layout=DEFAULT)
    store(engine, RequestIn(**base))
    place_by_hand(engine, Allocation("/l/pfl", MIB, (3, 5, 1, 3, 5, 7), "iez", "flash", PLACED))
    store(engine, RequestIn(**base))  # the same again: kept
    assert read(engine, lambda c: lookup(c, "/l/pfl")) is not None
    if "components" in change:  # a template must start at 0
        change = {"components": (Component(0, 8 * MIB, 2, MIB, "flash"), TEMPLATE[2])}
    store(engine, RequestIn(**{**base, **change}))
    assert read(engine, lambda c: lookup(c, "/l/pfl")) is None
    with Session(engine) as s:
        assert s.scalar(select(Reservation)) is None


def test_the_capacity_guard_counts_every_component():
    """The second component puts 24 MiB on OST 1, which has 16 MiB free: refused (a policy bug guard)."""
    cluster = ClusterState.build([OST(i, "oss0", 64 * 1024, 16 * 1024) for i in range(4)])
    comps = (Component(0, 8 * MIB, 1, MIB, osts=(0,)), Component(8 * MIB, EOF_END, 1, MIB, osts=(1,)))
    request = WriteRequest("a", "/f", 32 * MIB, 1, components=tuple(c.template() for c in comps))
    with pytest.raises(AllocationError, match="put 25165824 bytes on OST 1"):
        check_capacity(cluster, [request], [Allocation("/f", MIB, (0, 1), components=comps)])
    check_capacity(cluster, [request], [Allocation("/f", MIB, (0, 1), components=(
        comps[0], Component(8 * MIB, 16 * MIB, 1, MIB, osts=(1,))))])  # 8 MiB there fits


def test_the_application_summary_shows_an_allocation_as_its_layout_json_with_policy_and_state(engine):
    store(engine, RequestIn("/l/pfl", 40 * MIB, 4, rank=-1, pool="flash", components=TEMPLATE))
    place_by_hand(engine, Allocation("/l/pfl", MIB, (3, 5, 1, 3, 5, 7), "iez", "flash", PLACED, note="degraded"))
    (request,) = read(engine, lambda c: app_summary(c, "pfl"))["requests"]
    shown = request["allocation"]
    # GET /v1/apps/{name} answers these keys in this order; the note stays out (the allocation answers carry it)
    assert list(shown) == ["stripe_size", "stripe_count", "osts", "policy", "state", "pool", "components"]
    assert (shown["stripe_size"], shown["stripe_count"], shown["osts"], shown["policy"], shown["pool"]) == (
        MIB, 6, [3, 5, 1, 3, 5, 7], "iez", "flash")
    assert shown["components"] == Layout(MIB, (3, 5, 1, 3, 5, 7), "flash", PLACED).to_json()["components"]
