"""What oversized and large bodies cost the REST API (issue 15), on SQLite.

    python benchmarks/api_limits_bench.py [--json]

Starts ``iez api`` on a fresh SQLite DB and measures:

- ``refuse_100mb_ms``: from sending the headers of a 100 MB ``POST /v1/requests``
  (Content-Length) to the 413, with the body streaming meanwhile; ``sent_mb``:
  how much of it went out before the server closed the connection;
  ``peak_rss_growth_mb``: the server's peak RSS (VmHWM) growth over four such
  bodies at once, with and without a token;
- ``lookup_p99_ms_during_big_batch``: the p99 of single lookups
  (``GET /v1/allocations``) while a 60 MB ``POST /v1/allocations/lookup``
  (within the 64 MiB limit) is received and parsed, and ``..._idle`` without it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "api"))

from api_limits_helpers import Upload, rss_kib  # noqa: E402
from conftest import API_TOKEN, Server, fresh_db  # noqa: E402

MB = 1_000_000


def single_lookups(url: str, seconds: float) -> list[float]:
    out = []
    with httpx.Client(base_url=url, timeout=30) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            start = time.perf_counter()
            client.get("/v1/allocations", params={"path": "/lustre/none"})
            out.append((time.perf_counter() - start) * 1000)
    return out


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else values[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(fresh_db("sqlite", Path(tmp), "bench"))
        try:
            result: dict = {}
            upload = Upload(srv.url, "/v1/requests", {"Authorization": f"Bearer {API_TOKEN}"}, 100 * MB)
            status, _, seconds = upload.answer()
            upload.closed_by_server()
            upload.close()
            result.update(refuse_status=status, refuse_100mb_ms=round(seconds * 1000, 2),
                          sent_mb=round(upload.sent / MB, 2))
            before = rss_kib(srv.proc.pid, "VmHWM")
            uploads = [Upload(srv.url, "/v1/requests", headers, 100 * MB)
                       for headers in ({}, {}, {"Authorization": f"Bearer {API_TOKEN}"},
                                       {"Authorization": f"Bearer {API_TOKEN}"})]
            for each in uploads:
                each.answer()
                each.close()
            result["peak_rss_growth_mb"] = round((rss_kib(srv.proc.pid, "VmHWM") - before) / 1024, 1)

            result["lookup_p99_ms_idle"] = round(p99(single_lookups(srv.url, 2.0)), 2)
            paths = [f"/lustre/batch/{i:09d}/" + "x" * 560 for i in range(100_000)]  # ~60 MB of JSON
            body = json.dumps({"paths": paths}).encode()
            result["big_batch_mb"] = round(len(body) / MB, 1)
            done = {}

            def post() -> None:
                start = time.perf_counter()
                answer = httpx.post(srv.url + "/v1/allocations/lookup", content=body, timeout=120,
                                    headers={"Content-Type": "application/json"})
                done.update(status=answer.status_code, seconds=time.perf_counter() - start)

            thread = threading.Thread(target=post)
            thread.start()
            during = single_lookups(srv.url, 3.0)
            thread.join()
            result.update(big_batch_status=done["status"], big_batch_s=round(done["seconds"], 2),
                          lookup_p99_ms_during_big_batch=round(p99(during), 2),
                          lookup_max_ms_during_big_batch=round(max(during), 2))
        finally:
            srv.stop()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:34} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
