"""A tree of every layout kind on an emulated cluster, for the drain's and the planner's tests.

8 OSTs of 64 MiB, two per OSS (4 OSSs, each its own failure domain); pool ``flash`` is OSTs 0, 1, 4, 5.
Files: plain (1 and 2 stripes), PFL with a Data-on-MDT first component and an uninstantiated last one,
PFL whose second component is in pool flash, mirrored (2 mirrors in distinct OSSs, one of them stale in
some files), overstriped (4 stripes on 2 OSTs). Every file carries every attribute cp -a keeps and some
have holes.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

from rebalance_helpers import KiB, MiB, make_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "move"))

from move_helpers import decorate, punch, snapshot  # noqa: E402

from iez.layout import emulated  # noqa: E402

FLASH = [0, 1, 4, 5]
S = 64 * KiB


def cluster(tmp: Path, per_ost_mib: int = 64, mib_s: float = 400.0, flash: bool = True) -> Path:
    osts = [{"index": j, "mib": per_ost_mib, "pools": ["flash"] if j in FLASH and flash else []} for j in range(8)]
    return make_cluster(tmp, osts, per_oss=2, mib_s=mib_s)


def put(path: Path, size: int, text: str, rng: random.Random, hole: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    emulated.parse_attr(text, str(path))  # a layout the tests mean
    with open(path, "wb") as handle:
        os.setxattr(handle.fileno(), emulated.xattr_name(), text.encode())
        handle.write(rng.randbytes(size))
    if hole and size >= 4 * S:
        punch(path, S, 2 * S)
    return path


def kinds(n: int, drained: int = 2) -> list[tuple[str, int, str]]:
    """``(name, size, layout text)`` of ``n`` rounds of every kind, each with objects on OST ``drained``."""
    d = drained
    out = []
    for k in range(n):
        o = (d + 1 + k) % 8 or 3  # another OST (never d's OSS mate when that matters below)
        out += [
            (f"plain1-{k}", 300 * KiB + k * 7 * KiB, f"version=1 stripe_size={S} stripe_count=1 osts={d}"),
            (f"plain2-{k}", 700 * KiB + k * KiB, f"version=1 stripe_size={S} stripe_count=2 osts={d},{6 if o == d else 6}"),
            (f"pfl-dom-{k}", 2 * MiB + 100 * KiB * k,
             f"version=2 comp=0:{MiB}:{MiB}:0:mdt comp={MiB}:{4 * MiB}:{S}:2:{d},7 comp={4 * MiB}:eof:{MiB}:4:-"),
            (f"pfl-pool-{k}", 3 * MiB,
             f"version=2 comp=0:{MiB}:{S}:1:{d} comp={MiB}:eof:{S}:2:0,4:pool=flash"),
            (f"mirror-{k}", MiB + 33 * KiB * k,
             f"version=3 mirror=1:prefer comp=0:eof:{S}:2:{d},3 mirror=2{':stale' if k % 2 else ''} comp=0:eof:{S}:2:6,7"),
            (f"mirror2-{k}", 900 * KiB,
             f"version=3 mirror=1 comp=0:eof:{S}:1:6 mirror=2:prefer comp=0:eof:{S}:1:{d}"),
            (f"over-{k}", 1536 * KiB, f"version=2 comp=0:eof:{S}:4:{d},{d},7,7:overstripe"),
        ]
    return out


def tree(root: Path, n: int = 2, drained: int = 2, seed: int = 24, decorate_files: bool = True,
         plain: bool = True, pooled: bool = True) -> dict[Path, dict]:
    """The files below root/data (``n`` of each kind; ``plain=False``: no plain file), decorated; their
    snapshots (:func:`snapshot`); ``pooled=False``: no file with a component in pool flash)."""
    rng = random.Random(seed)
    snaps = {}
    chosen = [x for x in kinds(n, drained) if (plain or not x[0].startswith("plain"))
              and (pooled or not x[0].startswith("pfl-pool"))]
    for k, (name, size, text) in enumerate(chosen):
        path = put(root / "data" / f"d{k % 3}" / name, size, text, rng, hole=k % 2 == 0)
        if decorate_files:
            decorate(path, k, rng)
        snaps[path] = snapshot(path, acl=True)
    return snaps


def layout_of(path: Path):
    return emulated.read_xattr(str(path))
