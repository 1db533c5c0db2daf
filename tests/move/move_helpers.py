"""An emulated 2 OSS x 4 OST cluster for the mover's tests, and `iez copy` run as a real process."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
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


def iez_copy(args: list[str], root: Path | None, timeout: float = 180, **popen) -> subprocess.CompletedProcess:
    env = {**os.environ, "IEZ_STATE_DIR": str(root or "/tmp") + "-state"}
    env.pop("LD_PRELOAD", None)
    if root is not None:
        env["IEZ_EMULATE"] = str(root)
    return subprocess.run([sys.executable, "-m", "iez.cli", "copy", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)
