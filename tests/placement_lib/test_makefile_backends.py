"""Issue 30 item 7: the Makefile chooses libiez's DB backends by a compile-and-link probe.

A tester with a broken or foreign ``mariadb_config`` on PATH saw ``iez demo`` fail to build the library
(``mysql.h: No such file``): the Makefile took the tool's presence as proof of a usable Connector/C. The
build must now go on without the MariaDB backend, say so, and still produce a library that loads.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

LIB_DIR = Path(__file__).resolve().parents[2] / "placement_lib"

BROKEN = """#!/bin/sh
# a mariadb_config whose headers are gone (a half-removed -dev package)
case "$1" in
  --cflags) echo "-I/nonexistent/mariadb" ;;
  --variable=pkglibdir) echo "{libdir}" ;;
  --libs_sys) echo "-lz -ldl -lm" ;;
  *) echo "-L/nonexistent" ;;
esac
"""

FOREIGN = """#!/bin/sh
# some other program that happens to be called mariadb_config
echo "usage: mariadb_config is not what you think" >&2
exit 2
"""


def _build(tmp_path: Path, tool: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if tool is not None:
        bindir = tmp_path / "bin"
        bindir.mkdir()
        script = bindir / "mariadb_config"
        script.write_text(tool)
        script.chmod(0o755)
        env["PATH"] = f"{bindir}:{env['PATH']}"
    build = tmp_path / "build"
    return subprocess.run(["make", "-C", str(LIB_DIR), f"BUILD={build}", str(build / "libiez.so"), "all"],
                          env=env, capture_output=True, text=True, timeout=600)


def _real_libdir() -> str:
    real = shutil.which("mariadb_config")
    if real:
        out = subprocess.run([real, "--variable=pkglibdir"], capture_output=True, text=True).stdout.strip()
        if out:
            return out
    return "/usr/lib/x86_64-linux-gnu"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["broken", "foreign"])
def test_bad_mariadb_config_builds_without_mariadb_and_says_so(tmp_path, kind):
    tool = BROKEN.format(libdir=_real_libdir()) if kind == "broken" else FOREIGN
    done = _build(tmp_path, tool)
    assert done.returncode == 0, f"make failed with a {kind} mariadb_config:\n{done.stdout}\n{done.stderr}"
    assert "mariadb=no" in done.stdout, done.stdout
    assert "without the MariaDB backend" in done.stderr, done.stderr
    assert "mysql.h" not in done.stderr or "did not compile" in done.stderr
    ctypes.CDLL(str(tmp_path / "build" / "libiez.so"))  # the library it built loads


@pytest.mark.timeout(600)
def test_working_connector_is_still_found(tmp_path):
    """Where this machine has a usable Connector/C (headers and libmariadb.a), the probe keeps it."""
    real = shutil.which("mariadb_config")
    if real is None or not Path(_real_libdir(), "libmariadb.a").exists():
        pytest.skip("no MariaDB Connector/C development files on this machine")
    done = _build(tmp_path, None)
    assert done.returncode == 0, done.stderr
    assert "mariadb=yes" in done.stdout, done.stdout + done.stderr
