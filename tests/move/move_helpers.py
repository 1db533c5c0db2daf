"""An emulated 2 OSS x 4 OST cluster for the mover's tests, and `iez copy` run as a real process."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
XATTR = "user.iez.layout"


def emulated_cluster(tmp: Path, ost_mib_s: float = 40.0, oss_mib_s: float = 1000.0, loads=None) -> tuple[Path, Path]:
    """OSTs 0-3 on oss0 and 4-7 on oss1; returns (root, data directory)."""
    loads = loads or {}
    desc = {"oss": [{"id": f"oss{k}", "bandwidth_mib_s": oss_mib_s, "osts": [
        {"index": i, "kbytes_total": 1 << 26, "kbytes_avail": 1 << 26, "bandwidth_mib_s": ost_mib_s,
         "load_mib_s": loads.get(i, 0)} for i in range(4 * k, 4 * k + 4)]} for k in range(2)]}
    (tmp / "cluster.json").write_text(json.dumps(desc))
    root, data = tmp / "root", tmp / "data"
    done = subprocess.run([sys.executable, "-m", "iez.cli", "cluster", "emulate", "--cluster", str(tmp / "cluster.json"),
                           "--root", str(root), "--data", str(data), "--no-agents"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return root, data


def with_layout(path: Path, osts: list[int], size: int, stripe: int = MiB, random: bool = True) -> Path:
    """A source file of ``size`` bytes (random, or a sparse hole) striped over ``osts``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        if random:
            out.write(os.urandom(size))
        else:
            out.truncate(size)
    os.setxattr(path, XATTR, f"version=1 stripe_size={stripe} stripe_count={len(osts)} "
                             f"osts={','.join(map(str, osts))}".encode())
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def iez_copy(args: list[str], root: Path | None, timeout: float = 180, env: dict | None = None,
             **popen) -> subprocess.CompletedProcess:
    env = {**os.environ, "IEZ_STATE_DIR": str(root or "/tmp") + "-state", **(env or {})}
    env.pop("LD_PRELOAD", None)
    if root is not None:
        env["IEZ_EMULATE"] = str(root)
    return subprocess.run([sys.executable, "-m", "iez.cli", "copy", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


class LiveCluster:
    """The emulated cluster of :func:`emulated_cluster` with its agents reporting to a real ``iez mds`` (SQLite):
    the live view the mover reads is the MDS's, learnt from the emulated servers' counters."""

    def __init__(self, tmp: Path, ost_mib_s: float = 40.0, oss_mib_s: float = 1000.0):
        import socket

        from iez.config import database_url
        from iez.db.engine import make_engine
        from iez.db.schema import upgrade

        self.tmp, self.db, self.status_file = tmp, str(tmp / "live.db"), tmp / "mds-status.json"
        engine = make_engine(database_url(self.db))
        upgrade(engine)
        engine.dispose()
        with socket.socket() as s, socket.socket() as m:
            s.bind(("127.0.0.1", 0))
            m.bind(("127.0.0.1", 0))
            endpoint = f"tcp://127.0.0.1:{s.getsockname()[1]}"
            metrics_port = m.getsockname()[1]
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"  # the MDS's Prometheus endpoint
        desc = {"oss": [{"id": f"oss{k}", "bandwidth_mib_s": oss_mib_s, "osts": [
            {"index": i, "kbytes_total": 1 << 26, "kbytes_avail": 1 << 26, "bandwidth_mib_s": ost_mib_s}
            for i in range(4 * k, 4 * k + 4)]} for k in range(2)]}
        (tmp / "cluster.json").write_text(json.dumps(desc))
        self.root, self.data = tmp / "root", tmp / "data"
        env = {**os.environ, "IEZ_STATE_DIR": str(tmp / "mds-state")}
        env.pop("LD_PRELOAD", None)
        self.procs = [subprocess.Popen([sys.executable, "-m", "iez.cli", "mds", "--db", self.db, "--bind", endpoint,
                                        "--interval", "1", "--insecure", "--status-file", str(self.status_file),
                                        "--cpu-max", "100", "--mem-max", "100",
                                        "--metrics-bind", f"127.0.0.1:{metrics_port}"], env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)]
        self.procs.append(subprocess.Popen([sys.executable, "-m", "iez.cli", "cluster", "emulate", "--cluster",
                                            str(tmp / "cluster.json"), "--root", str(self.root), "--data",
                                            str(self.data), "--mds", endpoint, "--interval", "1", "--insecure"],
                                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO))
        self.wait(lambda s: s.get("osts") == 8, "two agents reporting 8 OSTs")

    def status(self) -> dict:
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return {}

    def wait(self, predicate, what: str, timeout: float = 60) -> dict:
        import time

        from waiting import scaled

        deadline = time.monotonic() + scaled(timeout)
        while time.monotonic() < deadline:
            status = self.status()
            if predicate(status):
                return status
            assert all(p.poll() is None for p in self.procs), f"the MDS or the emulation exited waiting for {what}"
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}: {self.status()}")

    def stored_load_mib_s(self, index: int) -> float:
        """OST ``index``'s live load as the MDS stored it for its readers (the mover among them)."""
        import sqlite3

        with sqlite3.connect(self.db) as conn:
            row = conn.execute("SELECT load_bytes_s FROM osts WHERE ost_index = ?", (index,)).fetchone()
        return (row[0] or 0.0) / MiB if row else 0.0

    def wait_for_load(self, index: int, mib_s: float, timeout: float = 60) -> None:
        """Until the MDS has stored at least ``mib_s`` for OST ``index`` (it stores reports in batches)."""
        import time

        deadline = time.monotonic() + timeout
        while self.stored_load_mib_s(index) < mib_s:
            assert time.monotonic() < deadline, f"the MDS never stored {mib_s} MiB/s for OST {index}"
            assert all(p.poll() is None for p in self.procs), "the MDS or the emulation exited"
            time.sleep(0.2)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


# -- what cp -a keeps, and the movers under kill -9 (issue 27, items 4 and 5) -----------------------------------

#: Any mover's temporary, the names used before issue 27 included (``.NAME.iez-copy.PID``, ``.NAME.iez-rebalance.tmp``).
TEMP_NAME = re.compile(r"^\..+\.iez-(copy|rebalance)\.", re.S)
#: Modes with special bits, one per file in turn (setuid, setgid, sticky and their mixes).
SPECIAL_MODES = (0o4755, 0o2750, 0o1777, 0o6711, 0o7700, 0o4640, 0o2775, 0o1644)
CAP_NET_BIND_SERVICE, CAP_NET_RAW = 10, 13


def capability_blob(caps: int, effective: bool = True) -> bytes:
    """``security.capability`` as the kernel stores it (VFS_CAP_REVISION_2): permitted ``caps``, no inheritable."""
    return struct.pack("<IIIII", 0x02000000 | int(effective), caps & 0xFFFFFFFF, 0, caps >> 32, 0)


def punch(path: Path, offset: int, length: int) -> None:
    """A hole of ``length`` bytes at ``offset`` (fallocate PUNCH_HOLE | KEEP_SIZE)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_WRONLY)
    try:
        if libc.fallocate(fd, 3, ctypes.c_long(offset), ctypes.c_long(length)) != 0:
            raise OSError(ctypes.get_errno(), f"fallocate punch {path}")
    finally:
        os.close(fd)


def run_tool(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr.strip()}"


def decorate(path: Path, k: int, rng: random.Random, setcap: bool = False) -> None:
    """Give ``path`` every attribute ``cp -a`` keeps: another owner and group, a POSIX ACL (``setfacl``),
    setuid/setgid/sticky bits (:data:`SPECIAL_MODES`, by ``k``), ``user.`` and ``trusted.`` attributes,
    ``security.capability`` (``setcap`` when ``setcap``, else the blob written directly) and an atime older
    than the mtime (a read without O_NOATIME moves it under relatime), both with nanoseconds. A chown clears
    the setuid/setgid bits and the capability, so it comes first; the times come last."""
    os.chown(path, 1000 + k % 3, 2000 + k % 5)
    run_tool("setfacl", "-m", "user:1234:r--,group:2345:rw-,mask::rwx" if k % 2 else "user:4321:rwx,mask::r-x",
             str(path))
    os.chmod(path, SPECIAL_MODES[k % len(SPECIAL_MODES)])
    os.setxattr(path, "user.test.note", f"file {k} {rng.random()}".encode())
    os.setxattr(path, "user.test.binary", rng.randbytes(1 + k % 40))
    os.setxattr(path, "trusted.test.secret", f"trusted {k}".encode())
    if setcap:
        run_tool("setcap", "cap_net_bind_service,cap_net_raw+ep" if k % 2 else "cap_net_bind_service+ep", str(path))
    else:
        os.setxattr(path, "security.capability",
                    capability_blob(1 << CAP_NET_BIND_SERVICE | (k % 2) << CAP_NET_RAW))
    now = time.time_ns()
    mtime = now - 5 * 86400 * 10**9 + rng.randrange(10**9)
    atime = mtime - 3 * 86400 * 10**9 + rng.randrange(10**9)
    os.utime(path, ns=(atime, mtime))


def data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """``(start, end)`` of each data extent (SEEK_DATA/SEEK_HOLE): where the holes are."""
    out, offset = [], 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError:
            break
        end = os.lseek(fd, start, os.SEEK_HOLE)
        out.append((start, end))
        offset = end
    return out


def getfacl(path: Path) -> str:
    done = subprocess.run(["getfacl", "--omit-header", "--absolute-names", "--numeric", str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def snapshot(path: Path, acl: bool = False) -> dict:
    """What ``cp -a`` keeps (mode, owner, atime, mtime, every extended attribute but the layout's, the data
    extents; ``getfacl``'s output when ``acl``), the size and the sha256 of the contents. Read with O_NOATIME:
    taking it leaves the atime as it was."""
    st = os.lstat(path)
    xattrs = {name: os.getxattr(path, name, follow_symlinks=False).hex()
              for name in sorted(os.listxattr(path, follow_symlinks=False)) if name != XATTR}
    fd = os.open(path, os.O_RDONLY | os.O_NOATIME)
    try:
        digest = hashlib.sha256()
        while chunk := os.read(fd, 4 * MiB):
            digest.update(chunk)
        extents = data_extents(fd, st.st_size)
    finally:
        os.close(fd)
    assert os.lstat(path).st_atime_ns == st.st_atime_ns, f"{path}: taking the snapshot moved the atime"
    out = {"mode": oct(st.st_mode), "owner": [st.st_uid, st.st_gid], "atime_ns": st.st_atime_ns,
           "mtime_ns": st.st_mtime_ns, "size": st.st_size, "xattrs": xattrs, "extents": extents,
           "sha256": digest.hexdigest()}
    if acl:
        out["getfacl"] = getfacl(path)
    return out


def differences(before: dict, after: dict) -> list[str]:
    """The attributes that changed (contents and size are corruption, not counted here)."""
    out = [k for k in ("mode", "owner", "atime_ns", "mtime_ns", "getfacl") if before.get(k) != after.get(k)]
    for name in sorted(set(before["xattrs"]) | set(after["xattrs"])):
        if before["xattrs"].get(name) != after["xattrs"].get(name):
            out.append(f"xattr {name}")
    if before["extents"] != after["extents"]:
        out.append("sparse regions")
    return out


def temporaries(where: Path) -> list[Path]:
    """Every mover's temporary below ``where``."""
    return sorted(p for p in where.rglob(".*") if TEMP_NAME.match(p.name))


def compare(pairs: list[tuple[dict, Path]]) -> dict:
    """files tried, lost (gone), corrupted (sha256 or size), attributes changed (files; each attribute's count)
    over ``(snapshot before, path now)`` pairs."""
    lost = corrupted = changed = 0
    by_attribute: dict[str, int] = {}
    examples: list[str] = []
    for before, path in pairs:
        if not path.exists():
            lost += 1
            continue
        after = snapshot(path, acl="getfacl" in before)
        if (after["sha256"], after["size"]) != (before["sha256"], before["size"]):
            corrupted += 1
        diff = differences(before, after)
        if diff:
            changed += 1
            for d in diff:
                by_attribute[d] = by_attribute.get(d, 0) + 1
            if len(examples) < 5:
                examples.append(f"{path.name}: {', '.join(diff)}")
    return {"files_tried": len(pairs), "lost": lost, "corrupted": corrupted, "attributes_changed": changed,
            "changed_by_attribute": by_attribute, "examples": examples}


def mover_env(tree: Path, emulate: Path | None, state: Path) -> dict:
    """The environment a mover runs in: the iez of ``tree`` (PYTHONPATH), emulating ``emulate`` when given."""
    env = {**os.environ, "PYTHONPATH": str(tree), "IEZ_STATE_DIR": str(state)}
    for k in ("LD_PRELOAD", "IEZ_COPY_REEXEC", "IEZ_MOVER_PRELOADED"):
        env.pop(k, None)
    if emulate is not None:
        env["IEZ_EMULATE"] = str(emulate)
    return env


def kill_runs(argv: list[str], env: dict, watch: Path, kills: int, rng: random.Random, max_delay: float,
              cwd: Path) -> dict:
    """Run ``argv`` ``kills`` times, each killed with SIGKILL ``uniform(0, max_delay)`` seconds after a new
    temporary first appears below ``watch`` (a run that ends before is counted, not killed)."""
    killed = finished = 0
    for _ in range(kills):
        before = set(temporaries(watch))
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and not set(temporaries(watch)) - before:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, max_delay))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        else:
            finished += 1
        proc.wait()
    return {"killed": killed, "finished_before_the_kill": finished}


def copy_under_kills(work: Path, tree: Path = REPO, kills: int = 20, seed: int = 1, files: int = 24,
                     ost_mib_s: float = 4.0, max_delay: float = 1.0) -> dict:
    """``iez copy SRC OUT --json`` of ``files`` decorated, sparse, striped files in an emulated cluster
    (slow OSTs), killed ``kills`` times, then run to the end: the figures of :func:`compare`, the kills, the
    temporaries before the complete run, what it said it removed and what is left."""
    rng = random.Random(seed)
    root, data = emulated_cluster(work, ost_mib_s=ost_mib_s)
    src, out = data / "src", data / "out"
    src.mkdir(parents=True)
    out.mkdir()
    snaps: dict[str, dict] = {}
    for k in range(files):
        path = src / f"f{k:03d}"
        size = rng.randrange(MiB // 2, 3 * MiB)
        with open(path, "wb") as handle:
            handle.truncate(size)
            os.setxattr(handle.fileno(), XATTR,
                        f"version=1 stripe_size={MiB} stripe_count=2 osts={k % 8},{(k + 3) % 8}".encode())
            for offset in range(0, size, 256 * 1024):
                if rng.random() < 0.6:  # the rest stays holes
                    handle.seek(offset)
                    handle.write(rng.randbytes(min(256 * 1024, size - offset)))
        decorate(path, k, rng)
        snaps[path.name] = snapshot(path)
    env = mover_env(tree, root, work / "state")
    argv = [sys.executable, "-m", "iez.cli", "copy", str(src), str(out), "--json"]
    runs = kill_runs(argv, env, out, kills, rng, max_delay, work)
    left_before = len(temporaries(out))
    done = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    result = compare([(snaps[name], out / "src" / name) for name in sorted(snaps)])
    sources = compare([(snaps[name], src / name) for name in sorted(snaps)])
    result.update(runs, exit=done.returncode, stderr=done.stderr[-2000:],
                  temporaries_before_the_complete_run=left_before,
                  temporaries_removed_said=report.get("temporaries_removed"),
                  temporaries_left=len(temporaries(data)),
                  sources_changed=sources["attributes_changed"] + sources["corrupted"] + sources["lost"])
    return result


def rebalance_under_kills(work: Path, tree: Path = REPO, kills: int = 20, seed: int = 1, mib_s: float = 2.0,
                          max_delay: float = 2.0, ost_mib: int = 16) -> dict:
    """``iez rebalance apply PLAN --journal J`` over an emulated cluster filled unevenly (tests/rebalance's
    helpers; 8 OSTs of ``ost_mib`` MiB), every file decorated and every other large one given a hole, killed
    ``kills`` times (each run
    resumes from the journal), then run to the end: as :func:`copy_under_kills`, over the planned files."""
    sys.path.insert(0, str(REPO / "tests" / "rebalance"))
    from rebalance_helpers import fill, make_cluster

    rng = random.Random(seed)
    root = make_cluster(work, [{"index": j, "mib": ost_mib} for j in range(8)], mib_s=mib_s)
    fill(root, {j: 0.2 + 0.1 * j for j in range(8)}, ost_mib, seed=seed)
    snaps: dict[Path, dict] = {}
    for k, path in enumerate(sorted(p for p in (root / "data").rglob("*") if p.is_file())):
        if path.stat().st_size >= 4 * 64 * 1024 and k % 2:
            punch(path, 2 * 64 * 1024, 64 * 1024)
        decorate(path, k, rng)
        snaps[path] = snapshot(path)
    env = mover_env(tree, None, work / "state")
    done = subprocess.run([sys.executable, "-m", "iez.cli", "rebalance", "plan", "--cluster", str(root), "--json",
                           "--improve-s", "0.5"], env=env, cwd=work, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip(), done.stderr
    plan = json.loads(done.stdout)
    plan_path = work / "plan.json"
    plan_path.write_text(done.stdout)
    env = mover_env(tree, root, work / "state")
    argv = [sys.executable, "-m", "iez.cli", "rebalance", "apply", str(plan_path), "--journal",
            str(work / "journal"), "--json"]
    runs = kill_runs(argv, env, root / "data", kills, rng, max_delay, work)
    left_before = len(temporaries(root / "data"))
    done = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True, timeout=900)
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    moved = {m["file"] for m in plan["moves"]}
    result = compare([(snaps[Path(f)], Path(f)) for f in sorted(moved)])
    others = compare([(s, p) for p, s in snaps.items() if str(p) not in moved])
    result.update(runs, exit=done.returncode, stderr=done.stderr[-2000:],
                  temporaries_before_the_complete_run=left_before,
                  temporaries_removed_said=report.get("temporaries_removed"),
                  temporaries_left=len(temporaries(root / "data")), files_moved=report.get("files_moved"),
                  already_done=report.get("already_done"), skipped=len(report.get("skipped", [])),
                  not_planned_changed=others["attributes_changed"] + others["lost"] + others["corrupted"])
    return result
