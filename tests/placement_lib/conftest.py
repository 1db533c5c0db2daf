"""Fixtures for the tests that run real programs under libiez (placement_lib/README.md).

- ``libiez`` / ``libiez_san``: ``make -C placement_lib`` (and ``sanitize``) once per session;
- ``apps``: compiles the C programs of ``placement_lib/tests/apps`` (gcc, mpicc, h5cc) once each;
- ``runner`` / ``san_runner``: run a command plainly or under the library with a fresh
  ``IEZ_STATE_DIR``, returning the ``CompletedProcess`` (bytes, plus ``elapsed`` seconds);
- ``shared_db``: one migrated interaction DB per backend for the session; tests pin
  layouts for paths below their own ``tmp_path``, so they never see each other's rows.

Every program is run with an environment cleared of ``IEZ_*``, ``LD_PRELOAD`` and the
sanitizer variables first, so a CI that exports ``IEZ_STATE_DIR`` changes nothing.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import pytest

REPO = Path(__file__).resolve().parents[2]
LIB_DIR = REPO / "placement_lib"
APPS_DIR = LIB_DIR / "tests" / "apps"
LAYOUT_XATTR = "user.iez.layout"
MIB = 1024 * 1024


# ---- the root conftest's helpers ------------------------------------------------------
# conftest.py files outside packages share the module name "conftest": loading this one
# replaces tests/conftest.py in sys.modules, so the helpers other test modules import with
# ``from conftest import ...`` are re-exported here (fixtures excluded: pytest registers
# them from the root conftest already).
def _load_root_conftest():
    spec = importlib.util.spec_from_file_location("iez_tests_root_conftest", REPO / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _is_fixture(obj) -> bool:
    return type(obj).__name__ == "FixtureFunctionDefinition" or hasattr(obj, "_pytestfixturefunction")


_root = _load_root_conftest()
for _name, _value in vars(_root).items():
    if not _name.startswith("_") and _name not in globals() and not _is_fixture(_value):
        globals()[_name] = _value
BACKENDS = _root.BACKENDS
fresh_db = _root.fresh_db
mysql_url = _root.mysql_url


# ---- building ---------------------------------------------------------------------------
def _make(*targets: str) -> None:
    proc = subprocess.run(["make", "-C", str(LIB_DIR), *targets], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"make -C placement_lib {' '.join(targets)} failed:\n{proc.stdout}\n{proc.stderr}")


@pytest.fixture(scope="session")
def libiez() -> Path:
    """placement_lib/build/libiez.so, built once per session."""
    _make()
    so = LIB_DIR / "build" / "libiez.so"
    assert so.is_file(), f"make did not produce {so}"
    return so


@pytest.fixture(scope="session")
def libiez_san() -> Path:
    """placement_lib/build/libiez-san.so (ASan + UBSan), built once per session."""
    _make("sanitize")
    so = LIB_DIR / "build" / "libiez-san.so"
    assert so.is_file(), f"make sanitize did not produce {so}"
    return so


def _tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        pytest.fail(f"{name} is required by the placement_lib tests and is not installed (see .ci/run)")
    return path


class Apps:
    """Compiles placement_lib/tests/apps/<name>.c once per set of extra flags.

    mpi_* build with mpicc, h5_* with h5cc (which links HDF5 statically unless
    given ``-shlib``), the others with gcc.
    """

    def __init__(self, outdir: Path):
        self.outdir = outdir
        self.built: dict[tuple, Path] = {}

    def __call__(self, name: str, *flags: str) -> Path:
        key = (name, *flags)
        if key not in self.built:
            source = APPS_DIR / f"{name}.c"
            assert source.is_file(), f"no app {source}"
            compiler = _tool("mpicc" if name.startswith("mpi_") else "h5cc" if name.startswith("h5_") else "gcc")
            exe = self.outdir / "-".join([name, *(f.strip("-") for f in flags)])
            proc = subprocess.run(
                [compiler, *flags, "-O2", "-g", "-Wall", "-Wextra", "-pthread", "-o", str(exe), str(source)],
                capture_output=True, text=True, timeout=120, cwd=self.outdir,  # h5cc leaves a .o in its cwd
            )
            if proc.returncode != 0:
                pytest.fail(f"{compiler} {source.name} failed:\n{proc.stdout}\n{proc.stderr}")
            self.built[key] = exe
        return self.built[key]


@pytest.fixture(scope="session")
def apps(tmp_path_factory) -> Apps:
    return Apps(tmp_path_factory.mktemp("apps"))


# ---- interaction DBs --------------------------------------------------------------------
class SessionDBs:
    """One migrated DB per backend, made on first use."""

    def __init__(self, tmp_dir: Path):
        self.tmp_dir = tmp_dir
        self.dbs: dict[str, str] = {}

    def __call__(self, backend: str) -> str:
        if backend not in self.dbs:
            self.dbs[backend] = fresh_db(backend, self.tmp_dir, "pl")
        return self.dbs[backend]


@pytest.fixture(scope="session")
def shared_db(tmp_path_factory) -> SessionDBs:
    return SessionDBs(tmp_path_factory.mktemp("dbs"))


def layout_text(stripe_size: int, osts: Sequence[int]) -> str:
    """The emulated layout attribute for a layout (placement_lib/README.md "Formats")."""
    return f"version=1 stripe_size={stripe_size} stripe_count={len(osts)} osts={','.join(str(o) for o in osts)}"


def pin_layouts(db: str, layouts: Mapping[str, tuple[int, Sequence[int]]]) -> dict[str, str]:
    """Pins each ``path: (stripe_size, osts)`` through iez's own API; returns the expected attribute texts."""
    from iez.config import database_url
    from iez.db.allocations import pin
    from iez.db.engine import make_engine

    engine = make_engine(database_url(db))
    try:
        for path, (stripe_size, osts) in layouts.items():
            pin(engine, str(path), stripe_size, list(osts))
    finally:
        engine.dispose()
    return {str(path): layout_text(size, osts) for path, (size, osts) in layouts.items()}


def db_layouts(db: str, paths: Iterable[Path | str]) -> dict[str, str]:
    """The layout attribute each of ``paths`` should carry according to the DB's live allocations
    (``iez.db.allocations.lookup_many``, what ``iez alloc show`` reads); paths without one are left out."""
    from iez.config import database_url
    from iez.db.allocations import lookup_many
    from iez.db.engine import make_engine

    engine = make_engine(database_url(db))
    try:
        with engine.connect() as conn:
            found = lookup_many(conn, [str(p) for p in paths])
    finally:
        engine.dispose()
    return {path: layout_text(row["stripe_size"], row["osts"]) for path, row in found.items()}


def pin_cli(db: str, path: Path | str, stripe_size: int, osts: Sequence[int], cwd: Path | str = REPO) -> str:
    """Pins one layout with ``iez alloc add``, the administrator's way; returns the expected attribute."""
    proc = subprocess.run(
        [sys.executable, "-m", "iez.cli", "alloc", "add", "--db", db, "--file", str(path),
         "--stripe-size", str(stripe_size), "--osts", ",".join(str(o) for o in osts)],
        capture_output=True, text=True, timeout=60, cwd=cwd, env=clean_env(),
    )
    assert proc.returncode == 0, f"iez alloc add failed: {proc.stdout}{proc.stderr}"
    return layout_text(stripe_size, osts)


# ---- files ------------------------------------------------------------------------------
def read_layout(path: Path | str, name: str = LAYOUT_XATTR) -> str | None:
    """The layout attribute of ``path``, or None when it has none."""
    try:
        return os.getxattr(path, name, follow_symlinks=False).decode()
    except OSError as err:
        if err.errno in (errno.ENODATA, errno.ENOTSUP):
            return None
        raise


def tree(root: Path) -> dict[str, tuple]:
    """What a run left below ``root``: per relative path its kind, mode and size and content digest."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", mode)
            else:
                out[rel] = ("file", mode, st.st_size, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def layouts_below(root: Path) -> dict[str, str]:
    """Every regular file below ``root`` that carries the layout attribute, by absolute path."""
    found = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                text = read_layout(path)
                if text is not None:
                    found[str(path)] = text
    return found


def assert_layouts_match_db(db: str, root: Path) -> None:
    """Every regular file below ``root`` carries exactly the layout the DB holds for it, or none."""
    files = [p for p in all_files(root) if not p.is_symlink()]
    assert layouts_below(root) == db_layouts(db, files)


COUNTS_HEADER = ["app", "job", "host", "pid", "rank", "hits", "misses", "errors", "started", "ended", "skips"]


def counts_rows(state_dir: Path) -> list[dict[str, str]]:
    """The counts CSVs (placement_lib/README.md "Counts CSV") of $IEZ_STATE_DIR/runs, one dict per file."""
    import csv

    rows = []
    runs = state_dir / "runs"
    if not runs.is_dir():
        return rows
    for path in sorted(runs.iterdir()):
        assert path.name.startswith("iez-counts.") and path.suffix == ".csv", f"unexpected file {path.name} in runs/"
        with path.open(newline="") as fh:
            dict_reader = csv.DictReader(fh)
            reader = list(dict_reader)
        assert dict_reader.fieldnames == COUNTS_HEADER, f"{path.name}: header {dict_reader.fieldnames}"
        assert len(reader) == 1, f"{path.name} holds {len(reader)} rows"
        rows.append(reader[0])
    return rows


def reset_dir(path: Path, setup: Callable[[Path], None] | None = None) -> Path:
    """Empties (or makes) ``path`` and runs ``setup`` in it."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    if setup:
        setup(path)
    return path


# ---- errno_probe --------------------------------------------------------------------
PROBE_FAILS = ["missing/f", "missing/g", "missing/h", "regular/f", "newdir", "dangling", "exists", "adir", "nothere"]
# "target": created through the dangling link "dangling" (creat_through_dangling), placed as the target's path
PROBE_CREATES = ["new_excl", "new_trunc", "new_rdonly", "new_append", "creat_new", "fopen_wx_new", "fopen_w_new",
                 "fopen_a_new", "openat_new", "target"]
TOUCHED = [f"f{i:02d}" for i in range(20)]


def probe_setup(work: Path) -> None:
    """The files errno_probe expects (see its header)."""
    (work / "exists").write_text("old\n")
    (work / "regular").write_text("a file, not a directory\n")
    (work / "adir").mkdir()
    (work / "dangling").symlink_to("target")


def pin_probe_paths(db: str, work: Path) -> dict[str, str]:
    """Pins every name errno_probe creates or fails to create below ``work``, and ``TOUCHED``."""
    paths = [work / n for n in PROBE_CREATES + PROBE_FAILS + TOUCHED]
    return pin_layouts(db, {p: (MIB, [i % 16, 16 + i % 16]) for i, p in enumerate(paths)})


# ---- running programs -------------------------------------------------------------------
_CLEARED = ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IEZ_") and k not in _CLEARED}
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def run_cmd(cmd: Sequence, env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
            timeout: float = 60, input: bytes | None = None) -> subprocess.CompletedProcess:
    """Runs ``cmd`` with ``clean_env(env)``; the result carries ``elapsed`` (seconds)."""
    start = time.monotonic()
    proc = subprocess.run([str(c) for c in cmd], env=clean_env(env), cwd=cwd, capture_output=True,
                          timeout=timeout, input=input)
    proc.elapsed = time.monotonic() - start
    return proc


@dataclass
class Runner:
    """Runs programs plainly and under one build of libiez, with its own IEZ_STATE_DIR."""

    preload: str
    state_dir: Path
    base_env: dict = field(default_factory=dict)

    def env(self, db: str | None, **extra) -> dict[str, str]:
        env = {"LD_PRELOAD": self.preload, "IEZ_STATE_DIR": str(self.state_dir), **self.base_env}
        if db is not None:
            env["IEZ_DB"] = db
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def iez(self, cmd: Sequence, db: str | None, cwd=None, timeout: float = 60, input=None,
            **extra) -> subprocess.CompletedProcess:
        return run_cmd(cmd, self.env(db, **extra), cwd=cwd, timeout=timeout, input=input)

    @staticmethod
    def plain(cmd: Sequence, cwd=None, timeout: float = 60, input=None, **extra) -> subprocess.CompletedProcess:
        return run_cmd(cmd, extra, cwd=cwd, timeout=timeout, input=input)

    def compare(self, cmd: Sequence, db: str | None, workdir: Path, setup: Callable[[Path], None] | None = None,
                cwd=None, timeout: float = 60, **extra) -> "Compared":
        """Runs ``cmd`` plainly, then under libiez, each time in a fresh ``workdir`` made by ``setup``."""
        reset_dir(workdir, setup)
        plain = self.plain(cmd, cwd=cwd, timeout=timeout)
        plain_tree = tree(workdir)
        reset_dir(workdir, setup)
        with_lib = self.iez(cmd, db, cwd=cwd, timeout=timeout, **extra)
        return Compared(plain, with_lib, plain_tree, tree(workdir))


@dataclass
class Compared:
    plain: subprocess.CompletedProcess
    lib: subprocess.CompletedProcess
    plain_tree: dict
    lib_tree: dict

    def assert_same(self, stdout: bool = True, stderr: bool = True) -> None:
        """Exit code, outputs and the files left behind (modes, sizes, contents) are those of the plain run."""
        assert self.lib.returncode == self.plain.returncode, (
            f"exit {self.lib.returncode} under libiez, {self.plain.returncode} plain; stderr:\n"
            f"{self.lib.stderr.decode(errors='replace')}"
        )
        if stdout:
            assert self.lib.stdout == self.plain.stdout
        if stderr:
            assert self.lib.stderr == self.plain.stderr
        assert self.lib_tree == self.plain_tree


@pytest.fixture
def state_dir(tmp_path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def runner(libiez, state_dir) -> Runner:
    return Runner(str(libiez), state_dir)


SAN_ENV = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0", "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}


def asan_runtime() -> str:
    path = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not path.startswith("/") or not Path(path).exists():
        pytest.fail(f"gcc does not know libasan.so (got {path!r}): install libasan for the sanitizer tests")
    return str(Path(path).resolve())


@pytest.fixture
def san_runner(libiez_san, state_dir) -> Runner:
    """libiez-san.so behind the ASan runtime, which must come first in LD_PRELOAD."""
    return Runner(f"{asan_runtime()} {libiez_san}", state_dir, dict(SAN_ENV))


def assert_no_sanitizer_report(proc: subprocess.CompletedProcess) -> None:
    err = proc.stderr.decode(errors="replace")
    for marker in ("runtime error", "AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer"):
        assert marker not in err, f"sanitizer report under libiez-san.so:\n{err}"


def all_files(root: Path) -> Iterable[Path]:
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            yield Path(dirpath) / name
