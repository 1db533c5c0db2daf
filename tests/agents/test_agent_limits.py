"""The agent enforces the schema's limits itself and fails loudly; ``--once`` to no MDS is an error."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agents.message import MAX_FRAME_BYTES, MAX_OSTS
from iez.mds import messages

pytestmark = pytest.mark.slow


def agent(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agents.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def saved(tmp_path: Path, fsname: str, count: int) -> Path:
    path = tmp_path / "lctl.txt"
    path.write_text("".join(f"obdfilter.{fsname}-OST{i:04x}.kbytestotal=1048576\n"
                            f"obdfilter.{fsname}-OST{i:04x}.kbytesavail=524288\n" for i in range(count)))
    return path


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def test_the_agents_limits_are_the_mdss():
    assert (MAX_OSTS, MAX_FRAME_BYTES) == (10_000, messages.MAX_FRAME_BYTES)


def test_ten_thousand_osts_pass_and_one_more_fails_loudly(tmp_path):
    done = agent("--once", "--json", "--oss-id", "big", "--lctl-output", str(saved(tmp_path, "fs", MAX_OSTS)))
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["osts"]) == MAX_OSTS
    done = agent("--once", "--json", "--oss-id", "big", "--lctl-output", str(saved(tmp_path, "fs", MAX_OSTS + 1)))
    assert done.returncode == 2 and done.stdout == ""
    assert "this OSS has 10001 OSTs; a message holds at most 10000" in one_line(done)


def test_an_ost_name_past_255_characters_fails_loudly(tmp_path):
    done = agent("--once", "--json", "--oss-id", "x", "--lctl-output", str(saved(tmp_path, "f" * 250, 1)))
    assert done.returncode == 2 and done.stdout == ""
    assert "OST name 'ffff" in one_line(done) and "is 258 characters; the schema allows 1..255" in done.stderr


def test_a_message_past_the_mdss_frame_limit_fails_loudly(tmp_path):
    # 10,000 OSTs whose names are 250 characters: within the count and name limits, over 4 MiB in all
    done = agent("--once", "--json", "--oss-id", "x", "--lctl-output", str(saved(tmp_path, "f" * 242, MAX_OSTS)))
    assert done.returncode == 2 and done.stdout == ""
    assert f"the MDS takes at most {MAX_FRAME_BYTES}" in one_line(done)


@pytest.mark.parametrize("extra", [[], ["--count", "2"]], ids=["once", "count"])
def test_once_to_an_absent_mds_exits_non_zero(tmp_path, extra):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    args = ["--once"] if not extra else extra
    done = agent(*args, "--oss-id", "x", "--mds", f"tcp://127.0.0.1:{port}", "--interval", "1",
                 "--lctl-output", str(saved(tmp_path, "fs", 2)))
    assert done.returncode == 2
    assert "no MDS answered at tcp://127.0.0.1:" in done.stderr and "nothing was published" in done.stderr


def test_an_ost_above_the_schemas_size_fails_loudly(tmp_path):
    path = tmp_path / "huge.txt"
    path.write_text(f"obdfilter.fs-OST0005.kbytestotal={2**50}\nobdfilter.fs-OST0005.kbytesavail={2**50}\n")
    done = agent("--once", "--json", "--oss-id", "x", "--lctl-output", str(path))
    assert done.returncode == 2 and done.stdout == ""
    assert "fs-OST0005: kbytestotal 1125899906842624 KiB is above the schema's 4398046511104" in one_line(done)


def test_the_mds_drops_an_ost_claim_above_the_schemas_size():
    frame = {"oss_id": "x", "seq": 1, "time": 1.7e9, "cpu_pct": 1, "mem_pct": 1,
             "osts": [{"name": "fs-OST0005", "index": 5, "kbytes_total": 2**50, "kbytes_avail": 2**50}]}
    with pytest.raises(messages.Rejected, match="invalid"):
        messages.decode([json.dumps(frame).encode()])
