"""``iez alloc add --pool/--layout`` then ``iez alloc show``: pooled and composite layouts pinned by hand round-trip
through the DB (SQLite and MariaDB) in the form the placement library applies."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from sqlalchemy import create_engine, text

from conftest import iez_cli
from iez.config import database_url

MIB = 1 << 20
PFL = {"pool": "flash", "components": [
    {"start": 0, "end": MIB, "pattern": "mdt"},
    {"start": MIB, "end": 64 * MIB, "stripe_size": MIB, "osts": [1, 2, 5, 6]},
    {"start": 64 * MIB, "end": -1, "stripe_size": 4 * MIB, "stripe_count": -1}]}


def stored_row(db: str, path: str) -> dict:
    engine = create_engine(database_url(db))
    try:
        with engine.connect() as conn:
            row = conn.execute(text("SELECT stripe_size, stripe_count, osts, pool, layout, policy FROM allocations "
                                    "WHERE path = :p AND state <> 'stale'"), {"p": path}).mappings().one()
            return dict(row)
    finally:
        engine.dispose()


def show(db: str, path: str) -> dict:
    shown = iez_cli("alloc", "show", "--db", db, "--file", path, "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


@pytest.mark.slow
def test_a_pooled_plain_layout_round_trips(db):
    added = iez_cli("alloc", "add", "--db", db, "--file", "/lustre/p.h5", "--stripe-size", "1048576",
                    "--osts", "3,7,11", "--pool", "flash", "--json")
    assert added.returncode == 0, added.stderr
    expected = {"file": "/lustre/p.h5", "stripe_size": MIB, "stripe_count": 3, "osts": [3, 7, 11], "pool": "flash"}
    assert json.loads(added.stdout) == expected
    assert show(db, "/lustre/p.h5") == expected
    assert stored_row(db, "/lustre/p.h5") == {"stripe_size": MIB, "stripe_count": 3, "osts": "3 7 11", "pool": "flash",
                                              "layout": "version=2 comp=0:eof:1048576:3:3,7,11:pool=flash",
                                              "policy": "manual"}
    text_out = iez_cli("alloc", "show", "--db", db, "--file", "/lustre/p.h5")
    assert text_out.stdout.strip() == "/lustre/p.h5: stripe_size 1048576 stripe_count 3 osts 3 7 11 pool flash"


@pytest.mark.slow
def test_a_composite_layout_round_trips(db):
    added = iez_cli("alloc", "add", "--db", db, "--file", "/lustre/pfl.h5", "--layout", json.dumps(PFL))
    assert added.returncode == 0, added.stderr
    assert show(db, "/lustre/pfl.h5") == {
        "file": "/lustre/pfl.h5", "stripe_size": MIB, "stripe_count": 4, "osts": [1, 2, 5, 6], "pool": "flash",
        "components": [
            {"start": 0, "end": MIB, "stripe_size": MIB, "stripe_count": 0, "osts": [], "pattern": "mdt"},
            {"start": MIB, "end": 64 * MIB, "stripe_size": MIB, "stripe_count": 4, "osts": [1, 2, 5, 6],
             "pool": "flash"},
            {"start": 64 * MIB, "end": -1, "stripe_size": 4 * MIB, "stripe_count": -1, "osts": [],
             "pool": "flash"}]}
    # the row the placement library reads: the layout text it applies, the placed OSTs in the plain columns
    assert stored_row(db, "/lustre/pfl.h5") == {
        "stripe_size": MIB, "stripe_count": 4, "osts": "1 2 5 6", "pool": "flash", "policy": "manual",
        "layout": "version=2 comp=0:1048576:1048576:0:mdt comp=1048576:67108864:1048576:4:1,2,5,6:pool=flash "
                  "comp=67108864:eof:4194304:-1:-:pool=flash"}
    assert iez_cli("alloc", "show", "--db", db, "--file", "/lustre/pfl.h5").stdout.splitlines() == [
        "/lustre/pfl.h5: composite layout, 3 components, pool flash",
        "  [0, 1048576) Data-on-MDT stripe_size 1048576",
        "  [1048576, 67108864) stripe_size 1048576 stripe_count 4 osts 1 2 5 6 pool flash",
        "  [67108864, EOF) stripe_size 4194304 stripe_count -1 osts - (not chosen) pool flash"]


@pytest.mark.slow
def test_components_may_reuse_an_ost_and_a_new_pin_replaces_the_old(db):
    layout = {"components": [{"end": 4 * MIB, "stripe_size": MIB, "osts": [4, 5]},
                             {"end": -1, "stripe_size": 2 * MIB, "osts": [5, 6, 7], "pool": "disk"}]}
    plain = iez_cli("alloc", "add", "--db", db, "--file", "/l/r", "--stripe-size", "65536", "--osts", "9")
    assert plain.returncode == 0
    assert iez_cli("alloc", "add", "--db", db, "--file", "/l/r", "--layout", json.dumps(layout)).returncode == 0
    shown = show(db, "/l/r")
    assert shown["osts"] == [4, 5, 5, 6, 7] and shown["stripe_count"] == 5 and "pool" not in shown
    assert [c.get("pool") for c in shown["components"]] == [None, "disk"]
    assert stored_row(db, "/l/r")["pool"] is None


def test_pool_given_beside_layout_applies_to_components_without_one(db):
    layout = {"components": [{"end": -1, "stripe_size": MIB, "osts": [1, 2]}]}
    done = iez_cli("alloc", "add", "--db", db, "--file", "/l/q", "--layout", json.dumps(layout), "--pool", "ssd")
    assert done.returncode == 0, done.stderr
    # one RAID-0 component over the whole file is a plain layout in the pool
    assert show(db, "/l/q") == {"file": "/l/q", "stripe_size": MIB, "stripe_count": 2, "osts": [1, 2], "pool": "ssd"}


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--layout", json.dumps({**PFL, "mirrors": [PFL["components"]]})],
     "--layout: a mirrored layout has 2 to 4 mirrors, not 1"),
    (["--layout", json.dumps({"mirrors": [PFL["components"], PFL["components"]]})],
     "--layout: mirrors 1 and 2 both use OST"),
    (["--layout", '{"components": [{"end": -1, "stripe_count": 4}]}'], "--layout: no component names OSTs"),
    (["--layout", '{"components": [{"end": -1, "osts": [1, 2]}]}'],
     "--layout: component [0, EOF): a placed component needs its stripe_size"),
    (["--layout", '{"components": [{"end": 1048576, "stripe_size": 1048576, "osts": [1]}, '
                  '{"end": 3145728, "stripe_size": 2097152, "osts": [2]}, {"end": -1, "stripe_count": 1}]}'],
     "component 1 [1048576, 3145728): end 3145728 is not a multiple of the stripe size 2097152"),
    (["--layout", '{"components": [{"end": -1, "stripe_size": 1048576, "osts": [3, 3]}]}'],
     "an OST appears twice without overstriping"),
    (["--layout", '{"components": [{"end": -1, "stripe_size": 1048576, "osts": [3]}]}', "--osts", "3"],
     "--layout gives the whole layout: leave out --stripe-size and --osts"),
    (["--layout", '{"pool": "a", "components": [{"end": -1, "stripe_size": 1048576, "osts": [3]}]}', "--pool", "b"],
     "--pool b but --layout says pool 'a'"),
    (["--layout", "[]"], "--layout: a layout must be a JSON object"),
    (["--layout", "{"], "--layout: not valid JSON"),
    (["--osts", "1,2"], "give --stripe-size and --osts, or --layout"),
    (["--stripe-size", "1048576", "--osts", "1", "--pool", "way-too-long-pool-name"],
     "--pool: pool 'way-too-long-pool-name' is not a Lustre pool name"),
])
def test_alloc_add_refuses_layouts_lustre_would_refuse(db, args, message):
    done = iez_cli("alloc", "add", "--db", db, "--file", "/l/bad", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("iez alloc: error: ") and message in done.stderr, done.stderr
    assert iez_cli("alloc", "show", "--db", db, "--file", "/l/bad").returncode == 1


@pytest.mark.slow
def test_osts_the_db_knows_outside_the_pool_are_refused(db):
    engine = create_engine(database_url(db))
    with engine.begin() as conn:
        for index, pools in ((1, "flash ssd"), (2, ""), (3, None)):
            conn.execute(text("INSERT INTO osts (ost_index, name, oss_id, kbytes_total, kbytes_avail, sample_time, "
                              "state, pools) VALUES (:i, :n, 'oss0', 100, 50, :t, 'active', :p)"),
                         {"i": index, "n": f"fs-OST{index:04x}", "t": datetime(2026, 1, 1), "p": pools})
    engine.dispose()
    refused = iez_cli("alloc", "add", "--db", db, "--file", "/l/x", "--stripe-size", "1048576", "--osts", "1,2",
                      "--pool", "flash")
    assert refused.returncode == 2
    assert refused.stderr.strip() == ("iez alloc: error: OST 2 is not in pool flash (the DB has it in no pool); "
                                      "Lustre would refuse this layout")
    other = iez_cli("alloc", "add", "--db", db, "--file", "/l/x", "--layout",
                    json.dumps({"components": [{"end": -1, "stripe_size": MIB, "osts": [1], "pool": "disk"}]}))
    assert "OST 1 is not in pool disk (the DB has it in pools flash, ssd)" in other.stderr
    # OST 3's pools are unknown and OST 9 is not in the DB: the administrator decides
    assert iez_cli("alloc", "add", "--db", db, "--file", "/l/x", "--stripe-size", "1048576", "--osts", "1,3,9",
                   "--pool", "flash").returncode == 0
    assert show(db, "/l/x")["osts"] == [1, 3, 9]
