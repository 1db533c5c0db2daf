"""The preload library with ``IEZ_MAP``: real programs get the same layouts as from ``IEZ_DB`` without
touching the DB; a corrupt, truncated, foreign or unsafe map never crashes anything and falls back to the
DB; many ranks at once place every file with no DB connection."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import fresh_db, iez_cli
from map_helpers import (MIB, ConnectionCounter, add_app_layouts, attr, build_app, build_lib, clean_env, counts,
                         lib_env)

from iez.maps import CDB_HEADER, MapEntry, cdb_hash, header_value, write_map

pytestmark = pytest.mark.slow

PFL = "version=2 comp=0:1048576:1048576:1:3 comp=1048576:eof:1048576:2:4,5:pool=flash"
POOL = "version=2 comp=0:eof:1048576:2:1,2:pool=flash"
LEARNT_DEFAULT = "version=2 comp=0:eof:2097152:2:-"  # the directory has another default now (none): a skip


@pytest.fixture(scope="module")
def lib():
    return build_lib()


def rows_under(out: Path) -> list[dict]:
    return [
        {"path": str(out / "plain"), "stripe_size": MIB, "osts": [3, 7, 11]},
        {"path": str(out / "pfl"), "stripe_size": MIB, "osts": [3], "layout": PFL, "pool": "flash",
         "default_layout": ""},
        {"path": str(out / "pool"), "stripe_size": MIB, "osts": [1, 2], "layout": POOL, "pool": "flash"},
        {"path": str(out / "skip"), "stripe_size": 2 * MIB, "osts": [4, 5], "default_layout": LEARNT_DEFAULT},
    ]


NAMES = ("plain", "pfl", "pool", "skip", "unknown")
SH_CREATE = 'for f in "$@"; do echo data > "$f" || exit 1; done'


def create_all(out: Path, env: dict) -> subprocess.CompletedProcess:
    out.mkdir(exist_ok=True)
    for f in out.iterdir():
        f.unlink()
    return subprocess.run(["sh", "-c", SH_CREATE, "sh", *(str(out / n) for n in NAMES)], env=env,
                          capture_output=True, text=True, timeout=60)


def export(db: str, app: str, out: Path) -> Path:
    proc = iez_cli("map", "export", "--db", db, "--app", app, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("backend", ["sqlite", "mariadb"])
def test_a_map_places_what_the_db_places_without_the_db(lib, backend, tmp_path):
    db = fresh_db(backend, tmp_path, "map_same")
    out = tmp_path / "out"
    add_app_layouts(db, "app", rows_under(out))
    layouts = export(db, "app", tmp_path / "app.cdb")

    # from the DB
    state_db = tmp_path / "state-db"
    proc = create_all(out, lib_env(state_db, out, IEZ_DB=db))
    assert proc.returncode == 0, proc.stderr
    from_db = {n: attr(out / n) for n in NAMES}
    assert from_db == {"plain": "version=1 stripe_size=1048576 stripe_count=3 osts=3,7,11", "pfl": PFL,
                       "pool": POOL, "skip": None, "unknown": None}
    assert counts(state_db) == {"hits": 3, "misses": 1, "errors": 0, "skips": 1}

    # from the map, with an IEZ_DB that counts every connection made to it
    counter = ConnectionCounter()
    try:
        state_map = tmp_path / "state-map"
        proc = create_all(out, lib_env(state_map, out, IEZ_MAP=str(layouts), IEZ_DB=counter.url))
        assert proc.returncode == 0, proc.stderr
        assert {n: attr(out / n) for n in NAMES} == from_db
        assert all((out / n).read_text() == "data\n" for n in NAMES)
        assert counts(state_map) == counts(state_db)
        time.sleep(0.2)
        assert counter.accepted == 0  # a miss in the map is a miss: the map is the job's truth
    finally:
        counter.close()


def test_the_map_is_inherited_across_fork_and_loaded_again_after_exec(lib, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    names = ["parent.dat", "parent.after", *(f"child.{i}" for i in range(4))]
    layouts = write_map(tmp_path / "m.cdb", "forks",
                        [MapEntry(str(out / n), MIB, 2, f"{i} {i + 1}") for i, n in enumerate(names)])["path"]
    fork_create = build_app("fork_create", tmp_path)
    state = tmp_path / "state"
    proc = subprocess.run([str(fork_create), str(out), "4"], env=lib_env(state, out, IEZ_MAP=layouts,
                                                                          IEZ_DB=str(tmp_path / "none.db")),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for i, n in enumerate(names):
        assert attr(out / n) == f"version=1 stripe_size=1048576 stripe_count=2 osts={i},{i + 1}", n
    assert counts(state) == {"hits": 6, "misses": 0, "errors": 0, "skips": 0}


def corrupt_maps(good: bytes, tmp: Path) -> dict[str, Path]:
    """Maps that must never be applied: each a name and a file."""
    def put(name: str, data: bytes, mode: int = 0o600) -> Path:
        p = tmp / name
        p.write_bytes(data)
        os.chmod(p, mode)
        return p

    rng = random.Random(3)
    # the header intact, so the map loads; every file's slot points past the end of the file, found at the probe
    records_out = bytearray(good)
    header_hash = cdb_hash(b"iez-map")
    for t in range(256):
        pos, slots = (int.from_bytes(good[t * 8 + k:t * 8 + k + 4], "little") for k in (0, 4))
        for s in range(slots):
            slot = good[pos + 8 * s:pos + 8 * s + 8]
            if int.from_bytes(slot[4:], "little") and int.from_bytes(slot[:4], "little") != header_hash:
                records_out[pos + 8 * s + 4:pos + 8 * s + 8] = (len(good) + 100).to_bytes(4, "little")
    other_version = tmp / "v2.cdb"
    from iez.maps import build_cdb
    with other_version.open("wb") as fh:
        build_cdb([(b"iez-map", header_value("x", 0).replace(b"version=1", b"version=2"))], fh)
    os.chmod(other_version, 0o600)
    return {
        "empty": put("empty.cdb", b""),
        "short": put("short.cdb", good[:1000]),
        "truncated": put("truncated.cdb", good[:len(good) // 2]),
        "garbage": put("garbage.cdb", bytes(rng.randrange(256) for _ in range(len(good)))),
        "records-outside": put("outside.cdb", bytes(records_out)),
        "zero-tables": put("zero.cdb", bytes(CDB_HEADER) + good[CDB_HEADER:]),
        "version-2": other_version,
        "group-writable": put("gw.cdb", good, 0o660),
        "a-directory": tmp,
        "missing": tmp / "absent.cdb",
        "not-cdb": put("text.cdb", b"version=1 stripe_size=1048576\n" * 100),
    }


def test_corrupt_truncated_foreign_or_unsafe_maps_never_crash_and_fall_back_to_the_db(lib, tmp_path):
    db = fresh_db("sqlite", tmp_path, "map_corrupt")
    out = tmp_path / "out"
    add_app_layouts(db, "app", rows_under(out))
    good = export(db, "app", tmp_path / "good.cdb").read_bytes()
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    maps = corrupt_maps(good, bad_dir)
    plain = create_all(out, clean_env())
    assert plain.returncode == 0
    for name, path in maps.items():
        state = tmp_path / f"state-{name}"
        proc = create_all(out, lib_env(state, out, IEZ_MAP=str(path), IEZ_DB=db, IEZ_DEBUG="1"))
        assert (proc.returncode, proc.stdout) == (plain.returncode, plain.stdout), (name, proc.stderr)
        assert all((out / n).read_text() == "data\n" for n in NAMES), name
        # the DB placed what the map could not
        assert attr(out / "plain") == "version=1 stripe_size=1048576 stripe_count=3 osts=3,7,11", (name, proc.stderr)
        assert attr(out / "pfl") == PFL, name
        c = counts(state)
        assert c["hits"] == 3 and c["errors"] == 1, (name, c, proc.stderr)  # one error: the unusable map
        assert "lookups go to IEZ_DB" in proc.stderr, (name, proc.stderr)
    assert "is corrupt (a record lies outside the file" in create_all(
        out, lib_env(tmp_path / "s", out, IEZ_MAP=str(maps["records-outside"]), IEZ_DB=db, IEZ_DEBUG="1")).stderr


def test_mutated_maps_are_read_without_a_single_bad_access(tmp_path):
    """Thousands of randomly damaged maps probed by the library's own map code built with ASan and UBSan: each
    is refused or answers, none reads outside the file."""
    probe = build_app("map_probe", tmp_path, "-fsanitize=address,undefined", "-fno-sanitize-recover=all")
    entries = [MapEntry(f"/l/f{i}", MIB, 2, f"{i % 9} {i % 9 + 1}", PFL if i % 3 == 0 else None, "" if i % 2 else None)
               for i in range(300)]
    good = Path(write_map(tmp_path / "good.cdb", "fuzz", entries)["path"]).read_bytes()
    paths = tmp_path / "paths"
    paths.write_text("\n".join(e.path for e in entries) + "\n/l/none\n")
    rng = random.Random(11)
    env = clean_env(ASAN_OPTIONS="detect_leaks=0:abort_on_error=0", UBSAN_OPTIONS="halt_on_error=1")
    outcomes = {0: 0, 1: 0}
    for round_ in range(150):
        data = bytearray(good)
        for _ in range(rng.choice((1, 4, 32))):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if round_ % 5 == 0:
            data = data[:rng.randrange(len(data))]
        m = tmp_path / "m.cdb"
        m.write_bytes(bytes(data))
        os.chmod(m, 0o600)
        proc = subprocess.run([str(probe), "cdb", str(m), str(paths), "600"], env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode in (0, 1), (round_, proc.returncode, proc.stderr[-2000:])
        assert "ERROR: AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr
        outcomes[proc.returncode] += 1
    assert outcomes[0] > 0 and outcomes[1] > 0  # both damaged-but-usable and refused maps were seen


def test_128_ranks_place_every_file_from_the_map_with_no_db_connection(lib, tmp_path):
    n = 128
    out = tmp_path / "out"
    out.mkdir()
    launch = build_app("rank_launch", tmp_path)
    layouts = write_map(tmp_path / "job.cdb", "ranks",
                        [MapEntry(str(out / f"rank.{i}"), MIB, 2, f"{i % 16} {(i + 1) % 16}") for i in range(n)])
    counter = ConnectionCounter()
    try:
        started = time.perf_counter()
        plain = subprocess.run([str(launch), str(n), str(out)], env=clean_env(), capture_output=True, text=True,
                               timeout=120)
        plain_s = time.perf_counter() - started
        assert plain.returncode == 0, plain.stderr
        shutil.rmtree(out)
        out.mkdir()
        state = tmp_path / "state"
        started = time.perf_counter()
        proc = subprocess.run([str(launch), str(n), str(out)],
                              env=lib_env(state, out, IEZ_MAP=layouts["path"], IEZ_DB=counter.url),
                              capture_output=True, text=True, timeout=120)
        placed_s = time.perf_counter() - started
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"ranks {n} ok {n} ")
        placed = sum(attr(out / f"rank.{i}") == f"version=1 stripe_size=1048576 stripe_count=2 "
                     f"osts={i % 16},{(i + 1) % 16}" for i in range(n))
        assert placed == n
        assert counts(state) == {"hits": n, "misses": 0, "errors": 0, "skips": 0}
        time.sleep(0.2)
        assert counter.accepted == 0
        print(f"{n} ranks: plain {plain_s:.3f} s, with IEZ_MAP {placed_s:.3f} s, {placed}/{n} placed, "
              f"0 DB connections")
    finally:
        counter.close()


def test_the_map_leaves_signal_dispositions_alone(lib, tmp_path):
    """A process with a map still dies of SIGPIPE writing to a closed pipe, as without the library."""
    layouts = write_map(tmp_path / "m.cdb", "sig", [MapEntry(str(tmp_path / "a"), MIB, 1, "1")])["path"]
    yes = subprocess.Popen(["yes"], env=lib_env(tmp_path / "state", tmp_path, IEZ_MAP=layouts),
                           stdout=subprocess.PIPE)
    yes.stdout.read(10)
    yes.stdout.close()
    assert yes.wait(timeout=10) == -signal.SIGPIPE
