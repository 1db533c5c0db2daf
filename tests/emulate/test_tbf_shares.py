"""Shares for applications as NRS TBF rules (issue 16, item 6): ``iez shares rules`` turns a shares file into one
rule per application per OSS; each agent keeps its OSS's rules in force (in an emulated OSS's tree, as
``lctl set_param ost.OSS.ost_io.nrs_tbf_rule`` would on a server); the emulated bandwidth then limits a process
of that job id (its IEZ_IO_CLASS) to the rule's rate through that OSS, and leaves other jobs alone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iez.emulate.bandwidth import MiB, Table
from iez.shares import SharesError, parse, read_tree_rules
from test_bandwidth_emulation import env, lib, timed, with_layout  # noqa: F401 (lib is a fixture)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def iez(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "iez.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, **kw)


def free_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def test_rules_follow_the_shares_and_each_oss_bandwidth(tmp_path):
    desc = {"oss": [{"id": "oss0", "bandwidth_mib_s": 400, "osts": [{"index": 0, "kbytes_total": 1 << 20,
                                                                      "kbytes_avail": 1 << 20, "bandwidth_mib_s": 300}]},
                    {"id": "oss1", "bandwidth_mib_s": 1000, "osts": [{"index": 1, "kbytes_total": 1 << 20,
                                                                       "kbytes_avail": 1 << 20, "bandwidth_mib_s": 200}]}]}
    (tmp_path / "cluster.json").write_text(json.dumps(desc))
    (tmp_path / "shares.json").write_text(json.dumps({"shares": [
        {"app": "stage-in", "share": 0.25}, {"app": "ior", "weight": 3}, {"app": "hacc", "weight": 1}]}))
    done = iez("shares", "rules", "--shares", str(tmp_path / "shares.json"), "--cluster", str(tmp_path / "cluster.json"),
               "--json")
    assert done.returncode == 0, done.stderr
    rules = {(r["oss"], r["name"]): r for r in json.loads(done.stdout)["rules"]}
    # oss0 gives 300 MiB/s (its one OST), oss1 200: a quarter capped, the rest 3:1; 4 MiB RPCs, rounded up
    assert rules["oss0", "iez_stage_in"]["rate"] == 19 and rules["oss1", "iez_stage_in"]["rate"] == 13
    assert rules["oss0", "iez_ior"]["bytes_per_s"] == round(0.75 * 300 * MiB * 3 / 4)
    assert rules["oss0", "iez_ior"]["jobid"] == "ior.*" and rules["oss1", "iez_hacc"]["rate"] == 10
    text = iez("shares", "rules", "--shares", str(tmp_path / "shares.json"), "--cluster", str(tmp_path / "cluster.json"))
    assert 'lctl set_param ost.OSS.ost_io.nrs_tbf_rule="start iez_stage_in jobid={stage-in.*} rate=19"' in text.stdout
    assert text.stdout.count('nrs_policies="tbf jobid"') == 2


@pytest.mark.parametrize("doc, message", [
    ({"shares": [{"app": "a", "share": 1.5}]}, "share 1.5 must be a fraction"),
    ({"shares": [{"app": "a", "share": 0.5, "weight": 1}]}, "exactly one of share"),
    ({"shares": [{"app": "a", "weight": 1}, {"app": "a", "weight": 2}]}, "appears twice"),
    ({"shares": [{"app": "a", "share": 1.0}, {"app": "b", "weight": 1}]}, "nothing is left"),
    ({"shares": [{"app": "a b", "weight": 1}]}, "app 'a b'"),
    ({"shares": [{"app": "a", "weight": 1}], "jobid": "{app} x"}, "jobid"),
    ({"shares": []}, "expected"),
])
def test_bad_shares_files_are_refused_naming_the_entry(doc, message):
    with pytest.raises(SharesError, match=message):
        parse(json.dumps(doc), "shares.json")


def test_agents_keep_the_rules_and_the_emulated_bandwidth_honours_them(lib, tmp_path):  # noqa: F811
    desc = {"oss": [{"id": f"oss{k}", "bandwidth_mib_s": 80, "osts": [
        {"index": 2 * k + j, "kbytes_total": 1 << 20, "kbytes_avail": 1 << 20, "bandwidth_mib_s": 80}
        for j in range(2)]} for k in range(2)]}
    (tmp_path / "cluster.json").write_text(json.dumps(desc))
    # in emulation a job id is an IEZ_IO_CLASS, so the pattern is the application's name itself
    (tmp_path / "shares.json").write_text(json.dumps({"jobid": "{app}", "shares": [{"app": "stage-in", "share": 0.25}]}))
    rules = iez("shares", "rules", "--shares", str(tmp_path / "shares.json"), "--cluster",
                str(tmp_path / "cluster.json"), "--json")
    assert rules.returncode == 0, rules.stderr
    (tmp_path / "rules.json").write_text(rules.stdout)
    root, data = tmp_path / "root", tmp_path / "data"
    emulation = subprocess.Popen([sys.executable, "-m", "iez.cli", "cluster", "emulate", "--cluster",
                                  str(tmp_path / "cluster.json"), "--root", str(root), "--data", str(data),
                                  "--insecure", "--mds", free_endpoint(), "--interval", "0.5",
                                  "--tbf-rules", str(tmp_path / "rules.json")],
                                 cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        limit = 0.0
        while time.monotonic() < deadline:
            if (root / "bandwidth.shm").exists() and read_tree_rules(root / "oss0"):
                table = Table(root)
                limit = table.tbf(0, "stage-in")
                table.close()
                if limit:
                    break
            time.sleep(0.2)
        assert limit == 5 * 4 * MiB, (limit, read_tree_rules(root / "oss0"))  # 25 % of 80 MiB/s: 5 RPCs of 4 MiB
        assert (root / "oss0" / "ost" / "OSS" / "ost_io" / "nrs_policies").read_text() == "tbf jobid\n"
        staged, job = with_layout(data / "staged", [0]), with_layout(data / "job", [1])
        dd = ["dd", "if=/dev/zero", "bs=1M", "count=10", "conv=notrunc", "status=none"]
        capped = timed([dd + [f"of={staged}"]], {**env(lib, root), "IEZ_IO_CLASS": "stage-in"})
        assert capped >= 10 / 20 * 0.97  # 10 MiB through oss0 at 20 MiB/s
        free = timed([dd + [f"of={job}"]], env(lib, root))  # another job: the OST's 80 MiB/s
        assert free < capped * 0.6
    finally:
        emulation.send_signal(signal.SIGTERM)
        out, _ = emulation.communicate(timeout=30)
    assert emulation.returncode == 0, out
