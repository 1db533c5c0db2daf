"""lctl text with IPv6 NIDs in export parameter names, and parameters printed twice (fixtures in
tests/data/lustre-params/nids, written in the format of the real captures beside them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agents.lctl import collect_osts, parse_file, parse_text

NIDS = Path(__file__).resolve().parents[1] / "data" / "lustre-params" / "nids"


def agent_once(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agents.cli", "--once", "--json", "--oss-id", "oss6",
                           "--lctl-output", str(path)], capture_output=True, text=True, timeout=60)


def test_ipv6_export_names_start_parameters_of_their_own():
    names = [p.name for p in parse_file(NIDS / "ipv6-exports.txt")]
    assert "obdfilter.fs6-OST0000.exports.fd00::5@tcp.uuid" in names
    assert "obdfilter.fs6-OST0000.exports.fd00::5@tcp.stats" in names
    assert "obdfilter.fs6-OST0000.exports.2001:db8::a:17@o2ib.stats" in names
    assert "obdfilter.fs6-OST0000.exports.::ffff:10.0.0.9@tcp.ldlm_stats" in names
    assert len(names) == 12


def test_an_exports_counters_are_never_the_osts():
    osts = collect_osts(parse_file(NIDS / "ipv6-exports.txt"))
    first, second = osts["fs6-OST0000"], osts["fs6-OST0001"]
    # the OST's own stats block, not the client's that follows it (12288 / 4096)
    assert (first.kbytes_total, first.kbytes_avail, first.read_bytes, first.write_bytes) == \
        (4108388, 4037172, 5242880, 7340032)
    # an OST with no stats of its own has no counters, whatever its clients' blocks say
    assert (second.kbytes_total, second.kbytes_avail, second.read_bytes, second.write_bytes) == \
        (8216776, 8000000, None, None)
    assert first.flags == {"degraded": False} and second.flags == {"readonly": False}


def test_the_agent_publishes_the_ipv6_capture():
    done = agent_once(NIDS / "ipv6-exports.txt")
    assert done.returncode == 0, done.stderr
    message = json.loads(done.stdout)
    assert [(o["name"], o["kbytes_avail"], o["read_bytes"], o["write_bytes"]) for o in message["osts"]] == [
        ("fs6-OST0000", 4037172, 5242880, 7340032), ("fs6-OST0001", 8000000, None, None)]


def test_a_colon_in_a_value_line_does_not_start_a_parameter():
    params = parse_text("obdfilter.fs-OST0000.exports.fd00::5@tcp.export=\n"
                        "fd00::5@tcp:\n    name: fs-OST0000\n    connect_flags: a=b\n"
                        "obdfilter.fs-OST0000.kbytestotal=10\n")
    assert [p.name for p in params] == ["obdfilter.fs-OST0000.exports.fd00::5@tcp.export",
                                        "obdfilter.fs-OST0000.kbytestotal"]
    assert "connect_flags: a=b" in params[0].value


def test_a_parameter_printed_twice_warns_and_the_later_one_wins():
    warned: list[str] = []
    ost = collect_osts(parse_file(NIDS / "duplicates.txt"), warn=warned.append)["fs-OST0000"]
    # capacity, switch and counters: each from its later printing; the osd-* value in between loses to obdfilter
    assert (ost.kbytes_total, ost.kbytes_avail, ost.write_bytes, ost.flags) == \
        (4108388, 3900000, 9437184, {"degraded": False})
    assert ost.state == "active"
    assert len(warned) == 3
    assert any("obdfilter.fs-OST0000.kbytesavail is printed twice" in w and "duplicates.txt:2" in w
               and "duplicates.txt:8" in w and w.endswith("using the later one") for w in warned)


@pytest.mark.slow
def test_the_agent_says_so_on_stderr_and_publishes_the_later_values():
    done = agent_once(NIDS / "duplicates.txt")
    assert done.returncode == 0, done.stderr
    osts = json.loads(done.stdout)["osts"]
    assert [(o["kbytes_avail"], o["write_bytes"], o["state"]) for o in osts] == [(3900000, 9437184, "active")]
    assert done.stderr.count("is printed twice") == 3
    assert "iez-agent: warning: obdfilter.fs-OST0000.degraded is printed twice" in done.stderr
