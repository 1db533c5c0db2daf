"""Helpers of the inventory's tests: what the inventory holds, and what the tree holds, as the same dict; and
their fixtures (a real database, SQLite and MariaDB, emptied of inventory rows; an emulated cluster), imported
by the test modules: a ``conftest.py`` here would be the module ``conftest`` that other directories' tests
import ``tests/conftest.py`` by."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text

from iez.config import database_url
from iez.inventory.store import Paths
from iez.inventory.tables import InvChangelog, InvFile
from iez.layout import emulated
from iez.layout.model import Layout


def held(engine) -> dict[str, tuple[int, str | None]]:
    """path → (size, layout text) of every file the inventory holds (stale ones too)."""
    with engine.connect() as conn:
        paths = Paths.load(conn)
        return {f"{paths.path(p)}/{n}": (size, layout) for p, n, size, layout in
                conn.execute(select(InvFile.parent, InvFile.name, InvFile.size, InvFile.layout))}


def tree(root: Path) -> dict[str, tuple[int, str | None]]:
    """path → (size, layout text) of every regular file below root, read from the files themselves."""
    out = {}
    for top, _, files in os.walk(root):
        for name in files:
            path = os.path.join(top, name)
            try:
                text = os.getxattr(path, emulated.xattr_name()).decode()
                text = emulated.format_attr(emulated.parse_attr(text, path))
            except OSError:
                text = None
            out[path] = (os.lstat(path).st_size, text)
    return out


def position(engine, mdt: str) -> tuple[int, int, int]:
    """(position, records applied, rescans) of the consumer of ``mdt``."""
    with engine.connect() as conn:
        row = conn.execute(select(InvChangelog.position, InvChangelog.records, InvChangelog.rescans)
                           .where(InvChangelog.mdt == mdt)).first()
    return tuple(row) if row else (0, 0, 0)


def put(path: Path, size: int, osts: tuple[int, ...], rng: random.Random, stripe: int = 65536) -> None:
    """A file with the emulated layout ``osts`` (as libiez records it) and ``size`` random bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        os.setxattr(handle.fileno(), emulated.xattr_name(), emulated.format_attr(Layout(stripe, osts)).encode())
        handle.write(rng.randbytes(size))


def empty_followed(engine, tmp_path: Path):
    """An empty tree ``tmp_path/data`` seeded by a scan and an emulated MDT writing its changelog to
    ``tmp_path/changelog``: ``(data, log, writer)``."""
    from iez.inventory.emulated_mdt import ChangelogWriter
    from iez.inventory.scan import scan

    data = tmp_path / "data"
    data.mkdir()
    scan(engine, [str(data)], workers=1)
    log = tmp_path / "changelog"
    return data, log, ChangelogWriter([str(data)], log)


def stand_in_lfs(tmp: Path, log: Path) -> Path:
    """A directory holding an ``lfs`` that answers ``changelog MDT [START]`` from ``log`` (records from START on),
    ``fid2path MOUNT FID...`` by finding each FID's inode below MOUNT, and logs every argv to tmp/lfs.log."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "lfs"
    script.write_text(f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
with open({str(tmp / 'lfs.log')!r}, "a") as out:
    out.write(json.dumps(args) + "\\n")
if args[0] == "changelog":
    start = int(args[2]) if len(args) > 2 else 0
    for line in open({str(log)!r}):
        if int(line.split(" ", 1)[0]) >= start:
            sys.stdout.write(line)
elif args[0] == "fid2path":
    want = {{}}
    for fid in args[2:]:
        seq, oid, _ = fid.strip("[]").split(":")
        want[((int(seq, 16) - 0x200000400) << 32) | int(oid, 16)] = fid
    for top, dirs, files in os.walk(args[1]):
        for name in dirs + files:
            path = os.path.join(top, name)
            ino = os.lstat(path).st_ino
            if ino in want:
                print(want[ino] + " " + path if len(args) > 3 else path)
""")
    script.chmod(0o755)
    return bindir


def lfs_calls(tmp: Path) -> list[list[str]]:
    path = tmp / "lfs.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


INV_TABLES = ("inv_objects", "inv_files", "inv_dirs", "inv_roots", "inv_changelog")


@pytest.fixture
def inv_db(db: str) -> str:
    """IEZ_DB at the current schema with no rows, inventory tables included."""
    engine = create_engine(database_url(db))
    with engine.begin() as conn:
        for table in INV_TABLES:
            conn.execute(text(f"DELETE FROM {table}"))
    engine.dispose()
    return db


@pytest.fixture
def engine(inv_db: str):
    from iez.config import Settings
    from iez.db import open_db

    eng = open_db(Settings.from_env(db=inv_db, env={}))
    yield eng
    eng.dispose()


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    """An emulated cluster (2 OSS x 2 OSTs of 64 MiB, no agents) under tmp/root, data in tmp/root/data."""
    from iez.emulate.cluster import create, layout_from_counts

    root = tmp_path / "root"
    create(layout_from_counts(root, [str(root / "data")], 2, 2, 64 << 20))
    return root
