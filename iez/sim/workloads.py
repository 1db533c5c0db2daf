"""Modelled workloads: the write requests IOR and HACC-IO make, and request replay.

Sizes follow the paper's testbed runs (IV-A to IV-F). HACC-IO totals are the
paper's "about 4, 7.7 and 13.5 GB" for 8, 16 and 32 processes with 10 M
particles, split evenly over the ranks' files.
"""

from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from iez.layout.model import request_policy
from iez.model import Component, WriteRequest

GB = 10**9
GiB = 1 << 30

#: HACC-IO total bytes per process count for 10 M particles (paper IV-B).
HACC_TOTAL_BYTES = {8: 4 * GB, 16: int(7.7 * GB), 32: int(13.5 * GB)}


@dataclass(frozen=True)
class Job:
    """One application run: its requests arrive at the MDS together."""

    app: str
    requests: tuple[WriteRequest, ...]

    @property
    def write_bytes(self) -> int:
        return sum(r.write_bytes for r in self.requests)


def with_policy(job: Job, pool: str | None = None, components: tuple[Component, ...] = ()) -> Job:
    """The job with every file in ``pool`` and/or under the PFL template ``components`` (a directory default)."""
    return Job(job.app, tuple(replace(r, pool=pool, components=components) for r in job.requests))


def ior(ranks: int, total_bytes: int, stripe_count: int, mode: str = "fpp", app: str = "ior",
        directory: str = "/lustre/scratch/ior") -> Job:
    """IOR: ``fpp`` writes one file per rank, ``ssf`` one shared file (rank -1 marks shared)."""
    if ranks < 1 or total_bytes < 0:
        raise ValueError(f"IOR needs ranks >= 1 and total_bytes >= 0, got {ranks} and {total_bytes}")
    if mode == "ssf":
        return Job(app, (WriteRequest(app, f"{directory}/testFile", total_bytes, stripe_count, -1),))
    if mode != "fpp":
        raise ValueError(f"IOR mode {mode!r}: use fpp or ssf")
    per_rank = total_bytes // ranks
    return Job(app, tuple(
        WriteRequest(app, f"{directory}/testFile.{r:08d}", per_rank, stripe_count, r) for r in range(ranks)
    ))


def hacc_io(ranks: int, stripe_count: int, total_bytes: int | None = None, mode: str = "fpp",
            app: str = "hacc-io", directory: str = "/lustre/scratch/hacc-io") -> Job:
    """HACC-IO checkpoint files named as the paper's Table I."""
    if total_bytes is None:
        if ranks not in HACC_TOTAL_BYTES:
            raise ValueError(f"HACC-IO sizes are known for {sorted(HACC_TOTAL_BYTES)} ranks; give total_bytes")
        total_bytes = HACC_TOTAL_BYTES[ranks]
    if mode == "ssf":
        return Job(app, (WriteRequest(app, f"{directory}/SSF1-Part-of-{ranks:08d}.data", total_bytes,
                                      stripe_count, -1),))
    per_rank = total_bytes // ranks
    return Job(app, tuple(
        WriteRequest(app, f"{directory}/FPP1-Part{r:08d}-of-{ranks:08d}.data", per_rank, stripe_count, r)
        for r in range(ranks)
    ))


def interleave(jobs: Sequence[Job], app: str = "concurrent") -> Job:
    """Concurrent applications: their file creations alternate, as two clients' would."""
    requests: list[WriteRequest] = []
    longest = max(len(j.requests) for j in jobs)
    for i in range(longest):
        requests.extend(j.requests[i] for j in jobs if i < len(j.requests))
    return Job(app, tuple(requests))


_FIELDS = ("file", "write_bytes", "stripe_count")


def job_sequence(count: int, seed: int, directory: str = "/lustre/scratch/seq") -> list[Job]:
    """``count`` seeded jobs of mixed shapes (IOR and HACC-IO style FPP, shared files; stripe counts
    1, 2, 4, 8 and -1; 4 to 32 ranks of 64 MiB to 2 GiB each), run one after another."""
    rng = random.Random(seed)
    jobs: list[Job] = []
    for j in range(count):
        app = f"job{j:03d}"
        stripe_count = rng.choice((1, 1, 2, 4, 4, 8, -1))
        ranks = rng.choice((4, 8, 16, 32))
        per_rank = rng.choice((64, 128, 256, 512, 1024, 2048)) << 20
        shape = rng.random()
        where = f"{directory}/{app}"
        if shape < 0.15:  # one shared file
            jobs.append(ior(1, ranks * per_rank, stripe_count if stripe_count != 1 else 4, mode="ssf", app=app,
                            directory=where))
        elif shape < 0.45:
            jobs.append(hacc_io(ranks, stripe_count, total_bytes=ranks * per_rank, app=app, directory=where))
        else:
            jobs.append(ior(ranks, ranks * per_rank, stripe_count, app=app, directory=where))
    return jobs


def load_requests(path: str | Path, app: str | None = None) -> list[Job]:
    """Jobs from a CSV or JSON request list (columns ``app, file, write_bytes, stripe_count, rank, pool,
    components``).

    ``app`` is optional per row (defaults to ``app`` or the file stem); rows of one
    app form one job, jobs in the order they first appear. ``pool`` (optional)
    restricts the file to that OST pool; ``components`` (optional) is its PFL
    template, a JSON list (JSON text in a CSV cell) of ``{"end", "stripe_count",
    "stripe_size", "pool"}``. Bad rows raise :class:`ValueError` naming the file and row.
    """
    path = Path(path)
    text = path.read_text()
    if path.suffix.lower() == ".json":
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        if isinstance(rows, dict):
            rows = rows.get("requests", [])
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a list of requests")
    else:
        rows = list(csv.DictReader(text.splitlines()))
    jobs: dict[str, list[WriteRequest]] = {}
    for n, row in enumerate(rows, start=1):
        where = f"{path}: request {n}"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected an object with {', '.join(_FIELDS)}")
        missing = [f for f in _FIELDS if row.get(f) in (None, "")]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        name = str(row.get("app") or app or path.stem)
        pool = row.get("pool")
        if pool not in (None, "") and not isinstance(pool, str):
            raise ValueError(f"{where}: pool must be a pool name, got {pool!r}")
        try:
            pool, components = request_policy(pool, row.get("components"), where)
            request = WriteRequest(name, str(row["file"]), int(row["write_bytes"]), int(row["stripe_count"]),
                                   int(row["rank"]) if row.get("rank") not in (None, "") else 0,
                                   pool, components,
                                   mirror_count=int(row["mirror_count"]) if row.get("mirror_count") not in (None, "")
                                   else 1)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from None
        jobs.setdefault(name, []).append(request)
    if not jobs:
        raise ValueError(f"{path}: no requests")
    return [Job(name, tuple(reqs)) for name, reqs in jobs.items()]
