"""Synthetic traces of the paper's workloads (IOR and HACC-IO, FPP and SSF) in the tracing mode's CSV format.

Each run is a directory ``run-0001``, ``run-0002``, ... holding one
``iez-trace.<host>.<pid>.<ns>.csv`` per rank, as the placement library writes
them (placement_lib/README.md, "Trace CSV"), with the ``job`` column set to
the run's name. ``iez trace parse`` reads each directory back into the write
requests of that run; ``iez predict`` reads the parent directory as a series
of runs.

Sizes (paper IV and Table I):

- **IOR FPP**: every rank writes ``block`` bytes to its own
  ``testFile.%08d`` (IOR's ``-F`` suffix). The paper's runs write 16 GB with
  8 processes, 32 GB with 16 and 64 GB with 64, i.e. 2 GiB per rank capped at
  64 GiB per run: ``block = min(2 GiB, 64 GiB / N)`` rounded down to whole
  MiB (``--block-size`` overrides it).
- **IOR SSF**: the same blocks in one shared ``testFile``: ``block × N``
  bytes (32 GiB for 16 processes, 64 GiB for 32).
- **HACC-IO** (hacc-io's GLEAN restart writer): a part file is a
  ``FILE_HEADER_SIZE_MAX`` = 24 MiB (25,165,824-byte) header followed by 38
  bytes per particle (``xx yy zz vx vy vz phi`` float32, ``pid`` int64,
  ``mask`` uint16), and the particle count is given per rank. Table I's
  803,405,824-byte FPP file is exactly 25,165,824 + 38 × 20,480,000, so the
  paper's "10 M particles" run wrote 20,480,000 particles (2 × 10,240,000)
  per rank; that is the default (``--particles`` overrides it).
  FPP: rank r writes ``FPP1-Part%08d-of-%08d.data`` (r, N) of
  ``header + 38 × particles`` bytes; SSF: one ``SSF1-Part00000000-of-00000001.data``
  of ``header + 38 × particles × N`` bytes.

Noise (``noise`` > 0) multiplies each file's size by ``1 + N(0, noise)``
(clipped at 1 %), drawn from one generator seeded by ``seed``, so the same
arguments always give the same bytes. With ``per_run_names`` each run writes
below its own ``run%04d/`` directory (a run counter in every name).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from iez.lustre_limits import MAX_STRIPE_COUNT
from iez.trace.csvformat import write_trace

MIB = 1 << 20
GIB = 1 << 30
WORKLOADS = ("ior-fpp", "ior-ssf", "hacc-fpp", "hacc-ssf")
APPS = {"ior": "ior", "hacc": "hacc-io"}
DEFAULT_DIRS = {"ior": "/lustre/scratch/ior", "hacc": "/lustre/scratch/hacc-io"}

IOR_BLOCK_MAX = 2 * GIB
IOR_RUN_MAX = 64 * GIB
HACC_HEADER = 25_165_824  # hacc-io FILE_HEADER_SIZE_MAX (24 MiB)
HACC_RECORD = 7 * 4 + 8 + 2  # 38 bytes per particle
HACC_PARTICLES = 20_480_000  # per rank: Table I's 803,405,824-byte part file
STRIPE_SIZE = MIB  # Lustre's default stripe size, what the library reads from a real file
BASE_TIME = 1_700_000_000.0
RUN_INTERVAL_S = 3600.0


@dataclass(frozen=True)
class SynthSpec:
    workload: str
    ranks: int
    runs: int = 5
    stripe_count: int = 8
    noise: float = 0.0
    seed: int = 0
    directory: str | None = None
    per_run_names: bool = False
    hosts: int = 2
    block_size: int | None = None  # IOR bytes per rank
    particles: int | None = None  # HACC-IO particles per rank
    app: str | None = None

    def __post_init__(self):
        if self.workload not in WORKLOADS:
            raise ValueError(f"unknown workload {self.workload!r}: choose one of {', '.join(WORKLOADS)}")
        if self.ranks < 1:
            raise ValueError(f"--ranks must be at least 1, got {self.ranks}")
        if self.runs < 1:
            raise ValueError(f"--runs must be at least 1, got {self.runs}")
        if not 1 <= self.stripe_count <= MAX_STRIPE_COUNT:
            raise ValueError(f"--stripe-count must be 1 to {MAX_STRIPE_COUNT}, got {self.stripe_count}")
        if not (math.isfinite(self.noise) and 0 <= self.noise < 1):
            raise ValueError(f"--noise must be a fraction in [0, 1), got {self.noise}")
        if self.hosts < 1:
            raise ValueError(f"hosts must be at least 1, got {self.hosts}")
        for name in ("block_size", "particles"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value}")

    @property
    def family(self) -> str:
        return self.workload.split("-")[0]

    @property
    def mode(self) -> str:
        return self.workload.split("-")[1]

    @property
    def app_name(self) -> str:
        return self.app or APPS[self.family]


def ior_block(ranks: int) -> int:
    """IOR bytes per rank for N ranks: 2 GiB, capped at 64 GiB per run, whole MiB."""
    return min(IOR_BLOCK_MAX, IOR_RUN_MAX // ranks) // MIB * MIB


def hacc_file_size(particles: int) -> int:
    """Bytes of one hacc-io part file holding ``particles`` particles."""
    return HACC_HEADER + HACC_RECORD * particles


def base_requests(spec: SynthSpec) -> list[tuple[str, int, int]]:
    """``(name, bytes, rank)`` of one noise-free run (rank -1: the shared file); names without a directory."""
    n = spec.ranks
    if spec.family == "ior":
        block = spec.block_size or ior_block(n)
        if spec.mode == "fpp":
            return [(f"testFile.{r:08d}", block, r) for r in range(n)]
        return [("testFile", block * n, -1)]
    particles = spec.particles or HACC_PARTICLES
    if spec.mode == "fpp":
        size = hacc_file_size(particles)
        return [(f"FPP1-Part{r:08d}-of-{n:08d}.data", size, r) for r in range(n)]
    return [("SSF1-Part00000000-of-00000001.data", hacc_file_size(particles * n), -1)]


def run_name(index: int) -> str:
    """``run-0001`` for the first run (``index`` 0)."""
    return f"run-{index + 1:04d}"


def run_requests(spec: SynthSpec) -> list[list[tuple[str, int, int]]]:
    """``(path, bytes, rank)`` per run, noise applied, in run order."""
    rng = random.Random(spec.seed)
    directory = (spec.directory or DEFAULT_DIRS[spec.family]).rstrip("/") or ""
    runs = []
    for index in range(spec.runs):
        prefix = f"{directory}/run{index + 1:04d}" if spec.per_run_names else directory
        requests = []
        for name, size, rank in base_requests(spec):
            if spec.noise > 0:
                size = max(1, round(size * max(0.01, 1.0 + rng.gauss(0.0, spec.noise))))
            requests.append((f"{prefix}/{name}", size, rank))
        runs.append(requests)
    return runs


def _host(spec: SynthSpec, rank: int) -> str:
    return f"client{1 + rank * min(spec.hosts, spec.ranks) // spec.ranks}"


def trace_rows(spec: SynthSpec, index: int, requests: list[tuple[str, int, int]]) -> dict[int, list[dict]]:
    """The rows each rank's process would write for one run, by rank."""
    n, job = spec.ranks, run_name(index)
    start = BASE_TIME + index * RUN_INTERVAL_S
    rows: dict[int, list[dict]] = {r: [] for r in range(n)}

    def row(rank: int, path: str, written: int, size: int) -> dict:
        return dict(path=path, bytes_written=written, file_size=size, stripe_count=spec.stripe_count,
                    stripe_size=STRIPE_SIZE, rank=rank, comm_size=n, open_time=f"{start + rank * 1e-3:.6f}",
                    pid=10_000 + index * n + rank, host=_host(spec, rank), app=spec.app_name, job=job)

    for path, size, rank in requests:
        if rank >= 0:
            rows[rank].append(row(rank, path, size, size))
        else:  # a shared file: every rank writes its part, and sees the whole file at close
            share, rest = divmod(size, n)
            for r in range(n):
                rows[r].append(row(r, path, share + (rest if r == n - 1 else 0), size))
    return rows


def write_runs(spec: SynthSpec, out: Path | str) -> list[Path]:
    """Write every run below ``out``; returns the run directories."""
    out = Path(out)
    written = []
    for index, requests in enumerate(run_requests(spec)):
        run_dir = out / run_name(index)
        run_dir.mkdir(parents=True, exist_ok=True)
        for rank, rows in trace_rows(spec, index, requests).items():
            if not rows:
                continue
            first = rows[0]
            ns = int(round(float(first["open_time"]) * 1e9))
            write_trace(run_dir / f"iez-trace.{first['host']}.{first['pid']}.{ns}.csv", rows)
        written.append(run_dir)
    return written
