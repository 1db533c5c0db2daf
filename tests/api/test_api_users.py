"""Users read only their own layouts: a real ``munged`` (its own key and socket) and per-user token files in
front of a real ``iez api``; each user's requests, allocations, lookups, application and layout map are served
to that user and the service credential only, and anyone else gets what a missing one gets."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

from conftest import API_TOKEN, BACKENDS, Munged, Server, fresh_db, run_iez
from iez.maps import LayoutMap

pytestmark = pytest.mark.slow

# Two users as munged sees them: "nobody" from the password database, and a uid that has no entry there.
ALICE_UID, BOB_UID = 65534, 41002
ALICE, BOB = "nobody", "41002"


def agent_message(oss_id: str, indices) -> dict:
    return {"oss_id": oss_id, "seq": 1, "time": 1_700_000_000.5, "cpu_pct": 12.5, "mem_pct": 40.0,
            "osts": [{"name": f"fs-OST{i:04x}", "index": i, "kbytes_total": 10 << 20, "kbytes_avail": 8 << 20}
                     for i in indices]}


@pytest.fixture(scope="module")
def munged():
    daemon = Munged()
    yield daemon
    daemon.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def requests_body(app: str, files: list[str]) -> dict:
    return {"app": app, "requests": [{"file": f, "write_bytes": 1 << 30, "stripe_count": 2, "rank": i}
                                     for i, f in enumerate(files)]}


class Users:
    """One way of authenticating two users against ``url``: ``headers(who)`` gives a fresh header each call."""

    def __init__(self, url: str, headers):
        self.url, self.headers = url, headers

    def get(self, who, path, **kw):
        return httpx.get(self.url + path, headers=self.headers(who), timeout=30, **kw)

    def post(self, who, path, body):
        return httpx.post(self.url + path, json=body, headers=self.headers(who), timeout=30)


SERVICE = {"Authorization": f"Bearer {API_TOKEN}"}


def check_isolation(users: Users, tag: str) -> None:
    """Alice and Bob each write, allocate and read their own application; neither sees the other's."""
    httpx.post(users.url + "/v1/stats", json=agent_message(unique("oss"), range(200, 208)), headers=SERVICE,
               timeout=30).raise_for_status()
    apps, files = {}, {}
    for who in ("alice", "bob"):
        apps[who] = unique(f"{tag}-{who}")
        files[who] = [f"/lustre/{apps[who]}/out.{i}" for i in range(3)]
        answer = users.post(who, "/v1/requests", requests_body(apps[who], files[who]))
        assert answer.status_code == 201, answer.text
        answer = users.post(who, "/v1/allocate", {"app": apps[who]})
        assert answer.status_code == 200, answer.text
        assert sorted(a["file"] for a in answer.json()["allocations"]) == files[who]
    owner = {"alice": ALICE if tag == "munge" else "alice", "bob": BOB if tag == "munge" else "bob"}

    for me, other in (("alice", "bob"), ("bob", "alice")):
        # my application, with me as its owner; the other's is as unknown as one that does not exist
        mine = users.get(me, f"/v1/apps/{apps[me]}")
        assert mine.status_code == 200 and mine.json()["owner"] == owner[me]
        assert mine.json()["pending"] == 0
        theirs = users.get(me, f"/v1/apps/{apps[other]}")
        nowhere = users.get(me, "/v1/apps/no-such-app")
        assert theirs.status_code == nowhere.status_code == 404
        assert theirs.json() == {"detail": f"no application named {apps[other]!r}"}
        # one lookup (the fast path) and the batch lookup
        assert users.get(me, "/v1/allocations", params={"path": files[me][0]}).json()["file"] == files[me][0]
        refused = users.get(me, "/v1/allocations", params={"path": files[other][0]})
        assert refused.status_code == 404 and refused.json() == {"detail": f"no allocation for {files[other][0]}"}
        batch = users.post(me, "/v1/allocations/lookup", {"paths": files[me] + files[other]}).json()
        assert sorted(a["file"] for a in batch["allocations"]) == files[me] and batch["missing"] == files[other]
        # the layout map: mine holds my files; the other's is refused like a missing one
        got = users.get(me, f"/v1/apps/{apps[me]}/map")
        assert got.status_code == 200 and got.headers["x-iez-map-entries"] == "3"
        with tempfile.NamedTemporaryFile(suffix=".map") as out:
            out.write(got.content)
            out.flush()
            layouts = LayoutMap(out.name)
            assert layouts.app == apps[me]
            assert all(layouts.lookup(f) is not None for f in files[me])
            assert layouts.lookup(files[other][0]) is None
        assert users.get(me, f"/v1/apps/{apps[other]}/map").json() == {
            "detail": f"no application named {apps[other]!r}"}
        # writing to or allocating the other's application is refused
        answer = users.post(me, "/v1/requests", requests_body(apps[other], [f"/lustre/{apps[other]}/mine"]))
        assert answer.status_code == 403 and "another user's" in answer.json()["detail"]
        answer = users.post(me, "/v1/allocate", {"app": apps[other]})
        assert answer.status_code == 404 and answer.json() == {"detail": f"no application named {apps[other]!r}"}
        # only the service credential gives an application away
        answer = users.post(me, "/v1/requests", {**requests_body(unique("gift"), ["/lustre/g"]), "owner": owner[other]})
        assert answer.status_code == 403
        # cluster-wide views are for any authenticated user
        assert users.get(me, "/v1/osts").status_code == 200

    # the service credential reads everything
    both = httpx.post(users.url + "/v1/allocations/lookup", json={"paths": files["alice"] + files["bob"]},
                      headers=SERVICE, timeout=30).json()
    assert both["missing"] == [] and len(both["allocations"]) == 6
    for who in ("alice", "bob"):
        assert httpx.get(users.url + f"/v1/apps/{apps[who]}", headers=SERVICE, timeout=30).json()["owner"] == owner[who]

    # without credentials: nothing but health
    for path in ("/v1/osts", f"/v1/apps/{apps['alice']}", f"/v1/allocations?path={files['alice'][0]}"):
        answer = httpx.get(users.url + path, timeout=30)
        assert answer.status_code == 401 and "MUNGE" in answer.json()["detail"], path
    assert httpx.post(users.url + "/v1/requests", json=requests_body(unique("anon"), ["/lustre/a"]),
                      timeout=30).status_code == 401
    assert httpx.get(users.url + "/healthz", timeout=30).status_code == 200


@pytest.mark.parametrize("backend", BACKENDS)
def test_munge_users_read_only_their_own_layouts(backend, tmp_path, munged):
    db = fresh_db(backend, tmp_path, "users_munge")
    srv = Server(db, env={"IEZ_API_MUNGE_SOCKET": str(munged.socket)})
    try:
        uids = {"alice": ALICE_UID, "bob": BOB_UID}
        check_isolation(Users(srv.url, lambda who: munged.header(uids[who])), "munge")
    finally:
        srv.stop()


def test_munge_credentials_are_checked_by_munged(tmp_path, munged):
    """Replayed, forged and foreign credentials are refused with the reason; a pinned layout (no owner) and
    the service's own applications are the service's alone."""
    db = fresh_db("sqlite", tmp_path, "users_munge_bad")
    done = run_iez("alloc", "add", "--db", db, "--file", "/lustre/pinned/f", "--stripe-size", "1048576",
                   "--osts", "1,2")
    assert done.returncode == 0, done.stderr
    srv = Server(db, env={"IEZ_API_MUNGE_SOCKET": str(munged.socket)})
    try:
        url = srv.url + "/v1/osts"
        credential = munged.credential(ALICE_UID)
        assert httpx.get(url, headers={"Authorization": f"MUNGE {credential}"}).status_code == 200
        again = httpx.get(url, headers={"Authorization": f"MUNGE {credential}"})
        assert again.status_code == 401 and again.json() == {"detail": "MUNGE credential refused: replayed credential"}
        forged = credential[:20] + ("A" if credential[20] != "A" else "B") + credential[21:]
        assert httpx.get(url, headers={"Authorization": f"MUNGE {forged}"}).status_code == 401
        garbage = httpx.get(url, headers={"Authorization": "MUNGE not-a-credential"})
        assert garbage.json() == {"detail": "MUNGE credential refused: invalid credential format"}
        # a credential of another MUNGE realm (another key) is refused too
        other = Munged()
        try:
            foreign = httpx.get(url, headers={"Authorization": f"MUNGE {other.credential(ALICE_UID)}"})
            assert foreign.status_code == 401 and "MUNGE credential refused" in foreign.json()["detail"]
        finally:
            other.stop()
        # what a client sends from its environment: a new credential of its own user each time
        from iez.api.auth import client_header

        for _ in range(2):
            header = client_header({"IEZ_MUNGE_SOCKET": str(munged.socket)})
            assert header["Authorization"].startswith("MUNGE MUNGE:")
            assert httpx.get(url, headers=header).status_code == 200
        assert client_header({"IEZ_API_USER_TOKEN": ALICE_TOKEN}) == {"Authorization": f"Bearer {ALICE_TOKEN}"}
        # the fast path refuses a replay the same way
        credential = munged.credential(ALICE_UID)
        path = srv.url + "/v1/allocations?path=/lustre/pinned/f"
        assert httpx.get(path, headers={"Authorization": f"MUNGE {credential}"}).status_code == 404
        assert httpx.get(path, headers={"Authorization": f"MUNGE {credential}"}).json()["detail"] == \
            "MUNGE credential refused: replayed credential"
        # a layout pinned by hand belongs to nobody: only the service sees it
        assert httpx.get(path, headers=munged.header(ALICE_UID)).json() == {"detail": "no allocation for /lustre/pinned/f"}
        assert httpx.get(path, headers=SERVICE).json()["osts"] == [1, 2]
        # the service posts requests without an owner: the application is the service's alone, until given away
        app = unique("svc")
        assert httpx.post(srv.url + "/v1/requests", json=requests_body(app, ["/lustre/svc/f"]),
                          headers=SERVICE).status_code == 201
        assert httpx.get(srv.url + f"/v1/apps/{app}", headers=munged.header(ALICE_UID)).status_code == 404
        assert httpx.post(srv.url + "/v1/requests", json={**requests_body(app, ["/lustre/svc/f"]), "owner": ALICE},
                          headers=SERVICE).status_code == 201
        assert httpx.get(srv.url + f"/v1/apps/{app}", headers=munged.header(ALICE_UID)).json()["owner"] == ALICE
        assert httpx.get(srv.url + f"/v1/apps/{app}", headers=munged.header(BOB_UID)).status_code == 404
    finally:
        srv.stop()


def write_tokens(path: Path, lines: str, mode: int = 0o600) -> Path:
    path.write_text(lines)
    os.chmod(path, mode)
    return path


ALICE_TOKEN, BOB_TOKEN = "alice-" + "a" * 26, "bob-" + "b" * 28


@pytest.mark.parametrize("backend", BACKENDS)
def test_token_users_read_only_their_own_layouts(backend, tmp_path):
    db = fresh_db(backend, tmp_path, "users_tokens")
    tokens = write_tokens(tmp_path / "tokens", f"# user token\nalice {ALICE_TOKEN}\nbob {BOB_TOKEN}\n")
    srv = Server(db, env={"IEZ_API_USER_TOKENS": str(tokens)})
    try:
        mine = {"alice": ALICE_TOKEN, "bob": BOB_TOKEN}
        check_isolation(Users(srv.url, lambda who: {"Authorization": f"Bearer {mine[who]}"}), "tokens")
        # a token added to the file works without a restart; a wrong one is refused
        carol = "carol-" + "c" * 26
        write_tokens(tokens, tokens.read_text() + f"carol {carol}\n")
        assert httpx.get(srv.url + "/v1/osts", headers={"Authorization": f"Bearer {carol}"}).status_code == 200
        wrong = httpx.get(srv.url + "/v1/osts", headers={"Authorization": "Bearer " + "x" * 32})
        assert wrong.status_code == 403 and wrong.json() == {"detail": "invalid bearer token"}
    finally:
        srv.stop()


def test_a_tokens_file_others_can_read_or_with_weak_tokens_is_refused_at_start(tmp_path):
    db = fresh_db("sqlite", tmp_path, "users_tokens_bad")
    env = {"IEZ_API_TOKEN": API_TOKEN}

    def start(tokens: Path) -> subprocess.CompletedProcess:
        return run_iez("api", "--db", db, "--port", "0", "--user-tokens", str(tokens), env=env, timeout=30)

    loose = write_tokens(tmp_path / "loose", f"alice {ALICE_TOKEN}\n", 0o644)
    done = start(loose)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"iez api: error: IEZ_API_USER_TOKENS={loose}: other users may access it "
                                   f"(mode -rw-r--r--): chmod o-rwx {loose}")
    weak = write_tokens(tmp_path / "weak", f"alice {ALICE_TOKEN}\nbob short\n")
    done = start(weak)
    assert done.returncode == 2 and f"IEZ_API_USER_TOKENS={weak} line 2: the token of 'bob' has 5 characters" \
        in done.stderr
    service = write_tokens(tmp_path / "service", f"alice {API_TOKEN}\n")
    done = start(service)
    assert done.returncode == 2 and "is IEZ_API_TOKEN, the service credential" in done.stderr
    twice = write_tokens(tmp_path / "twice", f"alice {ALICE_TOKEN}\nbob {ALICE_TOKEN}\n")
    done = start(twice)
    assert done.returncode == 2 and "line 2: the same token as line 1" in done.stderr
    done = run_iez("api", "--db", db, "--port", "0", env={**env, "IEZ_API_READS": "owner"}, timeout=30)
    assert done.returncode == 2 and "IEZ_API_READS=owner needs a way for users to authenticate" in done.stderr
    done = run_iez("api", "--db", db, "--port", "0", "--munge-socket", str(tmp_path / "nope"), env=env, timeout=30)
    assert done.returncode == 2 and "no such socket (is munged running?)" in done.stderr


def test_open_reads_stay_the_default_without_users_and_owners_come_from_the_command_line(tmp_path):
    """Without user authentication reads stay open (the contract); ``iez learn`` records the login user as
    the owner of the application it creates, whom the API then serves."""
    import pwd

    from conftest import run_iez as iez
    from iez.predict.synth import SynthSpec, write_runs

    db = fresh_db("sqlite", tmp_path, "users_cli")
    write_runs(SynthSpec("ior-fpp", 2, runs=2), tmp_path / "t")
    done = iez("learn", "ior", "--trace", str(tmp_path / "t"), "--db", db, "--json",
               env={"IEZ_STATE_DIR": str(tmp_path / "state")})
    assert done.returncode == 0, done.stderr
    me = pwd.getpwuid(os.getuid()).pw_name
    srv = Server(db)
    try:
        assert httpx.get(srv.url + "/v1/apps/ior").json()["owner"] == me  # open reads: no credential needed
    finally:
        srv.stop()
    tokens = write_tokens(tmp_path / "tokens", f"{me} {ALICE_TOKEN}\nbob {BOB_TOKEN}\n")
    srv = Server(db, env={"IEZ_API_USER_TOKENS": str(tokens)})
    try:
        assert httpx.get(srv.url + "/v1/apps/ior", headers={"Authorization": f"Bearer {ALICE_TOKEN}"}).status_code == 200
        assert httpx.get(srv.url + "/v1/apps/ior", headers={"Authorization": f"Bearer {BOB_TOKEN}"}).status_code == 404
    finally:
        srv.stop()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
