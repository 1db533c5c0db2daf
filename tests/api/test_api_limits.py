"""The API cannot be starved: oversized bodies are refused before they are read, writes are authenticated
before their body is read, deep or extreme JSON gets a 4xx, never a 500 (issue 15). Real ``iez api``
processes on real sockets; memory from /proc."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from api_limits_helpers import Upload, rss_kib
from conftest import API_TOKEN, Server, fresh_db

pytestmark = pytest.mark.slow

MB = 1_000_000
TOKEN = {"Authorization": f"Bearer {API_TOKEN}"}
NESTED = {"array": b"[" * 2000 + b"]" * 2000, "object": b'{"a":' * 2000 + b"1" + b"}" * 2000}


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """A server with a 1 MiB body limit (IEZ_API_MAX_BODY), so chunked bodies can pass it cheaply."""
    srv = Server(fresh_db("sqlite", tmp_path_factory.mktemp("limits"), "limits"), env={"IEZ_API_MAX_BODY": "1M"})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def default(tmp_path_factory):
    """A server with the default limit (64 MiB)."""
    srv = Server(fresh_db("sqlite", tmp_path_factory.mktemp("default"), "default"))
    yield srv
    srv.stop()


@pytest.mark.parametrize("path, headers", [("/v1/requests", TOKEN), ("/v1/requests", {}),
                                           ("/v1/allocations/lookup", {})])
def test_a_100_mb_body_gets_413_at_once_and_is_never_read(default, path, headers):
    before = rss_kib(default.proc.pid, "VmHWM")
    upload = Upload(default.url, path, headers, 100 * MB)
    try:
        status, raw, seconds = upload.answer()
        assert status == 413, raw
        assert "larger than the limit of 67108864 bytes" in json.loads(raw.partition(b"\r\n\r\n")[2])["detail"]
        assert b"connection: close" in raw.lower()
        assert upload.closed_by_server()
        # Refused before being read: the answer came while most of the body was still unsent, and the server
        # closed the connection instead of taking the rest.
        assert upload.sent < 20 * MB, upload.sent
        assert seconds < 1.0, seconds  # typically 1 ms; the bound is 100 ms, with slack for a busy machine
    finally:
        upload.close()
    growth = rss_kib(default.proc.pid, "VmHWM") - before
    assert growth < 50 * 1024, f"peak RSS grew by {growth} KiB"


@pytest.mark.parametrize("path, headers", [("/v1/requests", TOKEN), ("/v1/stats", TOKEN),
                                           ("/v1/allocations/lookup", {})])
def test_a_chunked_body_is_cut_at_the_limit(limited, path, headers):
    upload = Upload(limited.url, path, headers, 50 * MB, chunked=True)
    try:
        status, raw, _ = upload.answer()
        assert status == 413, raw
        assert upload.closed_by_server()
        assert upload.sent < 20 * MB, upload.sent
    finally:
        upload.close()


def test_a_body_within_the_limit_is_served(limited):
    paths = [f"/lustre/within/{i:06d}" for i in range(20_000)]  # ~0.5 MB of JSON
    with limited.client() as api:
        answer = api.post("/v1/allocations/lookup", json={"paths": paths})
        assert answer.status_code == 200 and len(answer.json()["missing"]) == 20_000
        big = api.post("/v1/allocations/lookup", json={"paths": paths * 3})  # ~1.5 MB
        assert big.status_code == 413 and "IEZ_API_MAX_BODY" in big.json()["detail"]


def test_100000_requests_fit_the_default_limit(default):
    requests = [{"file": f"/lustre/project/run/output.{i:06d}", "write_bytes": 1 << 30, "stripe_count": 4,
                 "rank": i % 4096} for i in range(100_000)]
    with default.client() as api:
        answer = api.post("/v1/requests", json={"app": "hundred-thousand", "requests": requests}, timeout=120)
    assert answer.status_code == 201, answer.text[:300]
    assert len(answer.json()["ids"]) == 100_000


@pytest.mark.parametrize("path", ["/v1/requests", "/v1/stats", "/v1/allocate"])
@pytest.mark.parametrize("token, status", [(None, 401), ("wrong-token", 403)])
def test_writes_are_refused_before_their_body_is_read(default, path, token, status):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    upload = Upload(default.url, path, headers, 30 * MB)  # within the limit: only the credential refuses it
    try:
        code, raw, seconds = upload.answer()
        assert code == status, raw
        assert upload.closed_by_server()
        assert upload.sent < 20 * MB, upload.sent
    finally:
        upload.close()


@pytest.mark.parametrize("shape", sorted(NESTED))
@pytest.mark.parametrize("path", ["/v1/requests", "/v1/stats", "/v1/allocate", "/v1/allocations/lookup"])
@pytest.mark.parametrize("headers", [{}, TOKEN], ids=["no-token", "token"])
def test_deeply_nested_json_gets_a_4xx_not_a_500(default, shape, path, headers):
    answer = httpx.post(default.url + path, content=NESTED[shape], timeout=30,
                        headers={**headers, "Content-Type": "application/json"})
    assert 400 <= answer.status_code < 500, answer.text
    assert "Traceback" not in answer.text
    if headers or path == "/v1/allocations/lookup":  # parsed: said plainly (writes without a token: 401 first)
        assert answer.status_code == 400 and answer.json()["detail"] == "invalid JSON: nested too deeply"
    else:
        assert answer.status_code == 401


def test_nesting_below_the_parser_limit_in_free_form_fields_gets_a_4xx(default):
    deep: object = 1
    for _ in range(900):
        deep = {"a": deep}
    with default.client() as api:
        answer = api.post("/v1/requests", json={"app": "deep", "requests": [
            {"file": "/lustre/deep", "write_bytes": 1, "stripe_count": 1, "rank": 0, "components": [deep]}]})
    assert answer.status_code == 422, answer.text


@pytest.mark.parametrize("field, value", [("kbytes_total", 2**63 - 1), ("kbytes_total", 2**42 + 1),
                                          ("kbytes_avail", 2**63 - 1)])
def test_ost_sizes_beyond_what_the_db_can_sum_get_422(default, field, value):
    ost = {"name": "fs-OST0001", "index": 1, "kbytes_total": 2**42, "kbytes_avail": 2**40, field: value}
    message = {"oss_id": "big", "seq": 1, "time": 1_700_000_000, "cpu_pct": 1, "mem_pct": 1, "osts": [ost]}
    with default.client() as api:
        answer = api.post("/v1/stats", json=message)
    assert answer.status_code == 422 and field in answer.json()["detail"], answer.text


def test_extreme_values_that_fit_are_served_without_a_5xx(default):
    """The largest values the schemas take go through statistics, requests, allocation and every read."""
    osts = [{"name": f"fs-OST{i:04x}", "index": i, "kbytes_total": 2**42, "kbytes_avail": 2**42,
             "read_bytes": 2**63 - 1, "write_bytes": 2**63 - 1} for i in range(4)]
    message = {"oss_id": "extreme", "seq": 2**63 - 1, "time": 1_700_000_000, "cpu_pct": 100, "mem_pct": 100,
               "osts": osts}
    with default.client() as api:
        assert api.post("/v1/stats", json=message).status_code == 201
        for policy in ("iez", "rr", "qos"):
            app = f"extreme-{policy}"
            answer = api.post("/v1/requests", json={"app": app, "requests": [
                {"file": f"/lustre/{app}/{i}", "write_bytes": 2**55, "stripe_count": count, "rank": -1,
                 "stripe_size": 2**63 - 1} for i, count in enumerate((1, -1, 4, 2000))]})
            assert answer.status_code == 201, answer.text
            answer = api.post("/v1/allocate", json={"app": app, "policy": policy})
            assert answer.status_code in (200, 409), answer.text
        for path in ("/v1/osts", "/v1/oss", "/metrics", "/v1/apps/extreme-rr", "/healthz"):
            assert api.get(path).status_code == 200, path


def test_rank_minus_one_is_a_shared_file(default):
    with default.client() as api:
        answer = api.post("/v1/requests", json={"app": "shared", "requests": [
            {"file": "/lustre/shared/ssf", "write_bytes": 1 << 30, "stripe_count": 8, "rank": -1}]})
        assert answer.status_code == 201, answer.text
        assert api.get("/v1/apps/shared").json()["requests"][0]["rank"] == -1



@pytest.fixture(scope="module")
def owner_reads(tmp_path_factory):
    """A server whose reads go to owners (user tokens): lookups need a credential."""
    where = tmp_path_factory.mktemp("owners")
    tokens = where / "user-tokens"
    tokens.write_text("alice alice-token-0123456789abcdef\n")
    tokens.chmod(0o600)
    srv = Server(fresh_db("sqlite", where, "owners"), env={"IEZ_API_USER_TOKENS": str(tokens)})
    yield srv
    srv.stop()


def test_batch_lookups_with_owner_reads_are_authenticated_before_their_body_is_read(owner_reads):
    upload = Upload(owner_reads.url, "/v1/allocations/lookup", {}, 30 * MB)
    try:
        status, raw, _ = upload.answer()
        assert status == 401, raw
        assert upload.closed_by_server()
        assert upload.sent < 20 * MB, upload.sent
    finally:
        upload.close()
    alice = {"Authorization": "Bearer alice-token-0123456789abcdef"}
    answer = httpx.post(owner_reads.url + "/v1/allocations/lookup", json={"paths": ["/lustre/a"]}, headers=alice)
    assert answer.status_code == 200 and answer.json()["missing"] == ["/lustre/a"]
    bad = httpx.post(owner_reads.url + "/v1/allocations/lookup", json={"paths": ["relative"]}, headers=alice)
    assert bad.status_code == 422, bad.text  # the route explains, with the caller the fast path already knew


def test_batch_lookups_with_token_reads_are_authenticated_before_their_body_is_read(tmp_path):
    srv = Server(fresh_db("sqlite", tmp_path, "tokenreads"), env={"IEZ_API_READS": "token"})
    try:
        for headers, status in (({}, 401), ({"Authorization": "Bearer wrong-token"}, 403)):
            upload = Upload(srv.url, "/v1/allocations/lookup", headers, 30 * MB)
            try:
                code, raw, _ = upload.answer()
                assert code == status, raw
                assert upload.closed_by_server()
                assert upload.sent < 20 * MB, upload.sent
            finally:
                upload.close()
        answer = httpx.post(srv.url + "/v1/allocations/lookup", json={"paths": ["/lustre/t"]}, headers=TOKEN)
        assert answer.status_code == 200 and answer.json()["missing"] == ["/lustre/t"]
    finally:
        srv.stop()


def test_what_iez_predict_prints_is_accepted_as_it_is(default, tmp_path):
    """A shared file's request (rank -1), as ``iez predict --json`` prints it, posts unchanged."""
    from conftest import run_iez

    synth = run_iez("trace", "synth", "--workload", "ior-ssf", "--ranks", "4", "--runs", "4",
                    "--out", str(tmp_path / "runs"))
    assert synth.returncode == 0, synth.stderr
    predicted = run_iez("predict", str(tmp_path / "runs"), "--json", timeout=300)
    assert predicted.returncode == 0, predicted.stderr
    requests = json.loads(predicted.stdout)["requests"]
    assert any(r["rank"] == -1 for r in requests), requests
    with default.client() as api:
        answer = api.post("/v1/requests", json={"app": "predicted-ssf", "requests": requests})
    assert answer.status_code == 201, answer.text


@pytest.mark.parametrize("text, size", [("1048576", 1048576), ("512k", 512 * 1024), ("64M", 64 * 2**20),
                                        ("1GiB", 2**30), (" 2 m ", 2 * 2**20)])
def test_sizes_are_read_in_bytes_or_with_a_unit(text, size):
    from iez.api.limits import parse_size

    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "12x", "-1", "1.5M", "100"])
def test_a_size_that_is_not_one_is_refused_naming_the_setting(text):
    from iez.api.limits import parse_size

    with pytest.raises(ValueError, match="IEZ_API_MAX_BODY="):
        parse_size(text)


def test_large_bodies_in_flight_are_held_to_twice_the_limit(limited):
    """With a 1 MiB limit, two 1 MB bodies may be on their way at once; a third gets 503 at once (its body left
    unsent), and one finishing makes room again. Small bodies are never held back."""
    lookup = "/v1/allocations/lookup"
    first, second = (Upload(limited.url, lookup, {}, MB, hold=True) for _ in range(2))
    try:
        time.sleep(0.5)  # both requests reached the server and wait for their bodies
        third = Upload(limited.url, lookup, {}, MB, hold=True)
        try:
            status, raw, _ = third.answer()
            assert status == 503 and b"retry-after: 1" in raw.lower(), raw
            assert b"too many large request bodies" in raw
        finally:
            third.close()
        small = httpx.post(limited.url + lookup, json={"paths": ["/lustre/small"]}, timeout=30)
        assert small.status_code == 200  # small bodies pass meanwhile
        first.go.set()
        assert first.answer()[0] == 422  # whitespace is no JSON: served, and its room given back
        fourth = Upload(limited.url, lookup, {}, MB)
        try:
            assert fourth.answer()[0] == 422
        finally:
            fourth.close()
    finally:
        first.close()
        second.close()
