"""Another job on the emulated cluster, really running: a process that re-reads its dataset through the
emulated bandwidth (libiez with ``IEZ_EMULATE``), in an I/O class of its own capped at a share of each
server. Its bytes reach the emulated servers' counters, so the MDS learns of it only as it would on
Lustre: from the agents' ``read_bytes``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from iez.demo.scenarios import Competitor
from iez.layout.model import Layout
from iez.move.placement import apply_emulated

MiB = 1 << 20
#: Each byte the competitor reads stands for this many (IEZ_EMULATE_SCALE): a 32 MiB file per OSS
#: stands for 1 GiB, and the process costs the host little.
SCALE = 32
FILE_BYTES = 32 * MiB

READER = r"""
import os, sys
paths = sys.argv[1:]
fds = [os.open(p, os.O_RDONLY) for p in paths]
while True:
    for fd in fds:
        offset = 0
        while True:
            got = os.pread(fd, 1 << 20, offset)
            if not got:
                break
            offset += len(got)
"""


class RunningCompetitor:
    def __init__(self, spec: Competitor, proc: subprocess.Popen, files: list[Path]):
        self.spec, self.proc, self.files = spec, proc, files

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def start(spec: Competitor, lib: Path, cluster_root: Path, data: Path, oss_of: dict[int, str],
          env: dict[str, str] | None = None) -> RunningCompetitor:
    """Write the competitor's dataset (one file per OSS, striped over its OSTs there) and start reading it."""
    home = data / spec.name
    home.mkdir(parents=True, exist_ok=True)
    by_oss: dict[str, list[int]] = {}
    for ost in spec.osts:
        by_oss.setdefault(oss_of[ost], []).append(ost)
    files = []
    for oss, osts in sorted(by_oss.items()):
        path = home / f"dataset-{oss}.dat"
        if not path.exists():
            apply_emulated(str(path), Layout(MiB, tuple(osts)))
            with open(path, "r+b") as f:
                f.write(b"c" * FILE_BYTES)
        files.append(path)
    proc = subprocess.Popen([sys.executable, "-c", READER, *map(str, files)],
                            env={**os.environ, **(env or {}), "LD_PRELOAD": str(lib), "IEZ_MODE": "off",
                                 "IEZ_EMULATE": str(cluster_root), "IEZ_EMULATE_SCALE": str(SCALE),
                                 "IEZ_IO_CLASS": spec.name, "IEZ_IO_SHARE": str(spec.share)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    return RunningCompetitor(spec, proc, files)
