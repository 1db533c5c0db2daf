"""The seeding scan: every file and directory below the roots into the inventory, once, in parallel.

Top-level subtrees (split one level further when there are fewer than a few per worker) are walked by a
process pool; each worker ``lstat``s, reads layouts through :class:`iez.layout.read.LayoutReader` and
returns rows, which the parent writes in batched transactions. A scan is a generation: rows it saw get
its number, and when it completes what it no longer saw below that root is deleted, so a rescan (the
consumer's answer to a hole in the changelog) converges on the tree as it is. The movers' temporaries
(:func:`iez.move.temps.is_temporary`) are left out, as the walk leaves them out.

FIDs: in emulation derived from inode numbers (:func:`iez.inventory.changelog.fid_of_inode`, what the
emulated MDT writes); on Lustre from ``lfs path2fid``, asked for many paths at once.
"""

from __future__ import annotations

import os
import shutil
import stat as statmod
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine

from iez.inventory import store
from iez.inventory.changelog import fid_of_inode
from iez.layout.emulated import format_attr, parse_attr
from iez.layout.read import LayoutReader
from iez.layout.usage import ost_bytes
from iez.move.temps import is_temporary

#: Rows a scan writes per transaction.
BATCH = 20000


@dataclass
class ScanReport:
    roots: list[str] = field(default_factory=list)
    files: int = 0
    dirs: int = 0
    bytes: int = 0
    removed: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"roots": self.roots, "files": self.files, "dirs": self.dirs, "bytes": self.bytes,
                "removed": self.removed, "seconds": round(self.seconds, 3), "problems": self.problems}


def file_row(path: str, st: os.stat_result, fid: str, parent: str, name: str, root_id: int, gen: int,
             reader: LayoutReader) -> tuple[dict, list[tuple[int, int]], str | None]:
    """A file's inventory row, its stripe objects (bytes per OST as :func:`iez.layout.usage.ost_bytes` counts
    them, which is what :func:`iez.rebalance.inventory.entry` reports) and a problem, if any. What can move is
    decided when a plan loads the row, by ``entry()`` itself."""
    layout_text, pairs, problem = None, [], None
    try:
        found = _layout(reader, path, st)
    except (OSError, ValueError) as err:
        found, problem = None, str(err)
    if found is not None:
        layout, layout_text = found
        if len(layout.osts) == 1 and not layout.components and not layout.mirrors:
            pairs = [(layout.osts[0], st.st_size)]  # one RAID-0 object holds it all (ost_bytes, without its 1.5 us)
        else:
            pairs = ost_bytes(layout, st.st_size)
    row = {"fid": fid, "parent": parent, "name": name, "root_id": root_id, "size": st.st_size,
           "layout": layout_text, "uid": st.st_uid, "gid": st.st_gid, "mode": st.st_mode, "nlink": st.st_nlink,
           "ino": st.st_ino, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "atime_ns": st.st_atime_ns,
           "stale": 0, "gen": gen}
    return row, pairs, problem


_PARSED: dict[bytes, tuple] = {}


def _layout(reader: LayoutReader, path: str, st: os.stat_result):
    """``(layout, its text)`` or None. In emulation the layout attribute's text is parsed once per distinct
    text (many files share a layout); Lustre and the sidecar log go through the reader."""
    if not reader.on_lustre(path, st):
        try:
            raw = os.getxattr(path, reader.xattr, follow_symlinks=False)
        except OSError:
            raw = None
        if raw is not None:
            hit = _PARSED.get(raw)
            if hit is None:
                layout = parse_attr(raw, path)
                hit = (layout, format_attr(layout))
                if len(_PARSED) < 100_000:
                    _PARSED[raw] = hit
            return hit
    found = reader.layout(path, st)
    if found is None:
        return None
    return found[0], format_attr(found[0])


class Fids:
    """FIDs of paths: from the inode in emulation, from ``lfs path2fid`` (many paths a call) on Lustre."""

    def __init__(self, reader: LayoutReader):
        self.reader = reader

    def of(self, items: list[tuple[str, os.stat_result]]) -> list[str | None]:
        if not items:
            return []
        if not self.reader.on_lustre(*items[0]):
            return [fid_of_inode(st.st_ino) for _, st in items]
        return lustre_fids([p for p, _ in items])


def lustre_fids(paths: list[str], lfs: str | None = None) -> list[str | None]:
    """``lfs path2fid`` of each path (None where it failed); one call per 500 paths."""
    lfs = lfs or shutil.which("lfs")
    if lfs is None:
        raise OSError("the tree is on Lustre but there is no lfs command on PATH (lfs path2fid)")
    out: list[str | None] = []
    for n in range(0, len(paths), 500):
        part = paths[n:n + 500]
        done = subprocess.run([lfs, "path2fid", *part], capture_output=True, text=True)
        found = {}
        for line in done.stdout.splitlines():
            path, _, fid = line.rpartition(" ") if len(part) > 1 else (part[0] + ":", "", line)
            found[path.rstrip(":").rstrip()] = fid.strip().strip("[]")
        out += [found.get(p) for p in part]
    return out


def _walk(task: tuple[str, str, int, int, bool]) -> tuple[list[dict], list[dict], dict, list[str]]:
    """Rows below one directory (``recursive`` False: its files only): dirs, files, objects, problems."""
    top, top_fid, root_id, gen, recursive = task
    reader = LayoutReader()
    fids = Fids(reader)
    dirs, files, objects, problems = [], [], {}, []
    stack = [(top, top_fid)]
    while stack:
        directory, dfid = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except FileNotFoundError:
            continue
        except OSError as err:
            problems.append(str(err))
            continue
        subdirs, regular = [], []
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as err:
                problems.append(str(err))
                continue
            if statmod.S_ISDIR(st.st_mode):
                subdirs.append((e.path, e.name, st))
            elif statmod.S_ISREG(st.st_mode) and not is_temporary(e.name):
                regular.append((e.path, e.name, st))
        for (path, name, st), fid in zip(regular, fids.of([(p, s) for p, _, s in regular])):
            if fid is None:
                problems.append(f"{path}: no FID (lfs path2fid failed)")
                continue
            row, pairs, problem = file_row(path, st, fid, dfid, name, root_id, gen, reader)
            if problem:
                problems.append(problem)
            files.append(row)
            objects[fid] = pairs
        if not recursive:
            continue
        for (path, name, st), fid in zip(subdirs, fids.of([(p, s) for p, _, s in subdirs])):
            if fid is None:
                problems.append(f"{path}: no FID (lfs path2fid failed)")
                continue
            dirs.append({"fid": fid, "parent": dfid, "name": name, "root_id": root_id, "gen": gen})
            stack.append((path, fid))
    return dirs, files, objects, problems


def _tasks(root: str, root_fid: str, root_id: int, gen: int, want: int) -> tuple[list[tuple], list[dict]]:
    """Subtrees to hand out (at least ``want`` where the tree allows, three levels down at most), and the rows
    of the directories above them."""
    reader = LayoutReader()
    fids = Fids(reader)
    tasks, dirs = [(root, root_fid, root_id, gen, True)], []
    for _ in range(3):
        if len(tasks) >= want:
            break
        deeper = []
        for top, top_fid, _, _, recursive in tasks:
            if not recursive:
                deeper.append((top, top_fid, root_id, gen, False))
                continue
            deeper.append((top, top_fid, root_id, gen, False))  # its own files
            try:
                with os.scandir(top) as it:
                    subs = [(e.path, e.name, e.stat(follow_symlinks=False)) for e in it
                            if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            for (path, name, st), fid in zip(subs, fids.of([(p, s) for p, _, s in subs])):
                if fid is None:
                    continue
                dirs.append({"fid": fid, "parent": top_fid, "name": name, "root_id": root_id, "gen": gen})
                deeper.append((path, fid, root_id, gen, True))
        tasks = deeper
    return tasks, dirs


def scan(engine: Engine, roots: list[str], workers: int | None = None) -> ScanReport:
    """Seed (or rescan) the inventory of ``roots``; a root that is not a directory is an error naming it."""
    started = time.monotonic()
    report = ScanReport()
    workers = workers or min(8, os.cpu_count() or 1)
    for given in roots:
        root = os.path.abspath(given)
        if not os.path.isdir(root):
            raise ValueError(f"--root {given}: not a directory")
        t0 = time.monotonic()
        st = os.stat(root)
        fid = Fids(LayoutReader()).of([(root, st)])[0]
        if fid is None:
            raise ValueError(f"--root {given}: no FID (lfs path2fid failed)")
        def start(conn: Connection, root: str = root, fid: str = fid) -> tuple[int, int]:
            root_id, gen = store.ensure_root(conn, root, fid)
            store.put_dirs(conn, [{"fid": fid, "parent": None, "name": root, "root_id": root_id, "gen": gen}])
            return root_id, gen

        # every write below is re-run whole if Galera refuses it (store.write: no allocation lock taken)
        root_id, gen = store.write(engine, start)
        tasks, top_dirs = _tasks(root, fid, root_id, gen, workers * 4)
        pending_dirs: list[dict] = list(top_dirs)
        pending_files: list[dict] = []
        pending_objects: dict[str, list[tuple[int, int]]] = {}

        def flush(force: bool = False) -> None:
            nonlocal pending_dirs, pending_files, pending_objects
            if not force and len(pending_files) + len(pending_dirs) < BATCH:
                return
            def put(conn: Connection) -> None:
                store.put_dirs(conn, pending_dirs)
                store.put_files(conn, pending_files, pending_objects)

            store.write(engine, put)
            pending_dirs, pending_files, pending_objects = [], [], {}

        if workers > 1 and len(tasks) > 1:
            with ProcessPoolExecutor(workers) as pool:
                results = pool.map(_walk, tasks)
                for dirs, files, objects, problems in results:
                    _count(report, dirs, files, problems)
                    pending_dirs += dirs
                    pending_files += files
                    pending_objects.update(objects)
                    flush()
        else:
            for task in tasks:
                dirs, files, objects, problems = _walk(task)
                _count(report, dirs, files, problems)
                pending_dirs += dirs
                pending_files += files
                pending_objects.update(objects)
                flush()
        flush(force=True)
        report.dirs += len(top_dirs) + 1
        seconds = time.monotonic() - t0

        def finish(conn: Connection, r: int = root_id, g: int = gen, s: float = seconds) -> tuple[int, int]:
            return store.finish_root(conn, r, g, s)

        removed, _ = store.write(engine, finish)
        report.removed += removed
        report.roots.append(root)
    report.seconds = time.monotonic() - started
    return report


def _count(report: ScanReport, dirs: list, files: list[dict], problems: list[str]) -> None:
    report.dirs += len(dirs)
    report.files += len(files)
    report.bytes += sum(f["size"] for f in files)
    report.problems += problems
