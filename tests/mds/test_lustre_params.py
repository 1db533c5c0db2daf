"""The MDS's own Lustre parameters (pools, osp states, reserved space, qos settings) from saved text, a
parameter tree and a running lctl; merged with the agents' states into the live view, the osts rows and
the cluster the allocator sees."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import select

from agents import AgentError
from agents.lctl import ParseError, parse_file, parse_text
from conftest import BACKENDS, fresh_db, iez_cli
from iez.config import database_url
from iez.db.engine import make_engine, read, write_session
from iez.db.models import OstRow, utcnow
from iez.db.stats import OssReport, OstReport, usable_cluster
from iez.mds.lustre_params import MDS_PATTERNS, LustreParams, LustreParamsReader, OstPolicy, parse_mds_params
from iez.mds.resources import Usage
from iez.mds.service import MdsConfig, MdsService
from iez.mds.view import ClusterView

PARAMS = Path(__file__).resolve().parents[1] / "data" / "lustre-params" / "mds"
MDS_TEXT = PARAMS / "lctl-get-param-mds.txt"
GiB_KB = 1024 * 1024

# lctl-get-param-mds.txt, read off by hand: two MDTs; OST 3 deactivated on both, OST 4's creation stopped on
# MDT0000 only, OST 5's watermark raised to 1 GiB; the others keep the default 3 MiB
EXPECTED = {
    0: OstPolicy("active", ("flash",), 3072),
    1: OstPolicy("active", ("flash",), 3072),
    2: OstPolicy("active", ("disk",), 3072),
    3: OstPolicy("inactive", ("disk",), 3072),
    4: OstPolicy("nocreate", ("disk",), 3072),
    5: OstPolicy("active", ("disk", "scratch"), 1024 * 1024),
}
POOLS = {"disk": (2, 3, 4, 5), "flash": (0, 1), "scratch": (5,), "spare": ()}


def test_saved_text_gives_pools_states_reserved_space_and_qos():
    params = parse_mds_params(parse_file(MDS_TEXT))
    assert params.fsname == "testfs"
    assert params.osts == EXPECTED
    assert params.pools == POOLS
    assert params.qos == {"maxage_s": 5, "prio_free_pct": 90, "threshold_rr_pct": 17}


def test_lustre_2_12_prints_qos_maxage_with_its_unit():
    params = parse_mds_params(parse_file(PARAMS / "lustre-2.12-mds.txt"))
    assert params.qos == {"maxage_s": 5, "prio_free_pct": 91, "threshold_rr_pct": 20}
    assert {i: p.state for i, p in params.osts.items()} == {0: "active", 1: "active", 2: "inactive"}
    assert {p.reserved_kbytes for p in params.osts.values()} == {10 * 1024} and params.pools == {}


def test_real_osp_output_marks_the_inactive_ost_and_ignores_mdt_to_mdt_devices():
    params = parse_mds_params(parse_file(PARAMS / "osp-lustre-collector.txt"))  # lustre-collector's capture
    assert sorted(params.osts) == list(range(8))
    assert [i for i, p in params.osts.items() if p.state != "active"] == [1]
    assert params.osts[1].state == "inactive"  # active=0 and max_create_count=0: the stricter one
    assert all(p.reserved_kbytes is None for p in params.osts.values())


def tree_from_text(text_file: Path, proc: Path, sys_: Path) -> None:
    """The files a Lustre MDS has for the parameters of ``text_file``: pools in procfs, the rest in sysfs."""
    for param in parse_file(text_file):
        root = proc if ".pools." in param.name else sys_
        path = root.joinpath(*param.name.split("."))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(param.value + "\n" if param.value else "")


def test_a_parameter_tree_reads_the_same_as_the_saved_text(tmp_path: Path):
    proc, sys_ = tmp_path / "proc", tmp_path / "sys"
    tree_from_text(MDS_TEXT, proc, sys_)
    assert (proc / "lod" / "testfs-MDT0000-mdtlov" / "pools" / "flash").read_text() == \
        "testfs-OST0000_UUID\ntestfs-OST0001_UUID\n"
    reader = LustreParamsReader.from_option(f"{proc}:{sys_}")
    assert reader.kind == "procfs"
    assert reader.read() == parse_mds_params(parse_file(MDS_TEXT))


def test_a_running_lctl_is_asked_for_the_mds_parameters(tmp_path: Path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    argv = tmp_path / "argv"
    lctl = bindir / "lctl"
    # lctl exits 2 when one pattern matches nothing but still prints the others
    lctl.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv}\ncat {MDS_TEXT}\n'
                    'echo "error: get_param: param_path lod/*/pools/*: No such file or directory" >&2\nexit 2\n')
    lctl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    for option in ("lctl", None):  # asked for, or the default when lctl is on PATH
        reader = LustreParamsReader.from_option(option)
        assert reader.kind == "lctl"
        assert reader.read().osts == EXPECTED
        assert argv.read_text().split() == ["get_param", *MDS_PATTERNS]


def test_reader_options_and_their_errors(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no lctl
    assert LustreParamsReader.from_option(None).source is None
    assert LustreParamsReader.from_option("none").read() is None
    assert LustreParamsReader.from_option(str(MDS_TEXT)).kind == "file"
    with pytest.raises(ValueError, match="lctl is not on PATH"):
        LustreParamsReader.from_option("lctl")
    with pytest.raises(ValueError, match=f"--lustre-params {tmp_path}/gone: {tmp_path}/gone does not exist"):
        LustreParamsReader.from_option(str(tmp_path / "gone"))


@pytest.mark.parametrize("text, where, message", [
    ("lod.fs-MDT0000-mdtlov.pools.flash=\nfs-OST0000_UUID\nfs-MDT0000_UUID\n", 3, "expected an OST UUID"),
    ("lod.fs-MDT0000-mdtlov.qos_prio_free=ninety\n", 1, "expected a percentage such as 90%"),
    ("osp.fs-OST0001-osc-MDT0000.active=\n", 1, "has no value"),
    ("osp.fs-OST0001-osc-MDT0000.reserved_mb_low=-3\n", 1, "expected MiB"),
    ("lod.fs-MDT0000-mdtlov.pools.much_too_long_name=fs-OST0000_UUID\n", 1, "not a Lustre pool name"),
])
def test_malformed_parameters_name_the_source_and_line(text, where, message):
    with pytest.raises(ParseError, match=rf"^saved:{where}: .*{message}"):
        parse_mds_params(parse_text(text, "saved"))


def test_an_mds_of_two_file_systems_needs_fsname():
    text = ("osp.fs-OST0001-osc-MDT0000.active=0\nosp.other-OST0001-osc-MDT0000.active=1\n"
            "lod.other-MDT0000-mdtlov.pools.p=other-OST0001_UUID\n")
    with pytest.raises(AgentError, match=r"several file systems: fs \(saved:1\), other \(saved:2\); choose one"):
        parse_mds_params(parse_text(text, "saved"))
    assert parse_mds_params(parse_text(text), "fs").osts == {1: OstPolicy("inactive")}
    assert parse_mds_params(parse_text(text), "other").osts == {1: OstPolicy("active", ("p",))}


def v2(oss: str, seq: int, t: float, osts: dict[int, str], avail_kb: int = 8 * GiB_KB) -> OssReport:
    """An agent's report of OSTs in the given states (what decode gives for a version-2 message)."""
    return OssReport(oss, seq, datetime.fromtimestamp(t, timezone.utc).replace(tzinfo=None), 5.0, 5.0,
                     [OstReport(f"testfs-OST{i:04x}", i, 10 * GiB_KB, avail_kb, 0, 0, state)
                      for i, state in osts.items()], 1.0)


def test_the_view_merges_agent_and_mds_states_and_takes_lustres_reserved_space_off_free_space():
    view = ClusterView()
    view.apply(v2("a", 1, 100.0, {0: "active", 1: "degraded", 2: "readonly", 3: "degraded", 4: "active",
                                  5: "active"}), received=100.0)
    before = view.cluster({})
    assert [o.state for o in before.osts] == ["active", "degraded", "readonly", "degraded", "active", "active"]
    assert all(o.pools == () and o.kbytes_avail == 8 * GiB_KB for o in before.osts)
    view.allocated()
    changes = view.apply_lustre(parse_mds_params(parse_file(MDS_TEXT)))
    assert view.changed
    assert "OST 3: state degraded -> inactive, pools - -> disk, reserved_kbytes - -> 3072" in changes
    cluster = view.cluster({0: 4096 * 1024})  # iez holds 4 MiB on OST 0 besides Lustre's 3 MiB
    assert [o.state for o in cluster.osts] == ["active", "degraded", "readonly", "inactive", "nocreate", "active"]
    assert [o.pools for o in cluster.osts] == [("flash",), ("flash",), ("disk",), ("disk",), ("disk",),
                                               ("disk", "scratch")]
    assert cluster.osts[0].kbytes_avail == 8 * GiB_KB - 4096 - 3072
    assert cluster.osts[5].kbytes_avail == 8 * GiB_KB - GiB_KB
    # the OSS clears its switch: the MDS's own state still holds where it has one
    view.apply(v2("a", 2, 101.0, {i: "active" for i in range(6)}), received=101.0)
    assert [o.state for o in view.cluster({}).osts] == ["active", "active", "active", "inactive", "nocreate",
                                                       "active"]
    assert view.policies([3, 5]) == {3: ("inactive", "disk", 3072), 5: ("active", "disk scratch", 1024 * 1024)}


class IdleNode:
    def sample(self) -> Usage:
        return Usage(1.0, 1.0)


def frame(version: int, oss: str, seq: int, osts: dict[int, str]) -> list[bytes]:
    entries = []
    for i, state in osts.items():
        entry = {"name": f"testfs-OST{i:04x}", "index": i, "kbytes_total": 10 * GiB_KB, "kbytes_avail": 8 * GiB_KB,
                 "read_bytes": None, "write_bytes": None}
        if version == 2:
            entry.update(state=state, degraded=state == "degraded", no_precreate=False, readonly=state == "readonly")
        entries.append(entry)
    return [json.dumps({"schema": "iez.oss-stats", "version": version, "oss_id": oss, "seq": seq, "time": time.time(),
                        "cpu_pct": 1.0, "mem_pct": 2.0, "interval_s": 60, "osts": entries}).encode()]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_service_stores_each_osts_policy_and_the_allocator_sees_it(backend, tmp_path: Path):
    db = fresh_db(backend, tmp_path, "lustreparams")
    proc, sys_ = tmp_path / "proc", tmp_path / "sys"
    tree_from_text(MDS_TEXT, proc, sys_)
    engine = make_engine(database_url(db))
    svc = MdsService(engine, MdsConfig(lustre_params=LustreParamsReader.from_option(f"{proc}:{sys_}")),
                     sampler=IdleNode())
    try:
        # a version-1 agent (its OSTs read as active) and a version-2 agent (a degraded and a readonly OST)
        assert svc.receive(frame(1, "oss0", 1, {0: "active", 1: "active", 2: "active"}))
        assert svc.receive(frame(2, "oss1", 1, {3: "active", 4: "degraded", 5: "readonly"}))
        assert svc.read_lustre_params()
        svc.flush_and_wait()
        rows = read(engine, lambda c: {r.ost_index: (r.state, r.pools, r.reserved_kbytes)
                                       for r in c.execute(select(OstRow)).all()})
        assert rows == {0: ("active", "flash", 3072), 1: ("active", "flash", 3072), 2: ("active", "disk", 3072),
                        3: ("inactive", "disk", 3072), 4: ("nocreate", "disk", 3072),
                        5: ("readonly", "disk scratch", 1024 * 1024)}
        with write_session(engine) as session:
            cluster = usable_cluster(session, utcnow(), 600)
        assert [(o.state, o.pools) for o in cluster.osts] == [
            ("active", ("flash",)), ("active", ("flash",)), ("active", ("disk",)), ("inactive", ("disk",)),
            ("nocreate", ("disk",)), ("readonly", ("disk", "scratch"))]
        assert [o.kbytes_avail for o in cluster.osts] == [8 * GiB_KB - 3072] * 5 + [7 * GiB_KB]
        # the site's qos settings go to the qos baseline
        assert (svc.config.placement.threshold_rr, svc.config.placement.prio_free) == (0.17, 0.90)
        status = svc.status()
        assert status["ost_states"] == {"inactive": [3], "nocreate": [4], "readonly": [5]}
        assert status["lustre"]["source"] == "procfs" and status["lustre"]["pools"]["spare"] == []
        svc.config.status_file = tmp_path / "mds-status.json"
        svc.write_status()
        shown = iez_cli("mds", "--status", "--status-file", str(svc.config.status_file))
        assert shown.returncode == 0, shown.stderr
        assert "OST states: inactive 3, nocreate 4, readonly 5\n" in shown.stdout
        assert ("Lustre parameters from procfs: pools disk (4), flash (2), scratch (1), spare (0); "
                "qos maxage_s=5 prio_free_pct=90 threshold_rr_pct=17\n") in shown.stdout
        # the administrator reactivates OST 3 and lowers prio_free: the next reading stores it, with no report
        (sys_ / "osp" / "testfs-OST0003-osc-MDT0000" / "active").write_text("1\n")
        (sys_ / "osp" / "testfs-OST0003-osc-MDT0001" / "active").write_text("1\n")
        (sys_ / "lod" / "testfs-MDT0000-mdtlov" / "qos_prio_free").write_text("50%\n")
        assert svc.read_lustre_params()
        svc.flush_and_wait()
        state = read(engine, lambda c: c.scalar(select(OstRow.state).where(OstRow.ost_index == 3)))
        assert state == "active" and svc.config.placement.prio_free == 0.5
    finally:
        svc._stop_writer()
        engine.dispose()


def test_a_failed_reading_keeps_the_last_one_and_says_why(tmp_path: Path, caplog):
    text = tmp_path / "saved.txt"
    text.write_text(MDS_TEXT.read_text())
    engine = make_engine(database_url(fresh_db("sqlite", tmp_path, "keep")))
    svc = MdsService(engine, MdsConfig(lustre_params=LustreParamsReader.from_option(str(text))), sampler=IdleNode())
    try:
        assert svc.read_lustre_params()
        text.write_text("lod.testfs-MDT0000-mdtlov.qos_prio_free=lots\n")
        assert not svc.read_lustre_params() and not svc.read_lustre_params()
        assert svc.view.lustre.osts == EXPECTED  # the previous reading stays in force
        assert f"{text}:1: lod.testfs-MDT0000-mdtlov.qos_prio_free: expected a percentage" in \
            svc.status()["lustre"]["error"]
        assert caplog.text.count("cannot read the MDS's Lustre parameters") == 1  # once per distinct error
    finally:
        svc._stop_writer()
        engine.dispose()


def test_params_json_round_trip_names_every_pool():
    params: LustreParams = parse_mds_params(parse_file(MDS_TEXT))
    doc = params.to_json()
    assert doc["pools"] == {k: list(v) for k, v in POOLS.items()}
    assert doc["osts"]["5"] == {"state": "active", "pools": ["disk", "scratch"], "reserved_kbytes": 1024 * 1024}


def test_a_source_without_osts_is_said_once(tmp_path: Path, caplog):
    empty = tmp_path / "mds"
    empty.mkdir()
    engine = make_engine(database_url(fresh_db("sqlite", tmp_path, "empty")))
    svc = MdsService(engine, MdsConfig(lustre_params=LustreParamsReader.from_option(str(empty))), sampler=IdleNode())
    try:
        for _ in range(3):
            assert svc.read_lustre_params()
        assert caplog.text.count("no osp.*-OST* parameters in") == 1
        assert svc.view.lustre.osts == {} and svc.status()["lustre"]["pools"] == {}
    finally:
        svc._stop_writer()
        engine.dispose()
