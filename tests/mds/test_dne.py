"""Several MDSs (DNE): one ``iez mds`` reads the Lustre parameters of every MDT it is given (one
``--lustre-params`` per MDS node: a parameter tree for one, saved ``lctl get_param`` text for the other),
merges pools and OST states from all of them, and places files so that whichever MDT holds their
directory may create them: an OST takes new stripes only if every MDT's osp allows it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from conftest import BACKENDS, fresh_db
from iez.config import database_url
from iez.db.engine import make_engine, write_session
from iez.db.models import AllocationRow, WriteRequestRow, parse_osts
from iez.db.requests import RequestIn, upsert_requests
from iez.mds.lustre_params import LustreParamsReader, parse_mds_params
from agents.lctl import parse_text
from mds_helpers import Publisher, mds_factory, stats  # noqa: F401 (mds_factory is a fixture)
from test_lustre_params import tree_from_text

pytestmark = pytest.mark.slow

POOLS = {"flash": (0, 1), "disk": (2, 3, 4, 5)}


def mdt_text(mdt: int, inactive: tuple[int, ...] = (), nocreate: tuple[int, ...] = (),
             pools: dict[str, tuple[int, ...]] = POOLS) -> str:
    """What ``lctl get_param`` prints on the MDS node of MDT ``mdt`` of file system ``fs`` (6 OSTs)."""
    lines = []
    for pool, members in pools.items():
        uuids = [f"fs-OST{i:04x}_UUID" for i in members]
        lines.append(f"lod.fs-MDT{mdt:04x}-mdtlov.pools.{pool}=" + ("\n".join(uuids) if len(uuids) == 1
                                                                      else "\n" + "\n".join(uuids)))
    lines.append(f"lod.fs-MDT{mdt:04x}-mdtlov.qos_prio_free=90%")
    lines.append(f"lod.fs-MDT{mdt:04x}-mdtlov.qos_threshold_rr=17%")
    other = 1 - mdt
    lines.append(f"osp.fs-MDT{other:04x}-osp-MDT{mdt:04x}.active=1")  # the other MDT, seen from this one
    for i in range(6):
        lines.append(f"osp.fs-OST{i:04x}-osc-MDT{mdt:04x}.active={0 if i in inactive else 1}")
        lines.append(f"osp.fs-OST{i:04x}-osc-MDT{mdt:04x}.max_create_count={0 if i in nocreate else 20000}")
        lines.append(f"osp.fs-OST{i:04x}-osc-MDT{mdt:04x}.reserved_mb_low=3")
    return "\n".join(lines) + "\n"


def test_the_merge_rule_every_mdt_must_allow_an_ost_and_a_pool_has_what_every_mdt_lists():
    params = parse_mds_params(parse_text(mdt_text(0, nocreate=(4,)) + mdt_text(1, inactive=(3,))))
    assert {i: p.state for i, p in params.osts.items()} == {0: "active", 1: "active", 2: "active", 3: "inactive",
                                                           4: "nocreate", 5: "active"}
    assert params.pools == POOLS
    # a pool_add that has reached MDT0000 but not yet MDT0001: the OST is not in the pool for iez yet
    grown = {"flash": (0, 1, 2), "disk": (2, 3, 4, 5)}
    params = parse_mds_params(parse_text(mdt_text(0, pools=grown) + mdt_text(1)))
    assert params.pools["flash"] == (0, 1)
    # an OST that one MDT has no osp device for cannot get objects from that MDT: inactive
    text = mdt_text(0) + "\n".join(line for line in mdt_text(1).splitlines() if "OST0005-osc" not in line)
    assert parse_mds_params(parse_text(text + "\n")).osts[5].state == "inactive"


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_iez_places_a_two_mdt_file_system_with_a_pool_on_each_mdt(backend, tmp_path: Path, mds_factory):
    db = fresh_db(backend, tmp_path, "dne")
    # MDS node 0 (MDT0000): a parameter tree; OST 4's creation stopped on this MDT only
    text0 = tmp_path / "mdt0.txt"
    text0.write_text(mdt_text(0, nocreate=(4,)))
    proc, sys_ = tmp_path / "mds0" / "proc", tmp_path / "mds0" / "sys"
    tree_from_text(text0, proc, sys_)
    # MDS node 1 (MDT0001): saved lctl text; OST 3 deactivated on this MDT only
    text1 = tmp_path / "mdt1.txt"
    text1.write_text(mdt_text(1, inactive=(3,)))
    reader = LustreParamsReader.from_option([f"{proc}:{sys_}", str(text1)])
    assert reader.read().pools == POOLS and reader.describe().count(" + ") == 1

    mds = mds_factory(db, "--lustre-params", f"{proc}:{sys_}", "--lustre-params", str(text1),
                      "--lustre-params-interval", "1").start(timeout=120)
    status = mds.wait(lambda s: s["lustre"].get("pools"), 60, "the MDTs' parameters")
    assert status["lustre"]["pools"] == {name: list(m) for name, m in POOLS.items()}
    pub, stop = Publisher(mds.endpoint), threading.Event()

    def agents():  # two OSSs of 3 OSTs each, reporting every 0.5 s for the whole test
        seq = 0
        while not stop.is_set():
            seq += 1
            pub.send(stats("oss0", seq, 0, count=3))
            pub.send(stats("oss1", seq, 3, count=3))
            stop.wait(0.5)

    reporter = threading.Thread(target=agents, daemon=True)
    reporter.start()
    try:
        mds.wait(lambda s: sorted(s["osses"]["fresh"]) == ["oss0", "oss1"], 60, "both OSSs")
        status = mds.wait(lambda s: s["ost_states"] == {"inactive": [3], "nocreate": [4]}, 60, "merged OST states")
        # files whose directories live on either MDT: the requests carry the pool their directory gives them
        engine = make_engine(database_url(db))
        with write_session(engine) as s:
            upsert_requests(s, "dne-job", [RequestIn(f"/lustre/mdt{k % 2}/flash.{k}", 1 << 30, 2, rank=k,
                                                     pool="flash") for k in range(4)]
                            + [RequestIn(f"/lustre/mdt{k % 2}/disk.{k}", 1 << 30, 2, rank=k, pool="disk")
                               for k in range(6)]
                            + [RequestIn("/lustre/mdt1/disk-wide", 1 << 30, 3, rank=9, pool="disk")])

        def outcome():
            with engine.connect() as conn:
                placed = {p: parse_osts(o) for p, o in conn.execute(select(AllocationRow.path, AllocationRow.osts))}
                refused = {p: r for p, r in conn.execute(select(WriteRequestRow.path, WriteRequestRow.refusal))
                           if r}
            return placed, refused

        deadline = time.monotonic() + 120  # generous: the machine may be loaded
        while True:
            placed, refused = outcome()
            if len(placed) == 10 and "/lustre/mdt1/disk-wide" in refused:
                break
            assert time.monotonic() < deadline, (placed, refused, mds.log.read_text()[-3000:])
            time.sleep(0.2)
        for path, osts in placed.items():
            # flash files on the flash OSTs; disk files only on the disk OSTs both MDTs may create on
            allowed = {0, 1} if "flash" in path else {2, 5}
            assert set(osts) <= allowed and len(set(osts)) == 2, (path, osts)
        assert set().union(*(set(o) for p, o in placed.items() if "disk" in p)) == {2, 5}
        # three stripes of pool disk do not fit in the two OSTs every MDT allows: refused, not put on 3 or 4
        assert "/lustre/mdt1/disk-wide" not in placed
        engine.dispose()
    finally:
        stop.set()
        reporter.join(timeout=10)
        pub.close()
