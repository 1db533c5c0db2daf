"""Emulated clusters with files on them, for the rebalancer's tests and benchmark."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

from iez.emulate.cluster import create, layout_from_description
from iez.layout import emulated
from iez.layout.model import Layout

KiB, MiB = 1024, 1 << 20
STRIPE = 64 * KiB


def description(osts: list[dict], per_oss: int, fill_cap: float = 0.95, mib_s: float = 200.0) -> dict:
    """A cluster description (the JSON contract): ``osts`` rows with index, mib, state, pools, base (fill);
    every OST ``mib_s`` fast, every OSS twice that."""
    servers: dict[str, list] = {}
    for o in osts:
        total = o["mib"] * 1024
        servers.setdefault(f"oss{o['index'] // per_oss}", []).append(
            {"index": o["index"], "kbytes_total": total, "kbytes_avail": int(total * (1 - o.get("base", 0.0))),
             "state": o.get("state", "active"), "pools": o.get("pools", []), "bandwidth_mib_s": mib_s})
    return {"fill_cap": fill_cap, "oss": [{"id": k, "bandwidth_mib_s": 2 * mib_s, "osts": v}
                                          for k, v in servers.items()]}


def make_cluster(tmp: Path, osts: list[dict], per_oss: int = 4, mib_s: float = 200.0) -> Path:
    """The emulated cluster under tmp/root (no agents), its data directory tmp/root/data."""
    desc = tmp / "cluster-desc.json"
    desc.write_text(json.dumps(description(osts, per_oss, mib_s=mib_s)))
    root = tmp / "root"
    create(layout_from_description(root, [str(root / "data")], desc))
    return root


def write_file(path: Path, size: int, osts: tuple[int, ...], rng: random.Random, pool: str | None = None,
               stripe: int = STRIPE) -> None:
    """A file of ``size`` random bytes carrying the emulated layout ``osts`` (as libiez records it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        os.setxattr(handle.fileno(), emulated.xattr_name(),
                    emulated.format_attr(Layout(stripe, osts, pool)).encode())
        handle.write(rng.randbytes(size))


def fill(root: Path, fills: dict[int, float], ost_mib: int, seed: int = 0, multi: float = 0.2,
         pools: dict[int, str] | None = None, sizes=(64 * KiB, 1 * MiB)) -> int:
    """Files below root/data until each OST holds about ``fills[j]`` of ``ost_mib`` (single-stripe mostly,
    ``multi`` of them 2-stripe within the same pool); the number of files."""
    rng = random.Random(seed)
    want = {j: int(f * ost_mib * MiB) for j, f in fills.items()}
    have = dict.fromkeys(fills, 0)
    n = 0
    for j in sorted(fills):
        while have[j] < want[j]:
            size = min(rng.randint(*sizes), max(STRIPE, want[j] - have[j]))
            osts = (j,)
            mates = [k for k in fills if k != j and (pools or {}).get(k) == (pools or {}).get(j)
                     and have[k] + size // 2 <= want[k]]
            if mates and rng.random() < multi:
                osts = (j, rng.choice(mates))
            pool = (pools or {}).get(j)
            write_file(root / "data" / f"d{n % 7}" / f"f{n:05d}", size, osts, rng, pool)
            half = [size - size // 2, size // 2] if len(osts) == 2 else [size]
            if len(osts) == 2:  # RAID-0 with 64 KiB stripes: close enough to split for the accounting here
                from iez.model import raid0_bytes
                half = raid0_bytes(size, STRIPE, 2)
            for k, b in zip(osts, half):
                have[k] += b
            n += 1
    return n


def digests(root: Path) -> dict[str, str]:
    """sha256 of every file below root/data."""
    out = {}
    for path in sorted((root / "data").rglob("*")):
        if path.is_file():
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out
