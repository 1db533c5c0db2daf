"""Issue 13's "done when", end to end with real programs on the emulated cluster.

One emulated cluster made from a description (pools ``flash`` and ``disk``; one OST each inactive, nocreate,
readonly and degraded, all four in ``flash`` where they would otherwise be candidates), its real agents and a
real ``iez mds`` reading the emulated MDS tree (``--lustre-params``). Four programs, dd, tar, a Python writer
and an MPI job under mpirun, each run twice through ``iez run``: traced (the library records every file's
``dir_layout``) and learnt, allocated by the MDS, then placed. Three directories:

- ``pfl``: default pool ``flash`` with a PFL template (1 MiB on 1 OST, up to 4 MiB on 2, the rest on 4). The
  pool has exactly 4 healthy (active) OSTs, so its files never need the degraded one;
  every file gets a version-2 layout in the pool whose reached components alone hold OSTs.
- ``wide``: a template whose last component wants 5 OSTs of ``flash``: every OST of the pool that takes
  stripes, so the degraded one is used, and the allocation's ``note`` says so.
- ``mine``: re-striped by hand after learning (``iez layout set-default``, as a user's ``lfs setstripe``): its
  files are left to the directory's own default (no iez layout) and counted as skips, not misses.

No stripe lands on the inactive, nocreate or readonly OST, whatever the file. The whole flow runs once on
SQLite and once on MariaDB (the MDS, ``iez run`` and the library's lookups all on that backend).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from conftest import BACKENDS, fresh_db, iez_cli
from iez.config import database_url
from iez.db.engine import make_engine, read
from iez.db.models import STALE, AllocationRow
from iez.db.requests import app_summary
from iez.layout.emulated import canonical_template, parse_attr
from waiting import wait_for  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _load(name: str, path: Path):
    """A helper module of another test directory, under a name of its own (test directories are not packages)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


Mds = _load("iez_e2e_mds_helpers", REPO / "tests" / "mds" / "mds_helpers.py").Mds

# (index, oss, pool, state): every OST that must never get a stripe sits in ``flash``, next to the ones that may
OSTS = [(0, "oss0", "flash", "active"), (1, "oss0", "flash", "active"), (2, "oss0", "flash", "inactive"),
        (3, "oss0", "disk", "active"), (4, "oss1", "flash", "active"), (5, "oss1", "flash", "nocreate"),
        (6, "oss1", "disk", "active"), (7, "oss1", "flash", "readonly"), (8, "oss2", "flash", "active"),
        (9, "oss2", "flash", "degraded"), (10, "oss2", "disk", "active"), (11, "oss2", "disk", "active")]
HEALTHY_FLASH = {0, 1, 4, 8}
DEGRADED = 9
CLOSED = {2, 5, 7}  # inactive, nocreate, readonly
STATES = {"inactive": [2], "nocreate": [5], "readonly": [7], "degraded": [9]}

PFL = {"components": [{"end": MIB, "stripe_count": 1}, {"end": 4 * MIB, "stripe_count": 2},
                      {"end": -1, "stripe_count": 4}], "pool": "flash"}
WIDE = {"components": [{"end": MIB, "stripe_count": 1}, {"end": -1, "stripe_count": 5}], "pool": "flash"}
MINE = {"components": [{"end": MIB, "stripe_count": 1}, {"end": -1, "stripe_count": 2}], "pool": "flash"}
MINE_BY_HAND = {"stripe_count": 2, "pool": "disk"}

PY_SIZES = {"pfl/small.bin": 512 << 10, "pfl/mid.bin": 3 << 20, "pfl/big.bin": 10 << 20,  # 1, 2 and 3 reached
            "wide/all.bin": 12 << 20, "mine/a.bin": 2 << 20, "mine/b.bin": 5 << 20}
WRITER = """
import json, os, sys
data, sizes = sys.argv[1], json.loads(sys.argv[2])
for name, size in sizes.items():
    with open(os.path.join(data, name), "wb") as f:
        f.write(name.encode()[:1] * size)
"""
TAR_SIZES = {"t1.dat": 256 << 10, "t2.dat": 2_500_000, "t3.dat": 7 << 20}  # 1, 2 and 3 components reached
DD_MIB = 6
NP, RANK_BYTES = 3, 3 * MIB  # fpp.R: 3 MiB (2 components); shared.dat: 9 MiB (3)
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}  # as tests/placement_lib do


def cluster_description() -> dict:
    servers: dict[str, list] = {}
    for index, oss, pool, state in OSTS:
        servers.setdefault(oss, []).append({"index": index, "kbytes_total": 1 << 20, "kbytes_avail": 1 << 20,
                                            "pools": [pool], "state": state})
    return {"oss": [{"id": oss, "osts": osts} for oss, osts in servers.items()]}


def extents(template: dict) -> list[tuple[int, int, int]]:
    """(start, end, stripe_count) of each component of a template, as ``iez layout show`` prints them."""
    out, start = [], 0
    for c in template["components"]:
        out.append((start, c["end"], c["stripe_count"]))
        start = c["end"]
    return out


class Flow:
    """The test's environment: the DB, the state directory, the data root, and the commands it runs."""

    def __init__(self, tmp: Path, db: str, data: Path):
        self.tmp, self.db, self.data, self.state = tmp, db, data, tmp / "state"
        self.env = {"IEZ_DB": db, "IEZ_STATE_DIR": str(self.state), "IEZ_INCLUDE": str(data), **MPI_ENV}

    def iez(self, *args: str) -> subprocess.CompletedProcess:
        """``iez ARGS`` in this process (commands that start nothing)."""
        return iez_cli(*args, env=self.env)

    def run(self, app: str, *cmd) -> str:
        """``iez run APP -- CMD`` in a child, as a user would; its stderr (iez run's own lines)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("IEZ_") and k != "LD_PRELOAD"}
        env.update(self.env)
        done = subprocess.run([sys.executable, "-m", "iez.cli", "run", app, "--", *map(str, cmd)], env=env,
                              capture_output=True, text=True, timeout=120, cwd=self.tmp)
        assert done.returncode == 0, f"iez run {app} failed:\n{done.stdout}\n{done.stderr}"
        return done.stderr

    def set_default(self, directory: Path, template: dict) -> str:
        done = self.iez("layout", "set-default", str(directory), "--layout", json.dumps(template))
        assert done.returncode == 0, done.stderr
        return canonical_template(parse_attr(os.getxattr(directory, "user.iez.layout"), str(directory)))

    def show(self, path: Path) -> dict | None:
        done = self.iez("layout", "show", str(path), "--json")
        if done.returncode == 1:
            return None
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def allocation(self, path: Path) -> dict:
        done = self.iez("alloc", "show", "--db", self.db, "--file", str(path), "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def check_placed(flow: Flow, path: Path, template: dict) -> set[int]:
    """The file's layout is the version-2 layout iez allocated: the directory's template in ``flash``, OSTs
    (distinct within a component, all in the pool, none closed) in exactly the components its size reaches.
    Returns every OST holding a stripe of it."""
    size = path.stat().st_size
    raw = os.getxattr(path, "user.iez.layout").decode()
    assert raw.startswith("version=2 "), f"{path.name}: {raw}"
    shown = flow.show(path)
    assert shown is not None and shown["source"] == "emulated", path
    assert shown["pool"] == "flash", (path.name, shown)
    comps = shown["components"]
    assert [(c["start"], c["end"], c["stripe_count"]) for c in comps] == extents(template), (path.name, comps)
    used: set[int] = set()
    for c in comps:
        assert c["pool"] == "flash", (path.name, c)
        if c["start"] < size:
            osts = c["osts"]
            assert len(osts) == len(set(osts)) == c["stripe_count"], (path.name, c)
            assert c["stripe_size"] and c["stripe_size"] % 65536 == 0, (path.name, c)
            used |= set(osts)
        else:  # an extent the file never reaches: Lustre instantiates it if the file grows there
            assert c["osts"] == [] and c["stripe_size"] is None, (path.name, size, c)
    assert used <= HEALTHY_FLASH | {DEGRADED}, (path.name, comps)
    assert not used & CLOSED, (path.name, comps)
    # what the library applied is what the DB holds for the file
    stored = flow.allocation(path)
    fields = ("start", "end", "stripe_size", "stripe_count", "osts", "pool")
    assert stored["pool"] == "flash", (path.name, stored)
    assert [tuple(c[k] for k in fields) for c in stored["components"]] == [tuple(c[k] for k in fields)
                                                                          for c in comps], (path.name, stored)
    return used


@pytest.mark.parametrize("backend", BACKENDS)
def test_lustre_policies_with_real_programs_on_an_emulated_cluster(backend, tmp_path):
    build = subprocess.run(["make", "-s", "-C", str(REPO / "placement_lib")], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    mpi_writer = tmp_path / "mpi_writer"
    built = subprocess.run(["mpicc", "-O2", "-o", str(mpi_writer), str(REPO / "placement_lib/tests/apps/mpi_writer.c")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr

    # 1. the cluster: pools and states from a description; the MDS reads the emulated MDS tree
    desc, root = tmp_path / "cluster.json", tmp_path / "cluster"
    desc.write_text(json.dumps(cluster_description()))
    db = fresh_db(backend, tmp_path, "policies")
    flow = Flow(tmp_path, db, root / "data")
    made = flow.iez("cluster", "emulate", "--cluster", str(desc), "--root", str(root), "--no-agents")
    assert made.returncode == 0, made.stderr
    # a generous staleness limit: a busy machine delaying one agent must not shrink the pool under the test
    mds = Mds(db, tmp_path, "--lustre-params", str(root / "mds"), "--stale-intervals", "30",
              "--curve-secret-key", str(root / "keys" / "mds.key_secret"),  # made by emulate --no-agents
              "--curve-authorized", str(root / "keys" / "authorized"))
    emulate = None
    try:
        mds.start()
        emulate = subprocess.Popen([sys.executable, "-m", "iez.cli", "cluster", "emulate", "--cluster", str(desc),
                                    "--root", str(root), "--mds", mds.endpoint, "--interval", "1"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        status = mds.wait(lambda s: sorted(s["osses"]["fresh"]) == ["oss0", "oss1", "oss2"] and s["osts"] == 12
                          and s["ost_states"] == STATES, timeout=30, what="three agents and the OST states")
        assert status["lustre"]["pools"] == {"flash": [0, 1, 2, 4, 5, 7, 8, 9], "disk": [3, 6, 10, 11]}
        _run_the_flow(flow, mds, mpi_writer)
    finally:
        if emulate is not None:
            emulate.terminate()
            _, err = emulate.communicate(timeout=30)
        mds.stop()
    assert emulate.returncode == 0, err


def _run_the_flow(flow: Flow, mds: Mds, mpi_writer: Path) -> None:
    data = flow.data
    pfl, wide, mine = data / "pfl", data / "wide", data / "mine"
    for d in (pfl, wide, mine):
        d.mkdir(parents=True)
    defaults = {pfl: flow.set_default(pfl, PFL), wide: flow.set_default(wide, WIDE),
                mine: flow.set_default(mine, MINE)}
    archive = flow.tmp / "files.tar"
    rng = random.Random(13)
    with tarfile.open(archive, "w") as tar:
        for name, size in TAR_SIZES.items():
            src = flow.tmp / name
            src.write_bytes(rng.randbytes(size))
            tar.add(src, arcname=name)
    programs = {
        "dd": ["dd", "if=/dev/zero", f"of={pfl / 'dd.out'}", "bs=1M", f"count={DD_MIB}", "status=none"],
        "tar": ["tar", "-xf", archive, "-C", pfl],
        "py": [sys.executable, "-c", WRITER, data, json.dumps(PY_SIZES)],
        "mpi": ["mpirun", "--oversubscribe", "-np", NP, mpi_writer, pfl, RANK_BYTES],
    }
    created = {"dd": 1, "tar": len(TAR_SIZES), "py": len(PY_SIZES), "mpi": NP + 1}

    def clear() -> None:
        for d in (pfl, wide, mine):
            for f in d.iterdir():
                f.unlink()  # new files in the same directories, whose defaults stay

    # 2. traced and learnt: each request carries the pool, the template and its directory's default
    for app, cmd in programs.items():
        log = flow.run(app, *cmd)
        assert f"{app}: trace mode" in log and f"{created[app]} predicted requests stored" in log, log
    engine = make_engine(database_url(flow.db))
    try:
        requests = {r["file"]: r for app in programs
                    for r in read(engine, lambda c, a=app: app_summary(c, a))["requests"]}
    finally:
        engine.dispose()
    assert len(requests) == sum(created.values())
    for path, r in requests.items():
        directory = Path(path).parent
        assert (r["pool"], r["default_layout"]) == ("flash", defaults[directory]), r
        assert [(c["end"], c["stripe_count"]) for c in r["components"]] == [
            (e, n) for _, e, n in extents({pfl: PFL, wide: WIDE, mine: MINE}[directory])], r

    # the running MDS allocates every request on its live view: pools from the MDS tree, states from both
    status = mds.wait(lambda s: s["allocation"]["files"] >= len(requests), timeout=30, what="the allocations")
    assert status["allocation"]["files"] == len(requests) and status["allocation"]["refused"] == 0, status

    # 3. after learning, the user re-stripes one directory by hand
    flow.set_default(mine, MINE_BY_HAND)

    # placed: every file the programs create in pfl and wide gets its allocation, those in mine are skipped
    clear()
    for app, cmd in programs.items():
        log = flow.run(app, *cmd)
        placed = created[app] - (2 if app == "py" else 0)
        assert f"{app}: place mode" in log and f"{app}: {placed} files placed, 0 missed" in log, log
        if app == "py":
            assert "2 left to Lustre (directory default changed)" in log, log
    by_app = _counts(flow.state / "runs")
    assert by_app["py"] == {"hits": 4, "misses": 0, "skips": 2, "errors": 0}, by_app
    for app in ("dd", "tar", "mpi"):
        assert by_app[app] == {"hits": created[app], "misses": 0, "skips": 0, "errors": 0}, (app, by_app)
    info = flow.iez("learn", "py", "--status", "--json")
    assert info.returncode == 0, info.stderr
    info = json.loads(info.stdout)
    assert not info["retrace"] and info["latest_run"]["files_skipped"] == 2  # skips are no reason to re-trace
    assert info["latest_run"]["files_missed"] == 0

    # 2 and 4: the layouts of every file, and the bytes the programs wrote through them
    sizes = {"dd.out": DD_MIB * MIB, **TAR_SIZES, **{f"fpp.{r}": RANK_BYTES for r in range(NP)},
             "shared.dat": NP * RANK_BYTES, **{Path(n).name: s for n, s in PY_SIZES.items() if n.startswith("pfl/")}}
    assert {f.name: f.stat().st_size for f in pfl.iterdir()} == sizes
    used_in_pfl: set[int] = set()
    for f in pfl.iterdir():
        used_in_pfl |= check_placed(flow, f, PFL)
    assert DEGRADED not in used_in_pfl  # enough healthy OSTs in the pool: the degraded one is left alone
    assert used_in_pfl == HEALTHY_FLASH
    for name, size in TAR_SIZES.items():
        assert (pfl / name).read_bytes() == (flow.tmp / name).read_bytes()
    for r in range(NP):
        assert (pfl / f"fpp.{r}").read_bytes() == bytes([ord("A") + r]) * RANK_BYTES
    assert (pfl / "shared.dat").read_bytes() == b"".join(bytes([ord("a") + r]) * RANK_BYTES for r in range(NP))
    assert (pfl / "dd.out").read_bytes() == bytes(DD_MIB * MIB)

    # the file that needs every OST of its pool that takes stripes: the degraded one too, and the note says so
    assert check_placed(flow, wide / "all.bin", WIDE) == HEALTHY_FLASH | {DEGRADED}
    notes = _notes(flow.db)
    assert notes[str(wide / "all.bin")] is not None and f"degraded OST {DEGRADED} used" in notes[str(wide / "all.bin")]
    assert all(note is None for path, note in notes.items() if Path(path).parent != wide), notes

    # 3: the hand-striped directory's files got the plain call: no iez layout at all
    for name in ("a.bin", "b.bin"):
        assert (mine / name).read_bytes() == b"m" * PY_SIZES[f"mine/{name}"]  # written whole all the same
        assert flow.show(mine / name) is None, name

    # usage below the data root: nothing on the closed OSTs or in the other pool, the degraded OST only wide's
    usage = flow.iez("usage", str(data), "--json")
    assert usage.returncode == 0, usage.stderr
    usage = json.loads(usage.stdout)
    assert (usage["placed_files"], usage["unplaced_files"]) == (len(sizes) + 1, 2), usage
    per_ost = {o["index"]: o["bytes"] for o in usage["osts"] if o["bytes"]}
    assert set(per_ost) == HEALTHY_FLASH | {DEGRADED}, per_ost
    assert 0 < per_ost[DEGRADED] < PY_SIZES["wide/all.bin"]

    # 1: the live view iez status prints (stored by the MDS in batches) has every state and pool of the description
    expected = {index: (state, [pool]) for index, _, pool, state in OSTS}
    wait_for(lambda: _live_view(flow) == expected, 20, "the description's states and pools in iez status")


def _counts(runs: Path) -> dict[str, dict[str, int]]:
    """Hits, misses, skips and errors per application, summed over its placed run's counts CSVs."""
    import csv

    totals: dict[str, dict[str, int]] = {}
    for path in runs.glob("*/*/iez-counts.*.csv"):
        with path.open(newline="") as fh:
            for row in csv.DictReader(fh):
                app = totals.setdefault(row["app"], {"hits": 0, "misses": 0, "skips": 0, "errors": 0})
                for key in app:
                    app[key] += int(row[key])
    return totals


def _notes(db: str) -> dict[str, str | None]:
    """Each live allocation's ``note`` (what its policy gave up for the file), from the DB row itself."""
    engine = make_engine(database_url(db))
    try:
        rows = read(engine, lambda c: c.execute(select(AllocationRow.path, AllocationRow.note)
                                                .where(AllocationRow.state != STALE)).all())
    finally:
        engine.dispose()
    return {path: note for path, note in rows}


def _live_view(flow: Flow) -> dict:
    done = flow.iez("status", "--db", flow.db, "--json")
    assert done.returncode == 0, done.stderr
    return {o["index"]: (o["state"], o["pools"]) for o in json.loads(done.stdout)["osts"]}
