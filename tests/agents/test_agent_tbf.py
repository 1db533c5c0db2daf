"""iez-agent --tbf-rules on a Lustre server: the TBF policy is set, rules that went away are stopped, each rule is
(re)started with its rate, only this OSS's rules are taken, and the rules are applied again only when the file
changes. lctl is a script standing in for the server's (it records its arguments), as no Lustre server runs
here; the emulated-tree path is tested end to end in tests/emulate/test_tbf_shares.py."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from agents import AgentError
from agents.tbf import TbfRules, load


def recording_lctl(tmp_path: Path, fail_on: str = "") -> tuple[Path, Path]:
    log = tmp_path / "lctl.log"
    script = tmp_path / "lctl"
    check = f'case "$2" in *"{fail_on}"*) echo "error: set_param: Invalid argument" >&2; exit 22;; esac\n' \
        if fail_on else ""
    script.write_text(f'#!/bin/sh\nprintf "%s|%s\\n" "$1" "$2" >> {log}\n{check}exit 0\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


def rules_file(path: Path, rules: list[dict]) -> Path:
    path.write_text(json.dumps({"rpc_size": 4 << 20, "rules": rules}))
    return path


def test_rules_go_through_lctl_and_only_when_the_file_changes(tmp_path):
    lctl, log = recording_lctl(tmp_path)
    path = rules_file(tmp_path / "rules.json", [
        {"oss": "oss1", "name": "iez_stage", "jobid": "stage.*", "rate": 30},
        {"oss": "oss2", "name": "iez_other", "jobid": "other.*", "rate": 5},
        {"oss": "oss1", "name": "iez_ior", "jobid": "ior.*", "rate": 53}])
    rules = TbfRules(path, "oss1", lctl=str(lctl))
    assert rules.refresh()
    assert log.read_text().splitlines() == [
        "set_param|ost.OSS.ost_io.nrs_policies=tbf jobid",
        "set_param|ost.OSS.ost_io.nrs_tbf_rule=stop iez_stage",
        "set_param|ost.OSS.ost_io.nrs_tbf_rule=start iez_stage jobid={stage.*} rate=30",
        "set_param|ost.OSS.ost_io.nrs_tbf_rule=stop iez_ior",
        "set_param|ost.OSS.ost_io.nrs_tbf_rule=start iez_ior jobid={ior.*} rate=53"]
    assert not rules.refresh()  # unchanged file: nothing run again
    log.unlink()
    rules_file(path, [{"oss": "oss1", "name": "iez_ior", "jobid": "ior.*", "rate": 40}])
    os.utime(path, ns=(1, 1))  # a new mtime even within the same clock tick
    assert rules.refresh()
    lines = log.read_text().splitlines()
    assert "set_param|ost.OSS.ost_io.nrs_tbf_rule=stop iez_stage" in lines  # the rule that went away
    assert lines[-1] == "set_param|ost.OSS.ost_io.nrs_tbf_rule=start iez_ior jobid={ior.*} rate=40"


def test_a_refused_rule_or_a_bad_file_is_said_once_and_changes_nothing(tmp_path, caplog):
    lctl, log = recording_lctl(tmp_path, fail_on="start")
    path = rules_file(tmp_path / "rules.json", [{"oss": "oss1", "name": "iez_a", "jobid": "a.*", "rate": 3}])
    rules = TbfRules(path, "oss1", lctl=str(lctl))
    with caplog.at_level("WARNING", logger="iez.agent"):
        assert not rules.refresh()
    assert "lctl set_param ost.OSS.ost_io.nrs_tbf_rule=start iez_a jobid={a.*} rate=3 failed: error: set_param: " \
           "Invalid argument" in caplog.text
    path.write_text("{not json")
    os.utime(path, ns=(2, 2))
    assert not rules.refresh()
    assert "not JSON" in caplog.text


@pytest.mark.parametrize("rule, message", [
    ({"oss": "oss1", "name": "a name", "jobid": "a", "rate": 1}, "name 'a name'"),
    ({"oss": "oss1", "name": "a", "jobid": "{a}", "rate": 1}, "jobid"),
    ({"oss": "oss1", "name": "a", "jobid": "a", "rate": 0}, "rate 0"),
])
def test_bad_rules_are_named(tmp_path, rule, message):
    with pytest.raises(AgentError, match=message):
        load(rules_file(tmp_path / "r.json", [rule]), "oss1")


def test_the_agent_writes_an_emulated_oss_tree(tmp_path):
    from agents.cli import main

    root = tmp_path / "oss1"
    (root / "obdfilter" / "fs-OST0001").mkdir(parents=True)
    for name, value in (("kbytestotal", "1048576"), ("kbytesfree", "524288"), ("kbytesavail", "524288")):
        (root / "obdfilter" / "fs-OST0001" / name).write_text(value + "\n")
    path = rules_file(tmp_path / "rules.json", [{"oss": "oss1", "name": "iez_a", "jobid": "a", "rate": 7}])
    assert main(["--once", "--json", "--root", str(root), "--oss-id", "oss1", "--tbf-rules", str(path)]) == 0
    tree = root / "ost" / "OSS" / "ost_io"
    assert (tree / "nrs_tbf_rule").read_text() == "start iez_a jobid={a} rate=7\n"
    assert (tree / "nrs_policies").read_text() == "tbf jobid\n"
    # saved lctl text is no OSS to apply rules to
    saved = tmp_path / "saved.txt"
    saved.write_text("obdfilter.fs-OST0001.kbytestotal=1048576\n")
    assert main(["--once", "--json", "--lctl-output", str(saved), "--oss-id", "oss1", "--tbf-rules", str(path)]) == 2
