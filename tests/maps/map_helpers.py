"""Helpers of the layout-map tests: an application's allocations in a real DB, the library and its
programs built once, and runs of real programs under it with a clean environment."""

from __future__ import annotations

import csv
import os
import socket
import subprocess
import threading
from pathlib import Path
from typing import Sequence

from iez.config import database_url
from iez.db.engine import make_engine, write_session
from iez.db.models import AllocationRow, Application, WriteRequestRow, osts_text, path_hash

REPO = Path(__file__).resolve().parents[2]
LIB_DIR = REPO / "placement_lib"
LIBIEZ = LIB_DIR / "build" / "libiez.so"
XATTR = "user.iez.layout"
MIB = 1 << 20


def build_lib() -> Path:
    proc = subprocess.run(["make", "-C", str(LIB_DIR)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return LIBIEZ


def build_app(name: str, outdir: Path, *flags: str) -> Path:
    exe = outdir / "-".join([name, *(f.strip("-") for f in flags)])
    if not exe.exists():
        source = LIB_DIR / ("bench" if name == "map_probe" else "tests/apps") / f"{name}.c"
        extra: list[str] = []
        if name == "map_probe":  # the library's own map code, as libiez runs it
            extra = [f"-I{LIB_DIR / 'src'}", "-D_GNU_SOURCE", "-DIEZ_HAVE_SQLITE",
                     *(str(p) for p in sorted((LIB_DIR / "src").glob("*.c")) if p.name not in ("intercept.c", "mpi.c")),
                     "-lsqlite3", "-ldl"]
        proc = subprocess.run(["gcc", *flags, "-O2", "-g", "-Wall", "-pthread", "-o", str(exe), str(source), *extra],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    return exe


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("IEZ_", "ASAN_", "UBSAN_")) and k != "LD_PRELOAD"}
    return {**env, **extra}


def lib_env(state: Path, include: Path, **extra: str) -> dict[str, str]:
    return clean_env(LD_PRELOAD=str(LIBIEZ), IEZ_STATE_DIR=str(state), IEZ_INCLUDE=str(include), **extra)


def add_app_layouts(db: str, app: str, rows: Sequence[dict]) -> None:
    """Store ``rows`` as ``app``'s allocations, each with its write request: ``path``, ``stripe_size``, ``osts``
    and optionally ``layout`` (version-2 text), ``pool``, ``default_layout``, ``state``, ``app`` (another
    application's), or ``pinned`` (no request: a layout pinned by hand)."""
    engine = make_engine(database_url(db))
    try:
        with write_session(engine) as session:
            apps: dict[str, Application] = {}
            for row in rows:
                request_id = None
                if not row.get("pinned"):
                    name = row.get("app", app)
                    if name not in apps:
                        existing = session.query(Application).filter_by(name=name).one_or_none()
                        apps[name] = existing or Application(name=name)
                        session.add(apps[name])
                        session.flush()
                    request = WriteRequestRow(app_id=apps[name].id, path=row["path"], path_hash=path_hash(row["path"]),
                                              write_bytes=row.get("write_bytes", 4 * MIB),
                                              stripe_count=len(row["osts"]), rank=0, source="predicted")
                    session.add(request)
                    session.flush()
                    request_id = request.id
                session.add(AllocationRow(request_id=request_id, path=row["path"], stripe_size=row["stripe_size"],
                                          stripe_count=len(row["osts"]), osts=osts_text(row["osts"]), policy="iez",
                                          state=row.get("state", "planned"), pool=row.get("pool"),
                                          layout=row.get("layout"), default_layout=row.get("default_layout")))
    finally:
        engine.dispose()


def attr(path: Path) -> str | None:
    try:
        return os.getxattr(path, XATTR).decode()
    except OSError:
        return None


def counts(state: Path) -> dict[str, int]:
    """hits, misses, errors and skips summed over the counts files the library left in ``state``/runs."""
    total = {"hits": 0, "misses": 0, "errors": 0, "skips": 0}
    for f in (state / "runs").glob("iez-counts.*.csv"):
        with f.open(newline="") as fh:
            for row in csv.DictReader(fh):
                for k in total:
                    total[k] += int(row.get(k) or 0)
    return total


class ConnectionCounter:
    """A TCP listener that counts the connections made to it (and closes them): an ``IEZ_DB`` that shows
    whether any process tried the DB at all."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/nothing"

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self._stop:
                conn.close()
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()  # wakes accept()
        except OSError:
            pass
        self._thread.join(timeout=5)
        self.sock.close()
