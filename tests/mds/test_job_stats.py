"""Per-job attribution (issue 26, item 3): the agents read ``obdfilter.*.job_stats`` and publish the top jobs per
OST (``job_stats`` of the message, agents/SCHEMA.md); the MDS's fast reader takes exactly what the API's schema
takes; the MDS turns cumulative sums into per-job rates (resets left out); and on the emulated cluster two jobs
on different OSTs show up in ``iez status --json`` with the bytes each wrote there."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.lctl import collect_osts, parse_file, parse_job_stats, parse_text
from agents.message import TOP_JOBS, build_message, job_entries, select_osts
from iez.api.schemas import OssStats
from iez.mds.jobs import JobTracker
from iez.mds.messages import Rejected, decode

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path("/work/shared/data/lustre-params/jobstats-100-jobs.txt")
MiB = 1 << 20


def independent_parse(text: str) -> dict[str, dict[str, tuple[int, int]]]:
    """Another reading of job_stats text, written apart from agents.lctl: per parameter, split the value at
    each ``- job_id:``, and in each entry take the number after ``sum:`` on the read_bytes / write_bytes lines."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for block in re.split(r"(?m)^(?=obdfilter\.)", text):
        head = re.match(r"obdfilter\.([^.=]+)\.job_stats=", block)
        if not head:
            continue
        jobs: dict[str, list[int]] = {}
        for entry in block.split("- job_id:")[1:]:
            job = entry.split("\n", 1)[0].strip().strip('"')
            sums = jobs.setdefault(job, [0, 0])
            for k, name in enumerate(("read_bytes", "write_bytes")):
                found = re.search(rf"(?m)^\s+{name}:\s+\{{.*?\bsum:\s*(\d+)", entry)
                sums[k] += int(found.group(1)) if found else 0
        out[head.group(1)] = {job: (r, w) for job, (r, w) in jobs.items()}
    return out


def test_the_real_job_stats_fixture_parses_with_no_mismatch():
    expected = independent_parse(FIXTURE.read_text())
    readings = collect_osts(parse_file(FIXTURE))
    got = {name: r.jobs for name, r in readings.items() if r.jobs is not None}
    assert expected and set(got) == set(expected)
    mismatches = [(ost, job) for ost in expected for job in set(expected[ost]) | set(got[ost])
                  if expected[ost].get(job) != got[ost].get(job)]
    assert mismatches == []
    # the fixture lists the same job 100 times (a benchmark capture): the sums add up, 100 x 5,468,160 written
    assert got["ds002-OST0000"] == {"FAKE_JOB": (0, 100 * 5468160)}


def test_job_ids_quoted_or_not_and_counters_missing():
    text = ("obdfilter.fs-OST0001.job_stats=\njob_stats:\n"
            "- job_id:          dd.0\n  snapshot_time:   1\n"
            "  write_bytes:     { samples: 2, unit: bytes, min: 1, max: 9, sum: 10, sumsq: 82 }\n"
            "- job_id:          \"4711\"\n  snapshot_time:   1\n"
            "  read_bytes:      { samples: 1, unit: bytes, min: 5, max: 5, sum: 5, sumsq: 25 }\n"
            "  write_bytes:     { samples: 1, unit: bytes, min: 7, max: 7, sum: 7, sumsq: 49 }\n"
            "obdfilter.fs-OST0002.job_stats=job_stats:\n")
    params = parse_text(text)
    assert parse_job_stats(params[0]) == {"dd.0": (0, 10), "4711": (5, 7)}
    assert parse_job_stats(params[1]) == {}


def test_the_agent_publishes_the_top_jobs_of_each_ost_and_both_readers_accept_it():
    jobs = {f"job{k}": (k * MiB, 0) for k in range(TOP_JOBS + 8)}
    text = "obdfilter.fs-OST0003.kbytestotal=1000\nobdfilter.fs-OST0003.kbytesavail=500\n" \
           "obdfilter.fs-OST0003.job_stats=\njob_stats:\n" + "".join(
               f"- job_id: {job}\n  read_bytes: {{ samples: 1, unit: bytes, min: 1, max: 1, sum: {r}, sumsq: 1 }}\n"
               for job, (r, _) in jobs.items())
    readings = collect_osts(parse_text(text))
    osts = select_osts(readings)
    entries = job_entries(readings, osts)
    assert len(entries) == 1 and entries[0]["index"] == 3 and len(entries[0]["jobs"]) == TOP_JOBS
    assert [j["job_id"] for j in entries[0]["jobs"][:2]] == [f"job{TOP_JOBS + 7}", f"job{TOP_JOBS + 6}"]
    msg = build_message(oss_id="oss0", host="h", seq=1, sample_time=1e9, interval_s=60, cpu_pct=1.0, mem_pct=1.0,
                        osts=osts, source="file", job_stats=entries)
    frame = json.dumps(msg).encode()
    fast, api = decode([frame]), OssStats.model_validate_json(frame).to_report()
    assert fast.jobs == api.jobs and len(fast.jobs[3]) == TOP_JOBS
    # no job_stats printed: the field is left out, and the message is what version 2 always was
    plain = collect_osts(parse_text(text.split("obdfilter.fs-OST0003.job_stats")[0]))
    assert job_entries(plain, select_osts(plain)) is None


job_lists = st.lists(st.fixed_dictionaries({
    "job_id": st.one_of(st.sampled_from(["1", "2", "a.b"]), st.text(max_size=3), st.integers(0, 3)),
    "read_bytes": st.one_of(st.integers(-1, 2**63), st.floats(0, 10), st.none()),
    "write_bytes": st.integers(0, 2**63)}, optional={"extra": st.just(1)}), max_size=3)


@settings(max_examples=300, deadline=None)
@given(job_stats=st.one_of(st.none(), st.just("x"), st.lists(st.fixed_dictionaries(
    {"index": st.one_of(st.integers(0, 2), st.just(70000), st.just("1")), "jobs": job_lists},
    optional={"more": st.just(1)}), max_size=3)))
def test_the_fast_reader_accepts_exactly_the_job_stats_the_api_accepts(job_stats):
    msg = {"schema": "iez.oss-stats", "version": 2, "oss_id": "oss0", "seq": 1, "time": "2027-01-15T08:00:00Z",
           "cpu_pct": 1.0, "mem_pct": 2.0, "interval_s": 60.0,
           "osts": [{"name": f"fs-OST000{i}", "index": i, "kbytes_total": 100, "kbytes_avail": 50, "state": "active"}
                    for i in (0, 1)]}
    if job_stats is not None:
        msg["job_stats"] = job_stats
    frame = json.dumps(msg).encode()
    try:
        api = OssStats.model_validate_json(frame, strict=True).to_report().jobs
    except Exception:
        api = "refused"
    try:
        fast = decode([frame]).jobs
    except Rejected as err:
        assert err.cause == "invalid"
        fast = "refused"
    assert fast == api, (frame, fast, api)


def test_rates_over_the_window_and_a_reset_left_out():
    t = JobTracker()
    t.apply("oss0", 0.0, {0: [("a", 0, 0)]})
    t.apply("oss0", 10.0, {0: [("a", 0, 100 * MiB), ("b", 0, 10)]})
    t.apply("oss0", 20.0, {0: [("a", 0, 3 * MiB), ("b", 0, 10)]})  # a's entry was dropped and came back: a reset
    a = t.rates(0)[0]
    assert a["job_id"] == "a" and a["write_bytes_s"] == pytest.approx(100 * MiB / 10, rel=1e-6)
    assert a["write_bytes"] == 3 * MiB
    t.apply("oss0", 30.0, {0: [("b", 0, 10)]})  # a no longer listed: forgotten
    assert [j["job_id"] for j in t.rates(0)] == ["b"]
    assert t.status()["oss"]["oss0"][0]["job_id"] == "b"


# -- on the emulated cluster --------------------------------------------------------------------------------------

sys.path.insert(0, str(REPO / "tests" / "move"))
from move_helpers import LiveCluster  # noqa: E402

WRITER = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
block = b"j" * (1 << 20)
for i in range(int(sys.argv[2])):
    os.pwrite(fd, block, i << 20)
os.close(fd)
"""


@pytest.mark.timeout(300)
def test_two_jobs_on_two_osts_show_up_with_their_bytes_in_iez_status(tmp_path):
    subprocess.run(["make", "-s", "-C", str(REPO / "placement_lib")], check=True, stdout=subprocess.DEVNULL)
    live = LiveCluster(tmp_path, ost_mib_s=200.0)
    try:
        layouts = {"a": 1, "b": 6}  # OST 1 on oss0, OST 6 on oss1
        for name, ost in layouts.items():
            path = live.data / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
            os.setxattr(path, "user.iez.layout", f"version=1 stripe_size={MiB} stripe_count=1 osts={ost}".encode())
        base = {**os.environ, "LD_PRELOAD": str(REPO / "placement_lib/build/libiez.so"), "IEZ_MODE": "off",
                "IEZ_EMULATE": str(live.root), "IEZ_STATE_DIR": str(tmp_path / "job-state")}
        for job, (name, mib) in {"4711": ("a", 8), "4712": ("b", 12)}.items():
            done = subprocess.run([sys.executable, "-c", WRITER, str(live.data / name), str(mib)],
                                  env={**base, "IEZ_IO_CLASS": job}, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr

        def jobs_of(view: dict) -> dict:
            return {o["index"]: {j["job_id"]: j["write_bytes"] for j in o["jobs"]} for o in view["osts"] if o["jobs"]}

        want = {1: {"4711": 8 * MiB}, 6: {"4712": 12 * MiB}}
        live.wait(lambda s: {int(i): {j["job_id"]: j["write_bytes"] for j in js}
                             for i, js in (s.get("jobs") or {}).get("osts", {}).items()} == want,
                  "the MDS's per-job view", timeout=60)
        deadline = time.monotonic() + 60  # the MDS stores its OST rows in batches, after its status file
        while True:
            done = subprocess.run([sys.executable, "-m", "iez.cli", "status", "--db", live.db, "--json",
                                   "--status-file", str(live.status_file)], capture_output=True, text=True,
                                  timeout=120, env={**os.environ, "IEZ_STATE_DIR": str(tmp_path / "mds-state")})
            assert done.returncode == 0, done.stderr
            view = json.loads(done.stdout)
            if jobs_of(view) == want or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert jobs_of(view) == want
        assert view["jobs_per_oss"]["oss0"][0]["job_id"] == "4711"
        assert view["jobs_per_oss"]["oss1"][0]["job_id"] == "4712"
        # the text view names each OST's jobs too
        done = subprocess.run([sys.executable, "-m", "iez.cli", "status", "--db", live.db,
                               "--status-file", str(live.status_file)], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "IEZ_STATE_DIR": str(tmp_path / "mds-state")})
        assert done.returncode == 0, done.stderr
        named = {line.split()[1]: line for line in done.stdout.splitlines() if re.match(r"  OST \d+ \(", line)}
        assert set(named) == {"1", "6"}, done.stdout
        assert "4711 " in named["1"] and "(8.0 MiB in all)" in named["1"] and "4712 " in named["6"], done.stdout
        # the MDS's metrics carry each OST's top jobs (a job label, bounded cardinality): the Grafana panel's series
        from prometheus_client.parser import text_string_to_metric_families

        scraped = text_string_to_metric_families(httpx.get(live.metrics_url, timeout=30).text)
        rates = {(s.labels["ost"], s.labels["job"]): s.value for family in scraped for s in family.samples
                 if s.name == "iez_mds_ost_job_bytes_per_second"}
        assert set(rates) == {("1", "4711"), ("6", "4712")}, rates  # rates: 0 once the writes are over
        # the emulated servers print job_stats as Lustre does: the independent parse reads the same bytes
        tree = live.root / "oss0" / "obdfilter" / "iezfs-OST0001" / "job_stats"
        text = "obdfilter.iezfs-OST0001.job_stats=\n" + tree.read_text()
        assert independent_parse(text)["iezfs-OST0001"]["4711"] == (0, 8 * MiB)
    finally:
        live.stop()


def test_the_agent_lists_the_jobs_of_at_most_1024_osts_the_busiest():
    from agents.message import MAX_JOB_OSTS

    text = "".join(f"obdfilter.fs-OST{i:04x}.kbytestotal=1000\nobdfilter.fs-OST{i:04x}.kbytesavail=500\n"
                   f"obdfilter.fs-OST{i:04x}.job_stats=\njob_stats:\n- job_id: j{i}\n"
                   f"  write_bytes: {{ samples: 1, unit: bytes, min: 1, max: 1, sum: {i + 1}, sumsq: 1 }}\n"
                   for i in range(MAX_JOB_OSTS + 6))
    readings = collect_osts(parse_text(text))
    entries = job_entries(readings, select_osts(readings))
    assert [e["index"] for e in entries] == list(range(6, MAX_JOB_OSTS + 6))  # the 6 idlest left out, order kept
