"""Every message the agent builds validates against the MDS's model (iez.api.schemas.OssStats),
and ``iez-agent --once --lctl-output F --oss-id ID --json`` prints the contract."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from agents.message import SCHEMA, VERSION, Sequencer, build_message, encode, select_osts
from agents.lctl import collect_osts, parse_file
from iez.api.schemas import OssStats

from agent_support import DATA, FACTS, FIXTURES, UNKNOWN_STATE, run_agent  # noqa: F401 (fixture)


ROOT = Path(__file__).resolve().parents[2]
TOP_FIELDS = ("schema", "version", "oss_id", "host", "seq", "time", "interval_s", "cpu_pct", "mem_pct",
              "source", "osts")
OST_FIELDS = ("name", "index", "kbytes_total", "kbytes_avail", "read_bytes", "write_bytes", "state", "degraded",
              "no_precreate", "readonly")


def check_message(msg: dict, oss_id: str, facts: dict[str, tuple]) -> OssStats:
    assert tuple(msg) == TOP_FIELDS
    assert (msg["schema"], msg["version"], msg["oss_id"]) == (SCHEMA, VERSION, oss_id)
    assert isinstance(msg["seq"], int) and isinstance(msg["time"], float)
    assert abs(msg["time"] - time.time()) < 60
    assert 0 <= msg["cpu_pct"] <= 100 and 0 <= msg["mem_pct"] <= 100
    for ost in msg["osts"]:
        assert tuple(ost) == OST_FIELDS
    got = {o["name"]: (o["index"], o["kbytes_total"], o["kbytes_avail"], o["read_bytes"], o["write_bytes"])
           for o in msg["osts"]}
    assert got == facts
    model = OssStats.model_validate(msg)
    assert model.oss_id == oss_id and model.seq == msg["seq"]
    assert [o.index for o in model.osts] == [o["index"] for o in msg["osts"]]
    assert abs(model.naive_utc_time().timestamp() - msg["time"]) < 1 or model.time.timestamp() == msg["time"]
    # and the same after the wire encoding
    assert OssStats.model_validate_json(encode(msg)) == model
    return model


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_message_from_every_fixture_validates(path: Path, tmp_path: Path):
    osts = select_osts(collect_osts(parse_file(path)))
    msg = build_message(oss_id="oss1", host="h", seq=Sequencer().next(), sample_time=time.time(),
                        interval_s=60, cpu_pct=1.5, mem_pct=99.99, osts=osts, source="file")
    check_message(msg, "oss1", FACTS[path.name])
    # the no-final-newline and CRLF variants give the same valid message
    for variant, data in (("nonl", path.read_text().rstrip("\n")), ("crlf", path.read_text().replace("\n", "\r\n"))):
        copy = tmp_path / f"{variant}-{path.name}"
        copy.write_bytes(data.encode())
        msg2 = dict(msg, osts=select_osts(collect_osts(parse_file(copy))))
        check_message(msg2, "oss1", FACTS[path.name])


@pytest.mark.slow
@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_cli_once_json_for_every_fixture(path: Path, run_agent):
    done = run_agent("--once", "--lctl-output", str(path), "--oss-id", "oss1", "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    msg = json.loads(lines[0])
    check_message(msg, "oss1", FACTS[path.name])
    assert msg["interval_s"] == 60 and msg["source"] == "file"
    for line in done.stderr.splitlines():  # only warnings about OSTs without capacity
        assert line.startswith("iez-agent: warning: skipping "), line


@pytest.mark.slow
def test_contract_example_ex8761(run_agent):
    done = run_agent("--once", "--lctl-output", str(DATA / "lustre-2.15-ex8761-lctl.txt"), "--oss-id", "oss1",
                     "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    msg = json.loads(done.stdout)
    assert msg["oss_id"] == "oss1"
    assert msg["osts"] == [
        {"name": "fs-OST0000", "index": 0, "kbytes_total": 4108388, "kbytes_avail": 4037172,
         "read_bytes": None, "write_bytes": None, **UNKNOWN_STATE},
        {"name": "fs-OST0001", "index": 1, "kbytes_total": 4108388, "kbytes_avail": 4037172,
         "read_bytes": None, "write_bytes": None, **UNKNOWN_STATE},
    ]


def test_seq_is_time_based_and_keeps_increasing_across_restarts():
    first = Sequencer()
    a = [first.next() for _ in range(5)]
    assert a == list(range(a[0], a[0] + 5))
    assert abs(a[0] - time.time() * 1000) < 5000  # Unix milliseconds
    time.sleep(0.01)
    restarted = Sequencer()
    assert restarted.next() > a[-1]
    assert Sequencer(start=7).next() == 7


def test_encoding_is_one_utf8_json_object():
    msg = build_message(oss_id="ÖSS-1", host="h", seq=1, sample_time=1716295737.2866, interval_s=1.5, cpu_pct=0.0,
                        mem_pct=0.0, osts=[], source="procfs")
    data = encode(msg)
    assert isinstance(data, bytes) and b"\n" not in data
    assert json.loads(data.decode("utf-8")) == msg
    assert "ÖSS-1".encode() in data
    assert msg["time"] == 1716295737.287 and msg["interval_s"] == 1.5
    assert OssStats.model_validate_json(data).oss_id == "ÖSS-1"


def test_schema_document_covers_every_field():
    doc = (ROOT / "agents" / "SCHEMA.md").read_text()
    for field in TOP_FIELDS + OST_FIELDS:
        assert re.search(rf"\| `{field}` \|", doc), field
    assert "iez.oss-stats" in doc and "unknown major version" in doc
