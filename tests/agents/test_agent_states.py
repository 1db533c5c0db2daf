"""OST states from the OSS's own switches (obdfilter degraded, readonly, no_precreate), from each of the
agent's readers: saved lctl text, a parameter tree and a running lctl; and message version 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agents import AgentError
from agents.lctl import STATE_ORDER, collect_osts, most_restrictive, parse_file, parse_text
from agents.message import VERSION, select_osts
from agents.procfs import LctlSource, read_tree
from iez.api.schemas import OssStats
from iez.mds.messages import decode

from agent_support import DATA, run_agent  # noqa: F401 (fixture)

STATES = DATA / "oss-states"
# name -> (state, degraded, no_precreate, readonly), read off the fixture by hand
OSS_FIXTURE = {
    "testfs-OST0000": ("active", False, False, False),
    "testfs-OST0001": ("degraded", True, False, False),
    "testfs-OST0002": ("nocreate", False, True, False),
    "testfs-OST0003": ("readonly", True, False, True),  # readonly wins over degraded
}
OLD_FIXTURE = {  # Lustre 2.12: no readonly or no_precreate switch
    "testfs-OST0004": ("active", False, None, None),
    "testfs-OST0005": ("degraded", True, None, None),
}


def states(osts: list[dict]) -> dict[str, tuple]:
    return {o["name"]: (o["state"], o["degraded"], o["no_precreate"], o["readonly"]) for o in osts}


def test_most_restrictive_state_wins():
    assert STATE_ORDER == ("active", "degraded", "nocreate", "readonly", "inactive")
    assert most_restrictive([]) == "active"
    assert most_restrictive(["degraded", "active"]) == "degraded"
    assert most_restrictive(["degraded", "nocreate"]) == "nocreate"
    assert most_restrictive(["readonly", "nocreate", "degraded"]) == "readonly"
    assert most_restrictive(["readonly", "inactive"]) == "inactive"
    with pytest.raises(ValueError, match="unknown OST state 'broken'"):
        most_restrictive(["active", "broken"])


@pytest.mark.parametrize("name, expected", [("lctl-get-param-oss.txt", OSS_FIXTURE),
                                            ("lustre-2.12-degraded-only.txt", OLD_FIXTURE)])
def test_saved_text_fixtures_give_each_osts_state_and_switches(name, expected):
    osts = select_osts(collect_osts(parse_file(STATES / name)))
    assert states(osts) == expected


def test_switches_keep_where_they_came_from():
    readings = collect_osts(parse_file(STATES / "lctl-get-param-oss.txt"))
    ost = readings["testfs-OST0003"]
    assert ost.flags == {"degraded": True, "readonly": True, "no_precreate": False}
    assert ost.origin["readonly"] == f"{STATES / 'lctl-get-param-oss.txt'}:41"


def test_a_switch_that_is_not_a_number_is_an_error_naming_the_line():
    text = "obdfilter.fs-OST0000.kbytestotal=100\nobdfilter.fs-OST0000.kbytesavail=50\nobdfilter.fs-OST0000.degraded=yes\n"
    with pytest.raises(AgentError, match=r"^saved:3: obdfilter.fs-OST0000.degraded: expected a non-negative integer"):
        collect_osts(parse_text(text, "saved"))


def test_any_non_zero_switch_counts_as_on():
    text = "obdfilter.fs-OST0000.kbytestotal=100\nobdfilter.fs-OST0000.kbytesavail=50\nobdfilter.fs-OST0000.readonly=2\n"
    assert select_osts(collect_osts(parse_text(text)))[0]["state"] == "readonly"


def write_tree(proc: Path, sys_: Path) -> None:
    """Lustre 2.12+ layout: single values (and the switches) in sysfs, stats in procfs."""
    for index, (state, degraded, no_precreate, readonly) in enumerate(OSS_FIXTURE.values()):
        name = f"testfs-OST{index:04x}"
        (proc / "obdfilter" / name).mkdir(parents=True)
        (proc / "obdfilter" / name / "stats").write_text("snapshot_time             1709306082.1 secs.nsecs\n")
        ost = sys_ / "obdfilter" / name
        ost.mkdir(parents=True)
        (ost / "kbytestotal").write_text("4108388\n")
        (ost / "kbytesavail").write_text("4000000\n")
        for switch, on in (("degraded", degraded), ("no_precreate", no_precreate), ("readonly", readonly)):
            (ost / switch).write_text("1\n" if on else "0\n")


def test_parameter_tree_gives_the_same_states(tmp_path: Path):
    proc, sys_ = tmp_path / "proc", tmp_path / "sys"
    write_tree(proc, sys_)
    assert states(select_osts(collect_osts(read_tree((str(proc), str(sys_)))))) == OSS_FIXTURE


@pytest.mark.slow
def test_cli_on_a_tree_publishes_version_2_with_states(tmp_path: Path, run_agent):
    proc, sys_ = tmp_path / "proc", tmp_path / "sys"
    write_tree(proc, sys_)
    done = run_agent("--once", "--json", "--root", f"{proc}:{sys_}", "--oss-id", "oss7")
    assert done.returncode == 0, done.stderr
    msg = json.loads(done.stdout)
    assert msg["version"] == VERSION == 2
    assert states(msg["osts"]) == OSS_FIXTURE


def fake_lctl(bindir: Path, fixture: Path) -> None:
    bindir.mkdir()
    script = bindir / "lctl"
    script.write_text(f"#!/bin/sh\ncat {fixture}\n")
    script.chmod(0o755)


@pytest.mark.slow
def test_running_lctl_gives_the_same_states(tmp_path: Path, run_agent):
    fake_lctl(tmp_path / "bin", STATES / "lctl-get-param-oss.txt")
    assert states(select_osts(collect_osts(LctlSource(str(tmp_path / "bin" / "lctl")).read()))) == OSS_FIXTURE
    done = run_agent("--once", "--json", "--oss-id", "oss7",
                     env={"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    msg = json.loads(done.stdout)
    assert msg["source"] == "lctl" and states(msg["osts"]) == OSS_FIXTURE


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lctl-get-param-oss.txt", "lustre-2.12-degraded-only.txt"])
def test_version_2_messages_are_read_the_same_by_the_mds_and_the_api(name, run_agent):
    done = run_agent("--once", "--json", "--lctl-output", str(STATES / name), "--oss-id", "oss7")
    assert done.returncode == 0, done.stderr
    frame = done.stdout.strip().encode()
    report = decode([frame])
    api = OssStats.model_validate_json(frame).to_report()
    expected = OSS_FIXTURE if name.startswith("lctl") else OLD_FIXTURE
    assert [o.state for o in report.osts] == [o.state for o in api.osts] == [v[0] for v in expected.values()]
    assert [o.readonly for o in report.osts] == [o.readonly for o in api.osts] == [v[3] for v in expected.values()]
