"""The MDS's message checks and live view, without sockets."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from hypothesis import given, settings, strategies as st

from iez.api.schemas import OssStats
from iez.db.stats import OssReport, OstReport
from iez.mds.messages import Rejected, decode
from iez.mds.view import ClusterView
from iez.model import DEFAULT_OST_BANDWIDTH

GiB_KB = 1024 * 1024


def message(**over) -> dict:
    base = {"schema": "iez.oss-stats", "version": 1, "oss_id": "oss0", "seq": 1, "time": 1.8e9, "cpu_pct": 5.0,
            "mem_pct": 10.0, "interval_s": 2.0,
            "osts": [{"name": "fs-OST0000", "index": 0, "kbytes_total": 10 * GiB_KB, "kbytes_avail": 8 * GiB_KB}]}
    base.update(over)
    return base


@pytest.mark.parametrize("frames, cause", [
    ([b"not json"], "malformed"),
    ([b"[1, 2]"], "malformed"),
    ([b"\xff\xfe"], "malformed"),
    ([json.dumps(message()).encode(), b"extra"], "malformed"),
    ([json.dumps(message(version=3)).encode()], "version"),
    ([json.dumps(message(version=True)).encode()], "version"),
    ([json.dumps(message(schema="other")).encode()], "version"),
    ([json.dumps(message(cpu_pct=150)).encode()], "invalid"),
    ([json.dumps(message(osts=[{"name": "x", "index": 0, "kbytes_total": 5, "kbytes_avail": 9}])).encode()], "invalid"),
    ([json.dumps(message(seq=-1)).encode()], "invalid"),
    ([json.dumps({"schema": "iez.oss-stats", "version": 1}).encode()], "invalid"),
])
def test_bad_messages_are_rejected_with_their_cause(frames, cause):
    with pytest.raises(Rejected) as err:
        decode(frames)
    assert err.value.cause == cause


def test_version_1_and_2_messages_are_both_read():
    v1 = decode([json.dumps(message()).encode()])
    assert v1.osts[0].state == "active"  # version 1 knows no states: every OST takes stripes
    ost = {"name": "fs-OST0000", "index": 0, "kbytes_total": 10, "kbytes_avail": 5, "state": "readonly",
           "degraded": None, "no_precreate": None, "readonly": True}
    v2 = decode([json.dumps(message(version=2, osts=[ost])).encode()])
    assert (v2.osts[0].state, v2.osts[0].readonly, v2.osts[0].degraded) == ("readonly", True, None)
    for bad, why in ((message(version=2, osts=[{k: v for k, v in ost.items() if k != "state"}]), "state: required"),
                     (message(version=1, osts=[ost]), "are version-2 fields"),
                     (message(version=2, osts=[dict(ost, state="inactive")]), "inactive")):
        with pytest.raises(Rejected, match=why) as err:
            decode([json.dumps(bad).encode()])
        assert err.value.cause == "invalid"


def test_a_good_message_decodes_to_a_report():
    report = decode([json.dumps(message()).encode()])
    assert (report.oss_id, report.seq, report.interval_s, report.osts[0].kbytes_avail) == ("oss0", 1, 2.0, 8 * GiB_KB)
    assert report.time == datetime(2027, 1, 15, 8, 0, tzinfo=timezone.utc).replace(tzinfo=None)


def report(oss: str, seq: int, t: float, osts: dict[int, tuple[int, int]], interval: float = 1.0) -> OssReport:
    """osts: index -> (kbytes_avail, write_bytes counter)."""
    return OssReport(oss, seq, datetime.fromtimestamp(t, timezone.utc).replace(tzinfo=None), 10.0, 20.0,
                     [OstReport(f"fs-OST{i:04x}", i, 10 * GiB_KB, a, 0, w) for i, (a, w) in osts.items()], interval)


def test_an_oss_is_stale_after_three_of_its_intervals_and_fresh_when_it_reports():
    view = ClusterView(default_interval_s=60)
    view.apply(report("a", 1, 1000.0, {0: (GiB_KB, 0)}, interval=2.0), received=1000.0)
    view.apply(report("b", 1, 1000.0, {1: (GiB_KB, 0)}, interval=60.0), received=1000.0)
    assert view.refresh(now=1015.9) == ([], [])
    assert view.refresh(now=1016.1) == (["a"], [])  # 3 x 2 s + the 10 s margin (a report in flight, iez.freshness)
    assert [o.index for o in view.cluster({}).osts] == [1]
    view.apply(report("a", 2, 1020.0, {0: (GiB_KB, 0)}, interval=2.0), received=1020.0)
    assert view.refresh(now=1020.5) == ([], ["a"])
    assert [o.index for o in view.cluster({}).osts] == [0, 1]


def test_bandwidth_from_counters_becomes_load_and_reservations_reduce_free_space():
    view = ClusterView()
    view.apply(report("a", 1, 100.0, {0: (GiB_KB, 0), 1: (GiB_KB, 0), 2: (GiB_KB, 0)}), received=100.0)
    view.apply(report("a", 2, 110.0, {0: (GiB_KB, 4000 << 20), 1: (GiB_KB, 100 << 20), 2: (GiB_KB, 0)}), received=110.0)
    assert view.loads() == {0: 400 << 20, 1: 10 << 20, 2: 0.0}
    cluster = view.cluster({1: 3 * 2**20})
    assert [o.load for o in cluster.osts] == [400 << 20, 10 << 20, 0.0]
    # an OST that served 400 MiB/s has proved it sustains more than the 200 MiB/s default
    assert [o.bandwidth for o in cluster.osts] == [400 << 20, DEFAULT_OST_BANDWIDTH, DEFAULT_OST_BANDWIDTH]
    assert cluster.osts[1].kbytes_avail == GiB_KB - 3 * 1024
    # a counter reset (agent or server restart) is neither a negative rate nor a new count as traffic: that
    # step is left out, and the window's other steps stand
    view.apply(report("a", 3, 120.0, {0: (GiB_KB, 5), 1: (GiB_KB, 200 << 20), 2: (GiB_KB, 0)}), received=120.0)
    assert view.osts[0].rate == pytest.approx(400 << 20) and view.osts[1].rate == pytest.approx((100 << 20) / 10)
    assert view.cluster({}).osts[0].bandwidth == 400 << 20  # the peak stays
    # three quiet intervals later the reset OST's burst has left the window
    for seq, t in ((4, 130.0), (5, 140.0), (6, 150.0)):
        view.apply(report("a", seq, t, {0: (GiB_KB, 5), 1: (GiB_KB, 200 << 20), 2: (GiB_KB, 0)}), received=t)
    assert view.loads() == {0: 0.0, 1: 0.0, 2: 0.0}


def test_material_change_needs_one_percent_of_an_ost():
    view = ClusterView()
    view.apply(report("a", 1, 1.0, {0: (5 * GiB_KB, 0)}), received=1.0)
    view.allocated()
    view.apply(report("a", 2, 2.0, {0: (5 * GiB_KB - 1000, 0)}), received=2.0)
    assert not view.changed
    view.apply(report("a", 3, 3.0, {0: (5 * GiB_KB - GiB_KB // 5, 0)}), received=3.0)
    assert view.changed


json_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**64), st.floats(allow_nan=False, allow_infinity=False),
                        st.text(max_size=5), st.just(""), st.just("é"))
ost_objects = st.fixed_dictionaries(
    {"name": st.one_of(st.just("fs-OST0001"), json_values), "index": st.one_of(st.integers(-1, 70000), json_values),
     "kbytes_total": st.one_of(st.integers(-1, 2**63), json_values),
     "kbytes_avail": st.one_of(st.integers(-1, 2**63), json_values)},
    optional={"read_bytes": st.one_of(st.integers(-1, 2**63), json_values),
              "write_bytes": st.one_of(st.integers(-1, 2**63), json_values), "extra": json_values,
              # version 2's fields: required there, forbidden in version 1
              "state": st.one_of(st.sampled_from(["active", "degraded", "nocreate", "readonly", "inactive"]),
                                 json_values),
              "degraded": st.one_of(st.booleans(), json_values), "readonly": json_values,
              "no_precreate": st.booleans()})
# OSTs with the right shape and only the version-2 fields left to chance, so that valid messages of both
# versions are drawn often enough to compare what the two readers make of them
near_valid_osts = st.fixed_dictionaries(
    {"name": st.just("fs-OST0001"), "index": st.integers(0, 2), "kbytes_total": st.integers(50, 100),
     "kbytes_avail": st.integers(0, 60),
     "state": st.one_of(st.sampled_from(["active", "degraded", "nocreate", "readonly"]),
                        st.sampled_from([None, "x", "inactive"]))},
    optional={"write_bytes": st.one_of(st.none(), st.integers(0, 2**63)),
              "degraded": st.one_of(st.none(), st.booleans(), st.just(1)), "readonly": st.one_of(st.none(), st.booleans()),
              "no_precreate": st.one_of(st.none(), st.booleans())})
OST_FIELDS = ("name", "index", "kbytes_total", "kbytes_avail", "read_bytes", "write_bytes", "state", "degraded",
              "no_precreate", "readonly")


def comparable(report: OssReport) -> tuple:
    """A report's values (the MDS keeps its decoded OST objects, the API builds OstReports)."""
    return (report.oss_id, report.seq, report.time, report.cpu_pct, report.mem_pct, report.interval_s,
            [tuple(getattr(o, name) for name in OST_FIELDS) for o in report.osts])


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(oss_id=st.one_of(st.just("oss0"), json_values), seq=st.one_of(st.integers(-1, 2**63), json_values),
       cpu=st.one_of(st.floats(-1, 101), json_values), mem=st.one_of(st.floats(0, 100), json_values),
       interval=st.one_of(st.none(), st.floats(-1, 90000), json_values),
       osts=st.one_of(st.lists(ost_objects, max_size=3), json_values), version=st.sampled_from([1, 2]))
def test_the_fast_checks_agree_with_the_api_schema_on_json_numbers(oss_id, seq, cpu, mem, interval, osts, version):
    """The MDS accepts exactly what the API's schema accepts in strict mode (JSON types as they are), in both
    message versions."""
    msg = {"schema": "iez.oss-stats", "version": version, "oss_id": oss_id, "seq": seq,
           "time": "2027-01-15T08:00:00Z",
           "cpu_pct": cpu,
           "mem_pct": mem, "interval_s": interval, "osts": osts}
    frame = json.dumps(msg).encode()
    try:
        api = OssStats.model_validate_json(frame, strict=True).to_report()
    except Exception:
        api = None
    try:
        fast = decode([frame])
    except Rejected as err:
        assert err.cause == "invalid"
        fast = None
    if api is None or fast is None:
        assert api is fast is None, (api, fast, frame)
    else:
        assert comparable(fast) == comparable(api)


def decode_both(msg: dict) -> tuple:
    frame = json.dumps(msg).encode()
    try:
        api = comparable(OssStats.model_validate_json(frame, strict=True).to_report())
    except Exception:
        api = None
    try:
        fast = comparable(decode([frame]))
    except Rejected as err:
        assert err.cause == "invalid"
        fast = None
    return fast, api


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(osts=st.one_of(st.lists(near_valid_osts, min_size=1, max_size=2),
                     st.lists(near_valid_osts.map(lambda o: {k: v for k, v in o.items() if k != "state"}),
                              min_size=1, max_size=2)),
       version=st.sampled_from([1, 2]))
def test_the_fast_checks_agree_with_the_api_schema_on_ost_states(osts, version):
    """Whole messages around OSTs whose version-2 fields vary: both readers accept and refuse the same ones
    and read the same states (version 1: every OST active)."""
    msg = {"schema": "iez.oss-stats", "version": version, "oss_id": "oss0", "seq": 1, "time": "2027-01-15T08:00:00Z",
           "cpu_pct": 1.0, "mem_pct": 2.0, "interval_s": 60.0, "osts": osts}
    fast, api = decode_both(msg)
    assert fast == api
    if fast is not None and version == 1:
        assert {ost[6] for ost in fast[6]} == {"active"}


@pytest.mark.parametrize("field, value", [("seq", 3.0), ("seq", -0.0), ("index", 1.0), ("kbytes_total", 1e2),
                                          ("seq", 2.5), ("seq", 1e20), ("index", 70000.0)])
def test_both_readers_take_an_integral_float_as_json_integer(field, value):
    """``5.0`` is what JSON calls an integer: the MDS's fast reader takes it as the API does, and refuses
    2.5 and out-of-range values as the API does (a hypothesis run found seq 0.0 taken by one only)."""
    msg = {"schema": "iez.oss-stats", "version": 2, "oss_id": "oss0", "seq": 1, "time": "2027-01-15T08:00:00Z",
           "cpu_pct": 1.0, "mem_pct": 2.0, "interval_s": 60.0,
           "osts": [{"name": "fs-OST0001", "index": 1, "kbytes_total": 100, "kbytes_avail": 50, "state": "active"}]}
    if field == "seq":
        msg["seq"] = value
    else:
        msg["osts"][0][field] = value
    fast, api = decode_both(msg)
    assert fast == api
    accepted = float(value).is_integer() and (field != "index" or value <= 65535) and abs(value) < 2**63
    assert (fast is not None) == accepted


def test_a_jobs_own_traffic_is_taken_off_the_load_it_is_placed_against():
    """Issue 26 item 3: when an application is placed again while its job runs, the load its own Lustre job id
    drives (job_stats) is not counted as congestion; other jobs' load stays."""
    from iez.mds.jobs import JobTracker, own_job_ids

    view, jobs = ClusterView(), JobTracker()
    for seq, t, mine, other in ((1, 100.0, 0, 0), (2, 110.0, 3000 << 20, 1000 << 20)):
        view.apply(report("a", seq, t, {0: (GiB_KB, mine), 1: (GiB_KB, other), 2: (GiB_KB, 0)}), received=t)
        jobs.apply("a", t, {0: [("ior.root", 0, mine)], 1: [("4711", 0, other)]})
    assert own_job_ids("ior.root") == {"ior.root", "ior.0"}  # %e.%u, Lustre's default job id, too
    own = jobs.rates_of(own_job_ids("ior.root"))
    assert own == {0: pytest.approx(300 << 20)}
    assert [o.load for o in view.cluster({}).osts] == [300 << 20, 100 << 20, 0.0]
    assert [o.load for o in view.cluster({}, own_load=own).osts] == [0.0, 100 << 20, 0.0]
    assert jobs.rates_of(own_job_ids("other.root")) == {}
