"""Set-up on a fresh machine (issue 11), as a new user would do it, never skipped.

- The README's first command block, read from README.md, in a copy of this work tree and a new
  venv, with MariaDB's headers, Open MPI, HDF5 and fio out of sight (no ``mariadb_config`` or
  ``mysql_config``, ``mpicc``, ``mpirun``, ``h5cc``, ``fio`` on ``PATH``; ``PKG_CONFIG_LIBDIR`` an
  empty directory) and ``PIP_NO_CACHE_DIR=1``: it completes and ``iez demo`` reports ok.
- An OSS's install, ``pip install ./agents`` in a new venv: ``iez-agent`` parses a saved
  ``lctl get_param`` output, and the venv holds pyzmq and the agent only (no numpy, no iez).

The copy holds the files git knows here (committed or new, not ignored), so the tests test the
tree they run in. Slow: pip downloads and installs every dependency (numpy, matplotlib,
statsmodels, ...) with its cache off.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: What a fresh machine does not have: MariaDB Connector/C's config tools, MPI, HDF5, fio.
HIDDEN = {"mariadb_config", "mysql_config", "mpicc", "mpicxx", "mpirun", "mpiexec", "orterun", "h5cc", "h5pcc",
          "fio"}
LCTL_OUTPUT = "tests/data/lustre-params/lustre-2.15-ex8761-lctl.txt"


def copy_tree(dest: Path) -> Path:
    """The files of this work tree that git tracks or would track (not ignored ones) into ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout
    for name in filter(None, listed.split(b"\0")):
        src = ROOT / os.fsdecode(name)
        if not os.path.lexists(src):  # deleted in the work tree, not yet in git
            continue
        target = dest / os.fsdecode(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
    return dest


def bare_bin(dest: Path) -> Path:
    """A directory of links to every program on PATH except :data:`HIDDEN` and this test's own venv."""
    dest.mkdir()
    ours = Path(sysconfig.get_path("scripts")).resolve()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or not os.path.isdir(directory) or Path(directory).resolve() == ours:
            continue
        for entry in os.scandir(directory):
            link = dest / entry.name
            if entry.name in HIDDEN or os.path.lexists(link) or not os.access(entry.path, os.X_OK) \
                    or entry.is_dir():
                continue
            link.symlink_to(entry.path)
    return dest


def fresh_env(tmp: Path, venv: Path) -> dict[str, str]:
    (tmp / "no-pkgconfig").mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("IEZ_", "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "VIRTUAL_ENV", "PKG_CONFIG",
                                "MYSQLCLIENT_", "LD_PRELOAD", "CONDA"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{bare_bin(tmp / 'bin')}", VIRTUAL_ENV=str(venv),
               PKG_CONFIG_LIBDIR=str(tmp / "no-pkgconfig"), PIP_NO_CACHE_DIR="1",
               IEZ_STATE_DIR=str(tmp / "state"), TMPDIR=str(tmp))
    return env


def make_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return path


def setup_block(readme: Path, index: int) -> str:
    """The ``index``-th ```sh block under "## Set-up on a fresh machine"."""
    text = readme.read_text()
    section = text[text.index("## Set-up on a fresh machine"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, re.S | re.M)
    assert len(blocks) == 2, "the README's set-up has exactly two commands: the main job and the tests"
    return blocks[index]


def run(cmd, *, cwd: Path, env: dict, timeout: float, shell: bool = False) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", cmd] if shell else cmd, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def installed(venv: Path, env: dict, cwd: Path) -> set[str]:
    listed = run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"], cwd=cwd, env=env, timeout=120)
    return {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_readme_main_command_on_a_fresh_machine(tmp_path):
    tree = copy_tree(tmp_path / "iez")
    venv = make_venv(tmp_path / "venv")
    env = fresh_env(tmp_path, venv)
    for tool in ("mariadb_config", "mysql_config", "mpicc", "mpirun", "h5cc"):
        assert shutil.which(tool, path=env["PATH"]) is None, tool

    block = setup_block(tree / "README.md", 0)
    assert block.count("iez demo") == 1 and block.rstrip().endswith("iez demo"), block
    # the command verbatim, with --json so the result can be read
    t0 = time.monotonic()
    done = run(block.rstrip() + " --json", cwd=tree, env=env, timeout=2100, shell=True)
    elapsed = time.monotonic() - t0
    report = json.loads(done.stdout[re.search(r"^\{$", done.stdout, re.M).start():])
    assert report["ok"] is True, report["steps"]
    assert report["writer"] == "python", report  # no MPI here: the demo's Python writers
    assert set(report["ost_cost"]) >= {"iez", "rr"}, report
    assert (tree / "iez-demo.png").is_file()
    print(f"README main command on a fresh venv: {elapsed:.0f} s")
    # without Connector/C the preload library has its SQLite backend only
    built = run(["make", "-C", "placement_lib"], cwd=tree, env=env, timeout=300)
    assert "libiez backends: sqlite=yes mariadb=no" in built.stdout, built.stdout

    # a scientist's iez run anywhere after that install: the preload library came with the package (issue 30)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_env = {**env, "IEZ_STATE_DIR": str(elsewhere / "state")}
    found = run([str(venv / "bin" / "python"), "-c", "from iez.runtime import find_library; print(find_library())"],
                cwd=elsewhere, env=run_env, timeout=120)
    assert found.stdout.strip().startswith(str(venv)) and found.stdout.strip().endswith("iez/_lib/libiez.so"), \
        found.stdout
    run([str(venv / "bin" / "iez"), "db", "upgrade", "--db", str(elsewhere / "state" / "iez.db")], cwd=elsewhere,
        env=run_env, timeout=120)
    traced = run([str(venv / "bin" / "iez"), "run", "writer", "--", "sh", "-c", "echo hi > out.txt"], cwd=elsewhere,
                 env=run_env, timeout=300)
    assert (elsewhere / "out.txt").read_text() == "hi\n" and "learnt from 1 traced run" in traced.stderr, traced.stderr

    # no MariaDB driver in this install, and a mysql:// database says what to install, in one line
    assert "mysqlclient" not in installed(venv, env, tree)
    refused = subprocess.run([str(venv / "bin" / "iez"), "db", "current", "--db", "mysql://root@127.0.0.1:3306/x"],
                             cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "'.[mariadb]'" in refused.stderr and "libmariadb-dev pkg-config" in refused.stderr, refused.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_oss_installs_only_the_agent(tmp_path):
    tree = copy_tree(tmp_path / "iez")
    venv = make_venv(tmp_path / "venv")
    env = fresh_env(tmp_path, venv)
    elsewhere = tmp_path / "oss"  # not the source tree: only the installed package can be imported
    elsewhere.mkdir()

    run([str(venv / "bin" / "python"), "-m", "pip", "install", "./agents"], cwd=tree, env=env, timeout=600)
    agent = shutil.which("iez-agent", path=env["PATH"])
    assert agent == str(venv / "bin" / "iez-agent")
    done = run([agent, "--once", "--json", "--lctl-output", str(tree / LCTL_OUTPUT), "--oss-id", "oss1"],
               cwd=elsewhere, env=env, timeout=60)
    message = json.loads(done.stdout.splitlines()[0])
    assert message["schema"] == "iez.oss-stats" and message["oss_id"] == "oss1" and message["source"] == "file"
    assert [o["name"] for o in message["osts"]] == ["fs-OST0000", "fs-OST0001"]
    assert all(o["kbytes_total"] > 0 for o in message["osts"])

    packages = installed(venv, env, elsewhere)
    assert {"iez-agent", "pyzmq"} <= packages
    assert "numpy" not in packages and "iez" not in packages
    assert not packages - {"iez-agent", "pyzmq", "pip", "setuptools", "wheel"}, packages

    # every module of the agent imports with pyzmq and the standard library alone, nothing from iez
    code = ("import importlib, pkgutil, sys, agents\n"
            "for m in pkgutil.iter_modules(agents.__path__): importlib.import_module('agents.' + m.name)\n"
            "assert agents.__file__.startswith(sys.prefix), agents.__file__\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('iez', 'numpy', 'sqlalchemy')))")
    imported = run([str(venv / "bin" / "python"), "-c", code], cwd=elsewhere, env=env, timeout=60)
    assert imported.stdout.strip() == "[]", imported.stdout
    keys = run([agent, "keys", str(tmp_path / "keys"), "oss1"], cwd=elsewhere, env=env, timeout=60)
    assert (tmp_path / "keys" / "oss1.key").is_file(), keys.stdout
