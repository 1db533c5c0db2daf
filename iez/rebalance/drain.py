"""Draining OSTs: no new stripes there, then every stripe object moved off, resumably; and undoing it.

**Stopping new stripes.** On Lustre the MDS's ``osp.FSNAME-OSTxxxx-osc-MDT*.max_create_count`` is set
to 0 with ``lctl set_param`` (run where the MDT is mounted), after its value is read with ``lctl get_param
-n`` and kept in the drain's state, so ``undrain`` gives it back. In emulation the same parameter of the
emulated MDS's tree is set (:func:`iez.emulate.cluster.set_param`, what ``iez cluster set --param`` does),
which every reader of the trees (the agents, ``iez mds``, the planners) sees as state ``nocreate``; the
OSS's own switches (degraded, readonly) are left as they were.

**Moving every object.** Each file with an object on a drained OST gets new OSTs for those objects only
(:func:`plan_moves`), the rest of its layout kept (components, extents, stripe sizes, pools, stripe counts;
Data-on-MDT and uninstantiated components untouched): for each object the OST of its component's pool
(any OST that takes stripes for a component without one) that is not busy (the live load the MDS stored,
``osts.load_bytes_s``, under :data:`BUSY_SHARE` of the OST's bandwidth, when a DB has it), would be the least
full after it, stays under the fill cap, takes new stripes (active: never a drained, nocreate, degraded,
readonly or inactive OST) and keeps the file's constraints (distinct OSTs in a component unless
overstriped; each mirror in failure domains no other mirror of the file uses). The moves are written as a
plan (the rebalancer's format) and applied by :func:`iez.rebalance.apply.apply` through its journal, so a
kill -9 at any point and a rerun of the same command lose and duplicate nothing (the rerun plans again from
what is on the OSTs now). Up to :data:`PASSES` passes run while files still move (a file changed during its
move gets another chance). What cannot move is reported per object with the reason (hard links, open for
writing, changed, no room...), and ``objects_left`` counts the objects still on the drained OSTs: 0 when
the drain is done.

**Finding the files.** From the file inventory (:mod:`iez.inventory`) through its ``(ost, bytes)`` index,
no walk, while a changelog consumer keeps it current for the drained roots (``iez inventory follow``); each
file found is read again (layout, identity) before it is planned. Otherwise (never seeded, or seeded but
not followed: a drain must miss no file) the roots are walked. ``inventory`` in the report says which.

**State.** ``drain.json`` in the drain's directory (``ROOT/drain`` of an emulated cluster, else
``$IEZ_STATE_DIR/drain``): per OST the value ``max_create_count`` had, and the drain's progress (pid,
status, files and bytes moved, objects and bytes left), rewritten atomically. A cancelled drain stops after
the move in progress and leaves its OSTs refusing new stripes until ``iez undrain``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from iez.errors import IezError
from iez.rebalance.plan import File, Move
from iez.runtime import emulated_root

STATE_NAME = "drain.json"
PLAN_NAME = "plan.json"
#: An OST whose live load is above this share of its bandwidth is busy with jobs: objects go elsewhere first.
BUSY_SHARE = 0.5
#: Plan-and-apply passes while files still move (one file changed during its move gets another chance).
PASSES = 3
#: Lustre's default precreate limit: what undrain restores when the old value was not known.
DEFAULT_MAX_CREATE_COUNT = 20000


class Cancelled(IezError):
    """The drain was cancelled (``iez drain --cancel`` or SIGTERM) between two moves."""


@dataclass
class Target:
    """What a drain works on: an emulated cluster (``cluster``: its root) or Lustre (the DB's view)."""

    kind: str  # "emulated" or "lustre"
    roots: list[str]
    state_dir: Path
    cluster: Path | None = None
    settings: Any = None  # iez.config.Settings of a Lustre target

    @property
    def state_path(self) -> Path:
        return self.state_dir / STATE_NAME

    @property
    def emulated_root(self) -> Path:
        """The emulated cluster's root (a Lustre target has none)."""
        if self.cluster is None:
            raise ValueError("this drain works on Lustre, not on an emulated cluster")
        return self.cluster


def resolve(cluster: str | None, root: str | None, settings, db_given: bool) -> Target:
    """``--cluster ROOT [--root DIR]``, ``--root ROOT`` of an emulated cluster (it has a ``cluster.json``),
    ``IEZ_EMULATE=ROOT``, or ``--db DB --root DIR`` (Lustre: the DB's live view, the files below DIR)."""
    if cluster is None and root and (Path(root) / "cluster.json").is_file() and not db_given:
        cluster, root = root, None
    if cluster is None and not root and not db_given:
        cluster = emulated_root()
    if cluster is not None:
        from iez.emulate.cluster import ClusterLayout

        path = Path(cluster)
        base = path if path.is_dir() else path.parent
        layout = ClusterLayout.load(base)
        return Target("emulated", [root] if root else list(layout.data), base / "drain", base, settings)
    if not root:  # --status, --cancel, undrain: the state is all they need
        return Target("lustre", [], Path(settings.state_dir) / "drain", None, settings)
    if not Path(root).is_dir():
        raise ValueError(f"--root {root}: no such directory")
    return Target("lustre", [root], Path(settings.state_dir) / "drain", None, settings)


def parse_osts(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            out.append(int(part[3:], 16) if part.upper().startswith("OST") else int(part))
        except ValueError:
            raise ValueError(f"--ost {text!r}: {part!r} is not an OST index (3 or OST0003)") from None
        if out[-1] < 0:
            raise ValueError(f"--ost {text!r}: OST index {out[-1]} is negative")
    if not out:
        raise ValueError("--ost: give at least one OST index")
    return sorted(set(out))


# ---------------------------------------------------------------------------------------------- the state


def load_state(target: Target) -> dict:
    try:
        doc = json.loads(target.state_path.read_text())
    except FileNotFoundError:
        return {"osts": {}}
    except ValueError as err:
        raise ValueError(f"{target.state_path}: not a drain state file ({err}); move it aside") from None
    doc.setdefault("osts", {})
    return doc


def save_state(target: Target, doc: dict) -> None:
    target.state_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.state_path.with_name(f".{STATE_NAME}.{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, target.state_path)


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"drain" in handle.read()
    except OSError:
        return False


# ---------------------------------------------------------------------------------------- creates on/off


def lctl_param(name: str) -> str:
    """``osp.FSNAME-OSTxxxx-osc-MDT*.max_create_count`` for an OST named ``FSNAME-OSTxxxx``."""
    return f"osp.{name}-osc-MDT*.max_create_count"


def lctl_get_argv(name: str, lctl: str = "lctl") -> list[str]:
    return [lctl, "get_param", "-n", lctl_param(name)]


def lctl_set_argv(name: str, value: int, lctl: str = "lctl") -> list[str]:
    return [lctl, "set_param", f"{lctl_param(name)}={value}"]


def _lctl(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise OSError(f"{' '.join(argv)} failed (exit {done.returncode}){': ' + said[-1] if said else ''}")
    return done.stdout


def _lctl_path() -> str:
    lctl = shutil.which("lctl")
    if lctl is None:
        raise OSError("no lctl command on PATH: run iez drain where the MDT is mounted (it sets the MDS's "
                      "osp.*.max_create_count)")
    return lctl


def ost_names(target: Target, osts: list[int]) -> dict[int, str]:
    """``FSNAME-OSTxxxx`` of each OST (the emulated cluster's, or the DB's names)."""
    if target.kind == "emulated":
        from iez.emulate.cluster import ClusterLayout

        layout = ClusterLayout.load(target.emulated_root)
        return {i: layout.ost_name(layout.ost(i).index) for i in osts}
    view = _live_view(target.settings)
    names = {o["index"]: o.get("name") for o in view["osts"]}
    missing = [i for i in osts if not names.get(i)]
    if missing:
        raise ValueError(f"OST {missing[0]} is not in {target.settings.db}'s view (OSTs: "
                         f"{', '.join(map(str, sorted(names)))})")
    return {i: names[i].split("_")[0] for i in osts}


def stop_creates(target: Target, osts: list[int]) -> dict[int, int]:
    """``max_create_count`` of each OST before, then 0: no new stripes there."""
    names = ost_names(target, osts)
    before: dict[int, int] = {}
    if target.kind == "emulated":
        from iez.emulate.cluster import ClusterLayout, set_param

        layout = ClusterLayout.load(target.emulated_root)
        for i in osts:
            try:
                before[i] = int((layout.osp_dir(i) / "max_create_count").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                before[i] = DEFAULT_MAX_CREATE_COUNT
            set_param(target.emulated_root, f"{lctl_param(names[i])}=0")
        return before
    lctl = _lctl_path()
    for i in osts:
        text = _lctl(lctl_get_argv(names[i], lctl)).split()
        try:
            before[i] = int(text[0])
        except (ValueError, IndexError):
            raise OSError(f"lctl get_param -n {lctl_param(names[i])} answered {' '.join(text)[:80]!r}, not a "
                          "number") from None
        _lctl(lctl_set_argv(names[i], 0, lctl))
    return before


def allow_creates(target: Target, values: dict[int, int]) -> None:
    """Each OST's ``max_create_count`` back to ``values[ost]`` (0 stays 0: it refused stripes before)."""
    names = ost_names(target, sorted(values))
    if target.kind == "emulated":
        from iez.emulate.cluster import set_param

        for i, value in values.items():
            set_param(target.emulated_root, f"{lctl_param(names[i])}={value}")
        return
    lctl = _lctl_path()
    for i, value in values.items():
        _lctl(lctl_set_argv(names[i], value, lctl))


# ----------------------------------------------------------------------------------------- what is where


def _live_view(settings) -> dict:
    from iez.db import open_db
    from iez.db.engine import read
    from iez.db.models import utcnow
    from iez.db.stats import live_view

    engine = open_db(settings)
    try:
        return read(engine, lambda conn: live_view(conn, utcnow(), settings.oss_stale_s))
    finally:
        engine.dispose()


def inventory(target: Target):
    from iez.rebalance import inventory as inv

    if target.kind == "emulated":
        return inv.from_cluster(str(target.cluster), target.roots)
    return inv.from_db(target.settings, target.roots)


def _cluster(target: Target) -> str | None:
    """The emulated cluster whose MDT changelog the inventory follows (its pending records applied first)."""
    return str(target.cluster) if target.kind == "emulated" and target.cluster else None


def live_loads(settings) -> dict[int, float]:
    """Each OST's live load (bytes/s) as the MDS stored it; ``{}`` where there is no DB."""
    if settings is None:
        return {}
    try:
        from sqlalchemy.orm import Session

        from iez.db import DatabaseMissing, open_db
        from iez.db.stats import ost_loads

        try:
            engine = open_db(settings)
        except DatabaseMissing:
            return {}
        try:
            with Session(engine) as session:
                return ost_loads(session)
        finally:
            engine.dispose()
    except Exception:  # noqa: BLE001 - a DB that cannot answer leaves the loads unknown, not the drain failed
        return {}


def bandwidths(target: Target) -> dict[int, float]:
    """Each OST's bandwidth, bytes/s (the emulated cluster's description; Lustre's default elsewhere)."""
    from iez.model import DEFAULT_OST_BANDWIDTH

    if target.kind != "emulated":
        return {}
    from iez.emulate.cluster import ClusterLayout

    return {o.index: o.bandwidth_mib_s * (1 << 20) or DEFAULT_OST_BANDWIDTH
            for o in ClusterLayout.load(target.emulated_root).osts}


@dataclass
class Scan:
    """The files with objects on the drained OSTs: those that can move, and every object that cannot (why)."""

    movable: list[File] = field(default_factory=list)
    left: list[dict] = field(default_factory=list)  # {"file", "ost", "objects", "bytes", "reason"}
    source: str = "walk"  # or "store": the file inventory, kept current from the MDT changelog

    @property
    def objects_left(self) -> int:
        return sum(x["objects"] for x in self.left)


def _walked(roots: list[str], out: "Scan"):
    """``(path, size, ino, mtime_ns, nlink, layout)`` of every regular file below ``roots`` (a file whose layout
    cannot be read is left in ``out`` with the reason)."""
    from iez.rebalance.inventory import layouts_below

    def unreadable(path: str, err: Exception) -> None:
        out.left.append({"file": path, "ost": None, "objects": 0, "bytes": 0, "reason": str(err)})

    for path, st, layout in layouts_below(roots, unreadable, []):
        if layout is not None:
            yield path, st.st_size, st.st_ino, st.st_mtime_ns, st.st_nlink, layout


def _as_now(rows, out: "Scan"):
    """The inventory's rows as the files are now (their layout and identity read again, only for these files):
    the rows of files this drain moved a moment ago may not have caught up yet."""
    from iez.layout.read import LayoutReader

    reader = LayoutReader()
    for path, *_ in rows:
        try:
            st = os.lstat(path)
            found = reader.layout(path, st) if stat.S_ISREG(st.st_mode) else None
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as err:
            out.left.append({"file": path, "ost": None, "objects": 0, "bytes": 0, "reason": str(err)})
            continue
        if found is not None:
            yield path, st.st_size, st.st_ino, st.st_mtime_ns, st.st_nlink, found[0]


def scan(roots: list[str], known: set[int], drained: set[int], settings=None, cluster: str | None = None) -> Scan:
    """Every file below ``roots`` with an object on ``drained``: from the file inventory when it holds ``roots``
    (its ``(ost, bytes)`` index finds them without a walk), else from a walk."""
    from iez.inventory.source import stored_on
    from iez.layout.usage import ost_bytes
    from iez.rebalance.inventory import entry, why_fixed

    out = Scan()
    stored = stored_on(roots, drained, settings, cluster)
    if stored is None:
        rows = _walked(roots, out)
    else:
        out.source = "store"
        found, problems = stored
        out.left += [{"file": None, "ost": None, "objects": 0, "bytes": 0, "reason": p} for p in problems]
        rows = _as_now(found, out)
    for path, size, ino, mtime_ns, nlink, layout in rows:
        if layout is None:
            continue
        here = [(o, b) for o, b in ost_bytes(layout, size) if o in drained]
        if not here:
            continue
        file, _ = entry(path, size, ino, mtime_ns, nlink, layout, known)
        if file is None:
            _left(out, path, here, why_fixed(nlink, layout, known) or "its layout cannot be moved")
        else:
            out.movable.append(file)
    return out


def _left(out: Scan, path: str, here: list[tuple[int, int]], reason: str) -> None:
    per: dict[int, list[int]] = {}
    for o, b in here:
        per.setdefault(o, []).append(b)
    for o, sizes in sorted(per.items()):
        out.left.append({"file": path, "ost": o, "objects": len(sizes), "bytes": sum(sizes), "reason": reason})


def plan_moves(inv, files: list[File], drained: set[int], loads: dict[int, float] | None = None,
               bandwidth: dict[int, float] | None = None) -> tuple[list[Move], list[dict]]:
    """New OSTs for the objects of ``files`` on ``drained`` (see the module text): the moves, and the objects
    that have nowhere to go (with the reason)."""
    from iez.model import DEFAULT_OST_BANDWIDTH

    loads, bandwidth = loads or {}, bandwidth or {}
    by_index = {o.index: o for o in inv.osts}
    used = {o.index: float(o.used) for o in inv.osts}
    takes = [o.index for o in inv.osts if o.takes_stripes and o.index not in drained]
    pools = {name: set(members) for name, members in inv.pools.items()}
    dom = inv.domains or {}

    def busy(j: int) -> bool:
        return loads.get(j, 0.0) > BUSY_SHARE * bandwidth.get(j, DEFAULT_OST_BANDWIDTH)

    moves: list[Move] = []
    left: list[dict] = []
    for f in sorted(files, key=lambda f: -f.size):  # the largest first, while there is most room
        where = list(f.osts)
        taken: list[tuple[int, int, int]] = []
        failed = None
        object_pools = f.object_pools()
        for s in sorted((s for s in range(len(where)) if where[s] in drained), key=lambda s: -f.objects[s]):
            b = f.objects[s]
            pool = object_pools[s]
            forbid = f.forbidden(s, where, dom)
            choices = [j for j in takes if (pool is None or j in pools.get(pool, ()))
                       and j not in forbid and (used[j] + b <= inv.fill_cap * by_index[j].capacity or b == 0)]
            if not choices:
                failed = (s, f"no OST {'of pool ' + pool + ' ' if pool else ''}can take it (taking new stripes, "
                             "room under the fill cap, outside the failure domains of the file's other mirrors)")
                break
            j = min(choices, key=lambda j: (busy(j), (used[j] + b) / by_index[j].capacity, j))
            taken.append((where[s], j, b))
            used[where[s]] -= b
            used[j] += b
            where[s] = j
        if failed is not None:
            for a, j, b in taken:  # give the room back
                used[a] += b
                used[j] -= b
            s, reason = failed
            here = [(o, b) for o, b in zip(f.osts, f.objects) if o in drained]
            scan_out = Scan()
            _left(scan_out, f.path, here, reason)
            left += scan_out.left
            continue
        moves.append(Move(f, tuple(where)))
    return moves, left


# --------------------------------------------------------------------------------------------- the drain


@dataclass
class Progress:
    """Progress lines (stderr) and the state file's progress, at most every ``every_s`` seconds."""

    target: Target
    osts: list[int]
    total_files: int = 0
    total_bytes: int = 0
    files: int = 0
    bytes: int = 0
    every_s: float = 0.2
    say: Callable[[str], None] | None = None
    sizes: dict = field(default_factory=dict)
    cancelled: bool = False
    _last: float = 0.0

    def __call__(self, line: str) -> None:
        if line.startswith("moved "):
            path = line[6:].split(" [", 1)[0].split(" (", 1)[0]
            self.files += 1
            self.bytes += self.sizes.get(path, 0)
        if self.say:
            self.say(f"drain OST {','.join(map(str, self.osts))}: {self.files}/{self.total_files} files, "
                     f"{self.bytes / 2**20:.1f}/{self.total_bytes / 2**20:.1f} MiB ({line})")
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self.save()
        doc = load_state(self.target)
        if self.cancelled or doc.get("status") == "cancelled":
            raise Cancelled()

    def save(self, **extra) -> None:
        doc = load_state(self.target)
        doc.update({"files_moved": doc.get("files_before", 0) + self.files,
                    "bytes_moved": doc.get("bytes_before", 0) + self.bytes,
                    "bytes_left": max(0, self.total_bytes - self.bytes), "updated": time.time(), **extra})
        save_state(self.target, doc)


def drain(target: Target, osts: list[int], say: Callable[[str], None] | None = None) -> dict:
    """Drain ``osts`` of ``target`` (see the module text): the report (``files_moved``, ``bytes_moved``,
    ``objects_left``, ``left``...)."""
    from iez.rebalance.apply import apply

    started = time.monotonic()
    if not target.roots:
        raise ValueError("give --root: an emulated cluster's root, or with --db the Lustre directory to drain files "
                         "from")
    inv = inventory(target)
    known = {o.index for o in inv.osts}
    unknown = [i for i in osts if i not in known]
    if unknown:
        raise ValueError(f"--ost {unknown[0]}: no such OST (OSTs: {', '.join(map(str, sorted(known)))})")
    doc = load_state(target)
    if alive(doc.get("pid")) and doc.get("pid") != os.getpid() and doc.get("status") == "draining":
        raise ValueError(f"a drain of OST {','.join(map(str, doc.get('draining', [])))} runs already (pid "
                         f"{doc['pid']}); iez drain --status, or --cancel it")
    fresh = [i for i in osts if str(i) not in doc["osts"]]
    if fresh:
        before = stop_creates(target, fresh)
        for i in fresh:
            doc["osts"][str(i)] = {"max_create_count": before[i], "since": time.time()}
    draining = sorted(set(osts))
    doc.update({"status": "draining", "pid": os.getpid(), "draining": draining, "started": time.time(),
                "files_before": 0, "bytes_before": 0, "files_moved": 0, "bytes_moved": 0})
    save_state(target, doc)
    drained = set(draining)
    progress = Progress(target, draining, say=say)
    previous = signal.signal(signal.SIGTERM, lambda *_: setattr(progress, "cancelled", True))
    moved_files = moved_bytes = 0
    skipped: list[dict] = []
    status = "done"
    try:
        for _ in range(PASSES):
            inv = inventory(target)
            found = scan(target.roots, known, drained, target.settings, _cluster(target))
            moves, _nowhere = plan_moves(inv, found.movable, drained, live_loads(target.settings), bandwidths(target))
            if not moves:
                break
            plan_path = target.state_dir / PLAN_NAME
            journal = Path(f"{plan_path}.journal")
            journal.unlink(missing_ok=True)  # a plan of its own each pass: what is on the OSTs now
            tmp = plan_path.with_name(f".{PLAN_NAME}.tmp")
            tmp.write_text(json.dumps({"drain": draining, "moves": [m.to_json() for m in moves]}, indent=1))
            os.replace(tmp, plan_path)
            progress.total_files = progress.files + len(moves)
            progress.total_bytes = progress.bytes + sum(m.bytes for m in moves)
            progress.sizes.update({m.file.path: m.bytes for m in moves})
            progress.save(bytes_left=sum(m.bytes for m in moves))
            report = apply(str(plan_path), str(journal), progress)
            moved_files += report.moved
            moved_bytes += report.bytes_moved
            skipped = report.skipped
            if report.moved == 0:
                break
    except Cancelled:
        status = "cancelled"
    finally:
        signal.signal(signal.SIGTERM, previous)
    found = scan(target.roots, known, drained, target.settings, _cluster(target))
    inv = inventory(target)
    _, nowhere = plan_moves(inv, found.movable, drained, live_loads(target.settings), bandwidths(target))
    reasons = {s["file"]: s["reason"] for s in skipped}
    left = list(found.left) + nowhere
    placed = {x["file"] for x in nowhere}
    for f in found.movable:
        if f.path not in placed:
            why = reasons.get(f.path, "cancelled before its move" if status == "cancelled" else "not moved yet")
            rest = Scan()
            _left(rest, f.path, [(o, b) for o, b in zip(f.osts, f.objects) if o in drained], why)
            left += rest.left
    objects_left = sum(x["objects"] for x in left)
    if status == "done" and objects_left:
        status = "incomplete"
    doc = load_state(target)
    doc.update({"status": status, "pid": None, "files_moved": moved_files, "bytes_moved": moved_bytes,
                "objects_left": objects_left, "bytes_left": sum(x["bytes"] for x in left), "finished": time.time()})
    save_state(target, doc)
    return {"osts": draining, "status": status, "files_moved": moved_files, "bytes_moved": moved_bytes,
            "objects_left": objects_left, "bytes_left": sum(x["bytes"] for x in left), "left": left,
            "inventory": found.source, "nocreate": sorted(int(k) for k in doc["osts"]), "seconds": round(time.monotonic() - started, 3),
            "state": str(target.state_path)}


def status(target: Target) -> dict:
    """What is draining (or was), its progress, and whether its process runs."""
    doc = load_state(target)
    running = alive(doc.get("pid")) and doc.get("status") == "draining"
    osts = {int(k): v for k, v in doc["osts"].items()}
    return {"draining": doc.get("draining", []) if doc.get("status") else [], "status":
            (doc.get("status") if running or doc.get("status") != "draining" else "interrupted") if doc.get("status")
            else "idle", "running": running, "pid": doc.get("pid") if running else None,
            "nocreate": sorted(osts), "files_moved": doc.get("files_moved", 0),
            "bytes_moved": doc.get("bytes_moved", 0), "objects_left": doc.get("objects_left"),
            "bytes_left": doc.get("bytes_left"), "state": str(target.state_path)}


def cancel(target: Target) -> dict:
    """Stop a running drain after its move in progress; its OSTs keep refusing new stripes until undrain."""
    doc = load_state(target)
    pid = doc.get("pid") if alive(doc.get("pid")) else None
    if doc.get("status") not in ("draining",):
        return {"cancelled": False, "reason": f"no drain is running (status {doc.get('status') or 'idle'})",
                "nocreate": sorted(int(k) for k in doc["osts"])}
    doc["status"] = "cancelled"
    save_state(target, doc)
    if pid:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 30
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    return {"cancelled": True, "pid": pid, "nocreate": sorted(int(k) for k in doc["osts"])}


def undrain(target: Target, osts: list[int]) -> dict:
    """Let ``osts`` take new stripes again (``max_create_count`` as it was before the drain)."""
    doc = load_state(target)
    if alive(doc.get("pid")) and doc.get("status") == "draining" and set(osts) & set(doc.get("draining", [])):
        raise ValueError(f"OST {','.join(map(str, sorted(set(osts) & set(doc['draining']))))} is being drained "
                         f"(pid {doc['pid']}): iez drain --cancel first")
    values = {i: doc["osts"].get(str(i), {}).get("max_create_count", DEFAULT_MAX_CREATE_COUNT) for i in osts}
    names = ost_names(target, osts)  # an unknown OST is refused before anything changes
    allow_creates(target, values)
    for i in osts:
        doc["osts"].pop(str(i), None)
    doc["draining"] = [i for i in doc.get("draining", []) if i not in osts]
    if not doc["osts"]:
        doc["status"] = None
    save_state(target, doc)
    return {"undrained": osts, "names": [names[i] for i in osts], "max_create_count": values,
            "nocreate": sorted(int(k) for k in doc["osts"])}
