"""``iez learn --darshan-dir`` (issue 26, item 2): real Darshan logs in Darshan's dated tree, imported by the real
command against a real DB: grouped by application and user, each group's next run predicted and stored; a second
run imports nothing (a restart included), a new log is imported alone, a corrupt log is one line and skipped."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from darshan_dir_bench import SOURCE, make_logs  # noqa: E402

pytestmark = [pytest.mark.timeout(600),
              pytest.mark.skipif(not (SOURCE / "ior-posix-16ranks.darshan").is_file(), reason="no Darshan logs")]


def learn(tmp: Path, logs: Path, db: str) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, "-m", "iez.cli", "learn", "--darshan-dir", str(logs), "--db", db, "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=600,
                          env={**os.environ, "IEZ_STATE_DIR": str(tmp / "state")})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


@pytest.mark.slow
def test_a_darshan_tree_is_learnt_incrementally_and_never_read_twice(tmp_path):
    db = str(tmp_path / "iez.db")
    subprocess.run([sys.executable, "-m", "iez.cli", "db", "upgrade", "--db", db], check=True, cwd=REPO,
                   capture_output=True)
    logs = tmp_path / "logs"
    plan = make_logs(logs, 10, users=2)
    for src, dst in plan[:7]:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    partial = plan[0][1].with_name("user0_ior_id99_11-1-1-0.darshan_partial")  # still being written: not read
    partial.write_bytes(b"half")
    corrupt = logs / "2026" / "11" / "2" / "user1_ior_id98_11-2-5-0.darshan"
    corrupt.write_bytes(os.urandom(4096))

    first, err = learn(tmp_path, logs, db)
    assert first["seen"] == 8 and first["imported"] == 7 and first["corrupt"] == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and str(corrupt) in lines[0] and "corrupt" in lines[0]

    with sqlite3.connect(db) as conn:
        apps = dict(conn.execute("SELECT a.name, a.owner FROM applications a"))
        counts = dict(conn.execute("SELECT a.name, count(r.id) FROM applications a JOIN write_requests r "
                                   "ON r.app_id = a.id WHERE r.source = 'predicted' GROUP BY a.name"))
    # grouped by application (the log's executable) and user (the name's), stored as <exe>.<user>, owned by the user
    assert "ior.user0" in apps and apps["ior.user0"] == "user0"
    assert all(name.rsplit(".", 1)[1] == owner for name, owner in apps.items())
    assert counts and all(n > 0 for n in counts.values())

    again, err = learn(tmp_path, logs, db)  # a new process: the state file, not memory, says what is known
    assert again["imported"] == 0 and again["corrupt"] == 0 and again["skipped"] == 8 and err == ""

    for src, dst in plan[7:]:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    third, _ = learn(tmp_path, logs, db)
    assert third["imported"] == 3 and third["skipped"] == 8 and third["groups"] >= 1

    state = sqlite3.connect(tmp_path / "state" / "darshan-imports.sqlite")
    rows = state.execute("SELECT status, count(*) FROM logs GROUP BY status").fetchall()
    assert dict(rows) == {"ok": 10, "corrupt": 1}
    assert state.execute("SELECT count(*) FROM pending").fetchone() == (0,)


PFL_LOG = REPO / "tests" / "trace" / "data" / "pfl-synthetic.darshan"


@pytest.mark.skipif(not PFL_LOG.is_file(), reason="no PFL Darshan log")
def test_a_tree_keeps_each_files_pool_and_pfl_template(tmp_path):
    """What ``iez learn --darshan`` keeps of one log (pool, PFL template), the tree's import keeps too: the
    import state records each request's policy, not only its size and stripe count."""
    db = str(tmp_path / "iez.db")
    subprocess.run([sys.executable, "-m", "iez.cli", "db", "upgrade", "--db", db], check=True, cwd=REPO,
                   capture_output=True)
    logs = tmp_path / "logs"
    for k in range(2):  # two runs of one application by one user
        target = logs / "2026" / "11" / "3" / f"alice_pflapp_id{500 + k}_11-3-{3600 + k}-{k:08x}.darshan"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PFL_LOG, target)
    done, _ = learn(tmp_path, logs, db)
    assert done["imported"] == 2
    with sqlite3.connect(db) as conn:
        rows = dict(conn.execute("SELECT r.path, r.components FROM write_requests r WHERE r.source = 'predicted' "
                                 "AND r.path LIKE '%pfl.dat'"))
        pools = dict(conn.execute("SELECT r.path, r.pool FROM write_requests r WHERE r.source = 'predicted'"))
    assert list(rows) == ["/lustre/scratch/pfl/pfl.dat"], rows
    template = json.loads(rows["/lustre/scratch/pfl/pfl.dat"])
    assert [(c["end"], c["stripe_count"]) for c in template] == [(4 << 20, 1), (64 << 20, 4), (-1, 8)]
    assert pools["/lustre/scratch/pfl/pfl.dat"] == "flash" and pools["/lustre/scratch/pfl/plain.dat"] == "disk"
