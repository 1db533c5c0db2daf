"""Parameter trees (/proc/fs/lustre, /sys/fs/lustre layouts) and running lctl."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from agents import AgentError
from agents.lctl import collect_osts
from agents.message import select_osts
from agents.procfs import (DEFAULT_ROOTS, LCTL_PATTERNS, FileSource, LctlSource, TreeSource, make_source,
                           read_tree, split_roots)
from iez.api.schemas import OssStats

from agent_support import DATA, TREE_OSTS, UNKNOWN_STATE, proc_tree, run_agent  # noqa: F401 (fixtures)

def test_tree_obdfilter_and_osd_layouts(proc_tree: Path):
    params = read_tree((str(proc_tree),))
    names = sorted(p.name for p in params)
    assert names == ["obdfilter.fs-OST0000.degraded", "obdfilter.fs-OST0000.kbytesavail",
                     "obdfilter.fs-OST0000.kbytestotal", "obdfilter.fs-OST0000.no_precreate",
                     "obdfilter.fs-OST0000.readonly", "obdfilter.fs-OST0000.stats", "obdfilter.fs-OST000a.stats",
                     "osd-ldiskfs.fs-OST000a.kbytesavail", "osd-ldiskfs.fs-OST000a.kbytestotal"]
    assert select_osts(collect_osts(params)) == TREE_OSTS


def test_tree_split_over_proc_and_sys_roots(tmp_path: Path, proc_tree: Path):
    # like Lustre 2.12+: single values in /sys, stats in /proc; the first root wins on duplicates
    proc, sys_ = tmp_path / "proc", tmp_path / "sys"
    (proc / "obdfilter" / "fs-OST0000").mkdir(parents=True)
    (proc / "obdfilter" / "fs-OST0000" / "stats").write_text(
        (proc_tree / "obdfilter" / "fs-OST0000" / "stats").read_text())
    (proc / "obdfilter" / "fs-OST0000" / "kbytesavail").write_text("1000\n")
    (sys_ / "obdfilter" / "fs-OST0000").mkdir(parents=True)
    (sys_ / "obdfilter" / "fs-OST0000" / "kbytestotal").write_text("4000\n")
    (sys_ / "obdfilter" / "fs-OST0000" / "kbytesavail").write_text("3000\n")
    (sys_ / "osd-zfs" / "fs-OST0000").mkdir(parents=True)
    (sys_ / "osd-zfs" / "fs-OST0000" / "kbytesavail").write_text("2000\n")
    osts = select_osts(collect_osts(read_tree((str(proc), str(sys_), str(tmp_path / "absent")))))
    assert osts == [{"name": "fs-OST0000", "index": 0, "kbytes_total": 4000, "kbytes_avail": 1000,
                     "read_bytes": 5000000, "write_bytes": 7000000, **UNKNOWN_STATE}]


def test_tree_malformed_value_names_the_file(proc_tree: Path):
    bad = proc_tree / "obdfilter" / "fs-OST0000" / "kbytesavail"
    bad.write_text("lots\n")
    with pytest.raises(AgentError, match=f"^{bad}:1: .*'lots'"):
        collect_osts(read_tree((str(proc_tree),)))


@pytest.mark.slow
def test_cli_root_tree(proc_tree: Path, run_agent):
    done = run_agent("--once", "--json", "--root", str(proc_tree), "--oss-id", "oss1")
    assert done.returncode == 0, done.stderr
    msg = json.loads(done.stdout)
    assert msg["source"] == "procfs" and msg["osts"] == TREE_OSTS
    OssStats.model_validate(msg)


@pytest.mark.slow
def test_cli_no_osts_names_where_it_looked(tmp_path: Path, run_agent):
    empty = tmp_path / "empty"
    (empty / "osd-ldiskfs" / "fs-MDT0000").mkdir(parents=True)
    done = run_agent("--once", "--json", "--root", f"{empty}:{tmp_path / 'nothing'}")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("iez-agent: error: no OSTs found in ")
    assert f"{empty}/obdfilter/*/" in done.stderr and f"{tmp_path / 'nothing'}/osd-*/*/" in done.stderr


def test_split_roots_and_source_choice(tmp_path: Path, monkeypatch):
    assert split_roots(None) == DEFAULT_ROOTS == ("/proc/fs/lustre", "/sys/fs/lustre")
    assert split_roots("/a:/b") == ("/a", "/b") and split_roots(["/a", "/b:/c"]) == ("/a", "/b", "/c")
    monkeypatch.setenv("PATH", str(tmp_path))  # no lctl here
    assert isinstance(make_source(), TreeSource) and make_source().roots == DEFAULT_ROOTS
    assert isinstance(make_source(lctl_output="f"), FileSource)
    assert make_source(roots="/x").roots == ("/x",)
    with pytest.raises(AgentError, match="lctl is not on PATH"):
        make_source("lctl")
    with pytest.raises(AgentError, match="needs --lctl-output"):
        make_source("file")


def fake_lctl(directory: Path, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "lctl"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


@pytest.mark.slow
def test_lctl_on_path_is_run_with_the_right_patterns(tmp_path: Path, run_agent):
    bindir = tmp_path / "bin"
    argv_log = tmp_path / "argv"
    fake_lctl(bindir, f'printf "%s\\n" "$@" > {argv_log}\n'
                      f'cat {DATA / "lustre-2.14.0-ddn133.txt"}\n'
                      'echo "error: get_param: param_path osd-zfs: No such file or directory" >&2\nexit 2\n')
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    done = run_agent("--once", "--json", "--oss-id", "ddn", env=env)
    assert done.returncode == 0, done.stderr
    assert argv_log.read_text().split() == ["get_param", *LCTL_PATTERNS]
    assert LCTL_PATTERNS == ("obdfilter.*.kbytestotal", "obdfilter.*.kbytesavail", "obdfilter.*.stats",
                             "osd-*.*.kbytestotal", "osd-*.*.kbytesavail", "obdfilter.*.degraded",
                             "obdfilter.*.readonly", "obdfilter.*.no_precreate", "obdfilter.*.job_stats")
    msg = json.loads(done.stdout)
    assert msg["source"] == "lctl"
    assert [(o["name"], o["read_bytes"]) for o in msg["osts"]] == [("ai400x2-OST0000", 58370831220736),
                                                                   ("ai400x2-OST0001", 71484548943872)]
    OssStats.model_validate(msg)


def test_lctl_failure_is_reported(tmp_path: Path):
    script = fake_lctl(tmp_path / "bin", 'echo "error: get_param: no such device" >&2\nexit 19\n')
    with pytest.raises(AgentError, match="get_param failed: error: get_param: no such device"):
        LctlSource(str(script)).read()
    garbage = fake_lctl(tmp_path / "bin2", 'echo "Usage: something else"\n')
    with pytest.raises(AgentError, match=r"output of .*:1: expected a 'param.path=value' line"):
        LctlSource(str(garbage)).read()
