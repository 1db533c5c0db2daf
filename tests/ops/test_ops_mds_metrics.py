"""``iez mds --metrics-bind``: a running MDS's Prometheus metrics (OSTs, OSSs, drops, allocation), and the
Grafana dashboard in deploy/grafana names only metrics it exports."""

from __future__ import annotations

import json
import re
import time

import pytest
from ops_helpers import REPO, Mds, Publisher, free_port, scrape, stats, value

from conftest import fresh_db
from iez.config import database_url
from iez.db.engine import make_engine, write_session
from iez.db.requests import RequestIn, upsert_requests

GiB = 1 << 30


@pytest.mark.slow
def test_running_mds_exports_view_drops_and_allocation(tmp_path):
    db = fresh_db("sqlite", tmp_path, "metrics")
    port = free_port()
    mds = Mds(db, tmp_path, "--metrics-bind", f"127.0.0.1:{port}").start()
    url = f"http://127.0.0.1:{port}/metrics"
    publisher = Publisher(mds.endpoint)
    try:
        deadline = time.monotonic() + 20
        while mds.status()["messages"]["accepted"] < 2 and time.monotonic() < deadline:
            publisher.send(stats("oss-a", int(time.time() * 1000), 0, count=2, avail_kb=6 * 1024 * 1024,
                                 interval=60))
            publisher.send(stats("oss-b", int(time.time() * 1000), 2, count=2, interval=60))
            time.sleep(0.3)
        publisher.send(b"not json at all")
        mds.wait(lambda s: s["messages"]["dropped"].get("malformed", 0) >= 1, what="the malformed drop")
        engine = make_engine(database_url(db))
        with write_session(engine) as session:
            upsert_requests(session, "metrics-app", [RequestIn(f"/l/m{i}", GiB, 1) for i in range(4)])
            upsert_requests(session, "too-big", [RequestIn("/l/huge", 10**6 * GiB, 1)])
        engine.dispose()
        mds.wait(lambda s: s["allocation"]["files"] >= 4 and s["allocation"]["refused"] >= 1, timeout=30,
                 what="the allocation")
        samples = scrape(url)
    finally:
        publisher.close()
        mds.stop()

    assert value(samples, "iez_mds_up") == 1
    assert value(samples, "iez_mds_ingest_insecure") == 1  # these tests run without keys
    assert value(samples, "iez_mds_ost_fill", ost="0", oss="oss-a") == pytest.approx(0.4)  # 6 of 10 GiB free
    assert value(samples, "iez_mds_ost_fill", ost="2", oss="oss-b") == pytest.approx(0.2)
    assert value(samples, "iez_mds_ost_kbytes_total", ost="3") == 10 * 1024 * 1024
    assert value(samples, "iez_mds_ost_reserved_kbytes", ost="3") == 0
    held = {text: v for text, v in samples["iez_mds_ost_reservations_bytes"].items()}
    assert len(held) == 4 and sum(held.values()) == 4 * GiB  # the four placed files, until written
    assert value(samples, "iez_mds_ost_load_bytes_per_second", ost="1") == 0
    assert value(samples, "iez_mds_ost_state", ost="1", state="active") == 1
    assert value(samples, "iez_mds_ost_state", ost="1", state="degraded") == 0
    assert value(samples, "iez_mds_oss_fresh", oss="oss-a") == 1
    assert 0 <= value(samples, "iez_mds_oss_age_seconds", oss="oss-b") < 60
    assert value(samples, "iez_mds_messages_dropped_total", cause="malformed") == 1
    assert value(samples, "iez_mds_messages_accepted_total") >= 2
    assert value(samples, "iez_mds_files_allocated_total") == 4
    assert value(samples, "iez_mds_files_refused_total") >= 1
    assert value(samples, "iez_mds_allocation_seconds_count") >= 2  # one observation per application placed
    assert value(samples, "iez_mds_allocations_total", outcome="done") >= 1
    assert value(samples, "iez_mds_allocations_total", outcome="deferred") == 0

    dashboard = json.loads((REPO / "deploy" / "grafana" / "iez-mds.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    named = {name for expr in exprs for name in re.findall(r"\biez_[a-z0-9_]+", expr)}
    assert len(named) >= 15
    only_with_job_stats = {"iez_mds_ost_job_bytes_per_second"}  # agents reading job_stats: tests/mds/test_jobs*
    assert named - only_with_job_stats <= set(samples), \
        f"the dashboard names metrics the MDS does not export: {named - only_with_job_stats - set(samples)}"


def test_every_metric_the_mds_exports_has_a_panel():
    """The other way round (issue 30 item 4: a DB outage nobody could see): each family the MDS's collector
    defines, the ones it yields only with a DB, job_stats or a lease included, is on the dashboard."""
    source = (REPO / "iez" / "mds" / "metrics.py").read_text()
    families = {"iez_mds_" + n for n in re.findall(r'prefix \+ "([a-z0-9_]+)"', source)}
    families |= {"iez_mds_" + n for n in re.findall(r'counter\("([a-z0-9_]+)"', source)}
    families |= set(re.findall(r'Histogram\("(iez_mds_[a-z0-9_]+)"', source))
    assert len(families) >= 25, families
    dashboard = json.loads((REPO / "deploy" / "grafana" / "iez-mds.json").read_text())
    exprs = " ".join(t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", []))
    named = {name if name in families else re.sub(r"_(total|bucket|count|sum)$", "", name)
             for name in re.findall(r"\biez_[a-z0-9_]+", exprs)}
    assert families - named == set(), f"exported but on no panel of deploy/grafana/iez-mds.json: {families - named}"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_metrics_not_served_unless_asked():
    from iez.cli import build_parser

    assert build_parser().parse_args(["mds"]).metrics_bind == "none"
