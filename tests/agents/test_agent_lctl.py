"""The lctl get_param parser on every real fixture, and on the awkward shapes of text."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents import AgentError
from agents.lctl import ParseError, collect_osts, ost_index, parse_file, parse_stats, parse_text
from agents.message import select_osts

from agent_support import DATA, FACTS, FIXTURES, UNKNOWN_STATE

# parameters per file (lines matching ^name=) and the last one with its line number
PARAMS = {
    "exascaler-6.2.0-params.txt": (110, "ldlm.services.ldlm_cbd.stats", 327),
    "lustre-2.14.0-ddn133.txt": (151, "ldlm.services.ldlm_cbd.stats", 1170),
    "lustre-2.14.0-ddn145-stats.txt": (135, "qmt.fs-QMT0000.md-0x0.glb-grp", 619),
    "lustre-2.15-ex8761-lctl.txt": (108, "ldlm.services.ldlm_cbd.stats", 318),
    "osd-active.txt": (30, "osd-ldiskfs.ai400x2-OST0001.brw_stats", 125),
    "osd.txt": (30, "osd-ldiskfs.exa01-OST0013.brw_stats", 121),
}
INCOMPLETE = {"osd.txt": {"fs-OST0003", "exa01-OST0013"}, "osd-active.txt": {"ai400x2-OST0003"}}


def usable(params) -> dict[str, tuple]:
    osts = select_osts(collect_osts(params))
    return {o["name"]: (o["index"], o["kbytes_total"], o["kbytes_avail"], o["read_bytes"], o["write_bytes"])
            for o in osts}


def test_every_fixture_has_facts():
    assert {p.name for p in FIXTURES} == set(FACTS) == set(PARAMS)


@pytest.mark.parametrize("name", sorted(FACTS))
def test_fixture_osts(name):
    params = parse_file(DATA / name)
    assert usable(params) == FACTS[name]
    seen = set(collect_osts(params))
    assert seen == set(FACTS[name]) | INCOMPLETE.get(name, set())
    assert not any("MDT" in n or "MGS" in n for n in seen)


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_fixture_params_and_lines(name):
    params = parse_file(DATA / name)
    count, last, line = PARAMS[name]
    assert len(params) == count
    assert (params[-1].name, params[-1].line) == (last, line)
    assert all(p.source == str(DATA / name) for p in params)


def first_of_each(params):
    out = {}
    for p in params:
        out.setdefault(p.name, p)
    return out


def test_multiline_values_ex8761():
    params = first_of_each(parse_file(DATA / "lustre-2.15-ex8761-lctl.txt"))
    uuids = params["mdt.fs-MDT0000.exports.0@lo.uuid"]
    assert uuids.line == 5
    assert uuids.value.splitlines() == ["fs-MDT0000-lwp-OST0000_UUID", "fs-MDT0000-lwp-MDT0000_UUID",
                                        "fs-MDT0000-lwp-OST0001_UUID"]
    assert params["mdt.fs-MDT0000.exports.10.73.20.12@tcp.uuid"].line == 9
    brw = params["osd-ldiskfs.MGS.brw_stats"]
    assert brw.line == 68
    assert brw.value.startswith("snapshot_time:            1701885337.507664664 secs.nsecs")
    assert "pages per bulk r/w     rpcs  % cum % |  rpcs        % cum %" in brw.value
    assert "" in brw.value.splitlines()  # blank lines inside a value are kept
    assert brw.value.splitlines()[-1].startswith("block maps msec")
    assert params["osd-ldiskfs.fs-MDT0000.brw_stats"].line == 94
    assert params["osd-ldiskfs.fs-OST0000.kbytesavail"].value == "4037172"
    assert params["health_check"].value == "NOT HEALTHY"


def test_stats_sum_is_not_the_sum_of_squares_ddn133():
    params = first_of_each(parse_file(DATA / "lustre-2.14.0-ddn133.txt"))
    counters = parse_stats(params["obdfilter.ai400x2-OST0000.stats"])
    read, write = counters["read_bytes"], counters["write_bytes"]
    # read_bytes 71482249 samples [bytes] 4096 1048576 58370831220736 5356592093840015360
    assert (read.count, read.unit, read.sum, read.line) == (71482249, "bytes", 58370831220736, 1015)
    assert (write.count, write.sum, write.line) == (51198558, 47288584560640, 1016)
    ost1 = parse_stats(params["obdfilter.ai400x2-OST0001.stats"])
    assert ost1["read_bytes"].sum == 71484548943872 and ost1["write_bytes"].sum == 54592520048640


def test_stats_counter_shapes():
    params = parse_text("obdfilter.fs-OST0000.stats=\n"
                        "snapshot_time             1.5 secs.nsecs\n"
                        "read_bytes                0 samples [bytes]\n"
                        "write_bytes               3 samples [bytes] 1 4 9\n")
    counters = parse_stats(params[0])
    assert counters["read_bytes"].sum == 0  # no samples: Lustre prints no min/max/sum
    assert counters["write_bytes"].sum == 9  # without sum of squares the sum is the last number


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_no_final_newline_and_crlf_parse_the_same(path: Path, tmp_path: Path):
    text = path.read_text()
    assert text.endswith("\n")
    reference = [(p.name, p.line, p.value) for p in parse_file(path)]
    stripped = tmp_path / f"stripped-{path.name}"
    stripped.write_bytes(text.rstrip("\n").encode())
    crlf = tmp_path / f"crlf-{path.name}"
    crlf.write_bytes(text.replace("\n", "\r\n").encode())
    for variant in (stripped, crlf):
        got = [(p.name, p.line, p.value) for p in parse_file(variant)]
        assert got == reference, variant.name
        assert usable(parse_file(variant)) == FACTS[path.name]


def test_blank_lines_before_and_between_params():
    text = "\n\n  \nobdfilter.fs-OST0001.kbytestotal=100\n\n\nobdfilter.fs-OST0001.kbytesavail=40\n\n"
    params = parse_text(text, "t")
    assert [(p.name, p.line, p.value) for p in params] == [
        ("obdfilter.fs-OST0001.kbytestotal", 4, "100"), ("obdfilter.fs-OST0001.kbytesavail", 7, "40")]
    assert usable(params) == {"fs-OST0001": (1, 100, 40, None, None)}


def test_obdfilter_preferred_over_osd_whatever_the_order():
    text = ("osd-ldiskfs.fs-OST0002.kbytestotal=1000\n"
            "osd-ldiskfs.fs-OST0002.kbytesavail=900\n"
            "obdfilter.fs-OST0002.kbytestotal=2000\n"
            "obdfilter.fs-OST0002.kbytesavail=1800\n"
            "osd-zfs.fs-OST0002.kbytesavail=1\n")
    readings = collect_osts(parse_text(text, "t"))
    assert (readings["fs-OST0002"].kbytes_total, readings["fs-OST0002"].kbytes_avail) == (2000, 1800)
    assert readings["fs-OST0002"].origin == {"kbytes_total": "t:3", "kbytes_avail": "t:4"}


def test_osd_zfs_hex_indices_and_any_fsname():
    text = ("osd-zfs.scratch-OST000a.kbytestotal=500\n"
            "osd-zfs.scratch-OST000a.kbytesavail=100\n"
            "osd-zfs.lus_2-OST00FF.kbytestotal=70\n"
            "osd-zfs.lus_2-OST00FF.kbytesavail=70\n"
            "osd-zfs.scratch-MDT0000.kbytestotal=9\n"
            "osd-zfs.scratch-MDT0000.kbytesavail=9\n"
            "osd-zfs.MGS.kbytestotal=9\n"
            "mdt.scratch-MDT0000.kbytestotal=9\n")
    assert usable(parse_text(text)) == {"scratch-OST000a": (10, 500, 100, None, None),
                                        "lus_2-OST00FF": (255, 70, 70, None, None)}
    assert ost_index("fs-OST000a") == ("fs", 10)
    assert ost_index("fs-MDT0000") is None and ost_index("MGS") is None


@pytest.mark.parametrize("text, line, words", [
    ("this is not lctl output\nobdfilter.fs-OST0000.kbytestotal=1\n", 1, "expected a 'param.path=value'"),
    ("\n\n   garbage line\n", 3, "garbage line"),
    ("obdfilter.fs-OST0000.kbytestotal=12x\nobdfilter.fs-OST0000.kbytesavail=1\n", 1, "'12x'"),
    ("obdfilter.fs-OST0000.kbytestotal=10\nobdfilter.fs-OST0000.kbytesavail=\n", 2, "has no value"),
    ("obdfilter.fs-OST0000.kbytestotal=10\nobdfilter.fs-OST0000.kbytesavail=5\nsurprise\n", 3, "unexpected text"),
    ("obdfilter.fs-OST0000.kbytestotal=-10\n", 1, "non-negative integer"),
    ("obdfilter.fs-OST0000.stats=\nsnapshot_time 1 secs\nread_bytes lots of bytes\n", 3, "read_bytes"),
    ("obdfilter.fs-OST0000.stats=\nwrite_bytes 5 samples [bytes] 1 2 x3\n", 2, "'x3'"),
    ("obdfilter.fs-OST0000.kbytestotal=1\x00\n", 1, "NUL"),
])
def test_malformed_text_names_file_and_line(text, line, words):
    with pytest.raises(ParseError) as err:
        collect_osts(parse_text(text, "saved.txt"))
    assert err.value.line == line
    assert str(err.value).startswith(f"saved.txt:{line}: ")
    assert words in str(err.value)


def test_same_index_in_two_file_systems_is_an_error():
    text = ("obdfilter.a-OST0001.kbytestotal=10\nobdfilter.a-OST0001.kbytesavail=5\n"
            "obdfilter.b-OST0001.kbytestotal=10\nobdfilter.b-OST0001.kbytesavail=5\n")
    readings = collect_osts(parse_text(text))
    with pytest.raises(AgentError, match="a-OST0001 and b-OST0001 have the same OST index 1"):
        select_osts(readings)
    assert [o["name"] for o in select_osts(readings, fsname="b")] == ["b-OST0001"]
    assert [o["name"] for o in select_osts(readings, wanted=["a-OST0001"])] == ["a-OST0001"]


def test_unusable_osts_are_left_out_with_a_warning():
    text = ("obdfilter.fs-OST0000.kbytestotal=0\nobdfilter.fs-OST0000.kbytesavail=0\n"
            "obdfilter.fs-OST0001.kbytestotal=100\nobdfilter.fs-OST0001.kbytesavail=150\n"
            "obdfilter.fs-OST0002.kbytestotal=100\n"
            "obdfilter.fs-OST10000.kbytestotal=100\nobdfilter.fs-OST10000.kbytesavail=50\n")
    warnings: list[str] = []
    osts = select_osts(collect_osts(parse_text(text)), wanted=(), warn=warnings.append)
    assert osts == [{"name": "fs-OST0001", "index": 1, "kbytes_total": 100, "kbytes_avail": 100,
                     "read_bytes": None, "write_bytes": None, **UNKNOWN_STATE}]
    joined = "\n".join(warnings)
    for words in ("fs-OST0000: kbytestotal is 0", "fs-OST0001: kbytesavail 150 exceeds", "fs-OST0002: no kbytesavail",
                  "index 65536 is above 65535"):
        assert words in joined
