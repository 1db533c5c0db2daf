"""``iez map fetch``: a user downloads their own application's layout map from a real ``iez api`` (a per-user
token, or a MUNGE credential from a real munged), gets a file only they can read that the library then
places from, and gets one clear line - and no file - for someone else's application, a wrong URL, or an
answer that is not a map."""

from __future__ import annotations

import http.server
import json
import os
import stat
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import httpx
import pytest

from conftest import API_TOKEN, Munged, Server, fresh_db
from iez.maps import LayoutMap
from map_helpers import build_lib

pytestmark = pytest.mark.slow

ALICE_TOKEN, BOB_TOKEN = "alice-" + "a" * 26, "bob-" + "b" * 28


def requests_body(app: str, files: list[str]) -> dict:
    return {"app": app, "requests": [{"file": f, "write_bytes": 1 << 30, "stripe_count": 2, "rank": i}
                                     for i, f in enumerate(files)]}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fetch")
    tokens = tmp / "tokens"
    tokens.write_text(f"alice {ALICE_TOKEN}\nbob {BOB_TOKEN}\n")
    tokens.chmod(0o600)
    srv = Server(fresh_db("sqlite", tmp, "map_fetch"), env={"IEZ_API_USER_TOKENS": str(tokens)})
    service = {"Authorization": f"Bearer {API_TOKEN}"}
    httpx.post(srv.url + "/v1/stats", timeout=30, headers=service, json={
        "oss_id": "oss-fetch", "seq": 1, "time": 1_700_000_000.5, "cpu_pct": 1.0, "mem_pct": 1.0,
        "osts": [{"name": f"fs-OST{i:04x}", "index": i, "kbytes_total": 10 << 20, "kbytes_avail": 8 << 20}
                 for i in range(8)]}).raise_for_status()
    yield srv
    srv.stop()


def user_app(api: Server, token: str, files: list[str]) -> str:
    app = f"fetch-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.post(api.url + "/v1/requests", json=requests_body(app, files), headers=headers,
                      timeout=30).status_code == 201
    assert httpx.post(api.url + "/v1/allocate", json={"app": app}, headers=headers, timeout=30).status_code == 200
    return app


def fetch(api_url: str, app: str, out: Path, token: str | None, *extra: str, env: dict | None = None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("IEZ_API")}
    if token:
        environ["IEZ_API_USER_TOKEN"] = token
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "iez.cli", "map", "fetch", "--api", api_url, "--app", app,
                           "--out", str(out), *extra], capture_output=True, text=True, env=environ, timeout=120)


def test_a_user_fetches_their_own_map_and_the_library_places_from_it(api, tmp_path):
    work = tmp_path / "work"
    files = [str(work / f"out.{i}") for i in range(3)]
    app = user_app(api, ALICE_TOKEN, files)
    out = tmp_path / "maps" / "job.map"
    done = fetch(api.url, app, out, ALICE_TOKEN, "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["app"] == app and info["entries"] == 3 and info["path"] == str(out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    layouts = LayoutMap(out)
    assert layouts.app == app and all(layouts.lookup(f) is not None for f in files)
    # the job places from it with no DB at all
    work.mkdir()
    env = {**os.environ, "LD_PRELOAD": str(build_lib()), "IEZ_MAP": str(out), "IEZ_DB": str(tmp_path / "none.db"),
           "IEZ_STATE_DIR": str(tmp_path / "state")}
    subprocess.run(["touch", *files], env=env, check=True, timeout=60)
    for f in files:
        entry = layouts.lookup(f)
        attr = os.getxattr(f, "user.iez.layout").decode()
        assert f"osts={entry.osts.replace(' ', ',')}" in attr and f"stripe_size={entry.stripe_size}" in attr


def test_another_users_application_is_refused_and_nothing_is_written(api, tmp_path):
    app = user_app(api, ALICE_TOKEN, ["/lustre/fetch/alice.0"])
    out = tmp_path / "bob.map"
    out.write_bytes(b"previous")  # an earlier file is kept as it was
    done = fetch(api.url, app, out, BOB_TOKEN)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"iez map: error: {api.url}/v1/apps/{app}/map: 404 Not Found: "
                                   f"no application named {app!r}")
    assert out.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["bob.map"]  # no temporary file left behind
    # without any credential: 401, said in one line
    anonymous = fetch(api.url, app, tmp_path / "anon.map", None,
                      env={"IEZ_MUNGE_SOCKET": str(tmp_path / "no-munged.socket")})
    assert anonymous.returncode == 2 and ": 401 " in anonymous.stderr and not (tmp_path / "anon.map").exists()


def test_a_munge_user_fetches_with_a_credential_from_munged(tmp_path):
    munged = Munged()
    srv = Server(fresh_db("sqlite", tmp_path, "map_fetch_munge"), env={"IEZ_API_MUNGE_SOCKET": str(munged.socket)})
    try:
        app = f"fetch-{uuid.uuid4().hex[:8]}"
        me = {"Authorization": f"MUNGE {munged.credential(os.getuid())}"}
        assert httpx.post(srv.url + "/v1/requests", json=requests_body(app, ["/lustre/m/0"]), headers=me,
                          timeout=30).status_code == 201
        done = fetch(srv.url, app, tmp_path / "m.map", None, env={"IEZ_MUNGE_SOCKET": str(munged.socket)})
        assert done.returncode == 0, done.stderr
        assert LayoutMap(tmp_path / "m.map").app == app
    finally:
        srv.stop()
        munged.stop()


class _NotAMap(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the stdlib's name)
        body = b"<html>a proxy's login page</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_an_answer_that_is_not_a_map_or_no_server_is_one_line(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotAMap)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        done = fetch(url, "app", tmp_path / "x.map", ALICE_TOKEN)
        assert done.returncode == 2 and "did not answer a layout map" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())
    finally:
        server.shutdown()
    server.server_close()
    done = fetch(url, "app", tmp_path / "x.map", ALICE_TOKEN)
    assert done.returncode == 2 and done.stderr.startswith(f"iez map: error: cannot reach {url}")
    bad = fetch("ftp://example", "app", tmp_path / "x.map", ALICE_TOKEN)
    assert bad.returncode == 2 and "not an http:// or https:// URL" in bad.stderr
