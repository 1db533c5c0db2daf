"""A Darshan log's request is a trace's request plus the OSTs Darshan saw; each learnt request (trace,
Darshan, prediction) becomes a stored request's values in one place (``RequestIn.learnt``) and a requests
CSV's row in one place (``write_requests_csv``)."""

from pathlib import Path

from iez.db.requests import RequestIn
from iez.model import EOF_END, Component
from iez.predict.learn import load_trace
from iez.predict.series import PRequest
from iez.trace.csvformat import write_requests_csv
from iez.trace.darshan import DarshanRequest, read_log
from iez.trace.parse import Request

MIB = 1 << 20
TEMPLATE = (Component(0, 4 * MIB, 1, MIB, "flash"), Component(4 * MIB, EOF_END, 4, 4 * MIB, "flash"))


def test_a_darshan_request_answers_its_json_without_default_layout_and_with_ost_ids_after_rank():
    request = DarshanRequest("/l/out", 8 * MIB, 2, MIB, -1, pool="flash", components=TEMPLATE, ost_ids=(3, 5))
    shown = request.to_dict()
    assert list(shown) == ["file", "write_bytes", "stripe_count", "stripe_size", "rank", "ost_ids", "pool",
                           "components"]
    assert shown == {"file": "/l/out", "write_bytes": 8 * MIB, "stripe_count": 2, "stripe_size": MIB, "rank": -1,
                     "ost_ids": [3, 5], "pool": "flash",
                     "components": [{"end": 4 * MIB, "stripe_count": 1, "stripe_size": MIB, "pool": "flash"},
                                    {"end": -1, "stripe_count": 4, "stripe_size": 4 * MIB, "pool": "flash"}]}
    assert DarshanRequest("/l/x", 1, 1, None, 0).to_dict()["ost_ids"] is None
    assert isinstance(request, Request) and (request.default_layout, request.mirror_count) == (None, 1)


def test_each_learnt_request_is_stored_with_its_policy_default_and_mirrors():
    traced = Request("/l/t", 5 * MIB, 4, 2 * MIB, 3, "flash", TEMPLATE, "", 2)
    assert RequestIn.learnt(traced.file, traced, "traced", traced.stripe_size) == RequestIn(
        "/l/t", 5 * MIB, 4, rank=3, stripe_size=2 * MIB, source="traced", pool="flash", components=TEMPLATE,
        default_layout="", mirror_count=2)
    darshan = DarshanRequest("/l/d", MIB, 1, MIB, -1, ost_ids=(7,))
    assert RequestIn.learnt(darshan.file, darshan, "darshan", darshan.stripe_size) == RequestIn(
        "/l/d", MIB, 1, rank=-1, stripe_size=MIB, source="darshan")
    predicted = PRequest(None, 3 * MIB, 2, 1, "disk", (), None, 3)  # a prediction is stored under its name
    assert RequestIn.learnt("/l/p.1", predicted, "predicted") == RequestIn(
        "/l/p.1", 3 * MIB, 2, rank=1, pool="disk", mirror_count=3)


def test_a_darshan_log_learnt_by_iez_predict_is_its_requests_as_a_run():
    log = Path(__file__).resolve().parents[1] / "data" / "darshan" / "ior-posix-16ranks.darshan"
    (run,) = load_trace(log)
    requests = read_log(log).requests
    assert requests and run.requests == tuple(
        PRequest(r.file, r.write_bytes, r.stripe_count, r.rank, r.pool, r.components) for r in requests)


def test_trace_and_prediction_requests_are_written_as_one_csv(tmp_path):
    traced = [Request("/l/a,b", 5 * MIB, 4, MIB, 3, "flash", TEMPLATE[:1]), Request("/l/c", 1, 1, None, -1)]
    write_requests_csv(str(tmp_path / "t.csv"), traced)
    assert (tmp_path / "t.csv").read_text() == (
        "file,write_bytes,stripe_count,rank,pool,components\n"
        '"/l/a,b",5242880,4,3,flash,"[{""end"":4194304,""stripe_count"":1,""stripe_size"":1048576,""pool"":""flash""}]"\n'
        "/l/c,1,1,-1,,\n")
    predicted = [PRequest("/l/p", 7, 2, 0), PRequest("/l/q", 9, 1, 1, mirror_count=2)]
    write_requests_csv(str(tmp_path / "p.csv"), predicted)
    assert (tmp_path / "p.csv").read_text() == (
        "file,write_bytes,stripe_count,rank,pool,components,mirror_count\n/l/p,7,2,0,,,1\n/l/q,9,1,1,,,2\n")
