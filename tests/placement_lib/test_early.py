"""libiez places files created before main (from a program's own constructors)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import BACKENDS, fresh_db

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_create_from_a_constructor_is_placed(backend, tmp_path):
    subprocess.run(["make", "-s", "-C", str(ROOT / "placement_lib")], check=True, stdout=subprocess.DEVNULL)
    exe = tmp_path / "before_main"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(ROOT / "placement_lib/tests/apps/before_main.c")], check=True)
    db = fresh_db(backend, tmp_path, "early")
    target = tmp_path / "out" / "early.dat"
    target.parent.mkdir()
    subprocess.run(["iez", "alloc", "add", "--db", db, "--file", str(target), "--stripe-size", "131072",
                    "--osts", "9,2"], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("IEZ_")}
    env.update(LD_PRELOAD=str(ROOT / "placement_lib/build/libiez.so"), IEZ_DB=db,
               IEZ_STATE_DIR=str(tmp_path / "state"), BEFORE_MAIN_PATH=str(target))
    done = subprocess.run([str(exe)], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")
    assert target.read_text() == "early\n"
    assert os.getxattr(target, "user.iez.layout") == b"version=1 stripe_size=131072 stripe_count=2 osts=9,2"
