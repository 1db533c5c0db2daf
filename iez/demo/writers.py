"""The demo's application: HACC-IO-like file-per-process output, N ranks, one file each.

The files have their real logical sizes (10 M particles over the ranks:
803,405,824 bytes per file for 8 ranks, as in the paper) but are sparse: each
rank writes a 64 KiB header and the last byte, so a run costs megabytes of
disk, not gigabytes, while every layout, trace and usage figure sees the full
size. With ``mpicc``/``mpirun`` the writer is a real MPI program using
``MPI_File_open``/``MPI_File_write_at``; otherwise it is one Python process
per rank (rank from ``IEZ_DEMO_RANK``, as a scheduler would set it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

PARTICLES = 10_000_000
BYTES_8_RANKS = 803_405_824  # the paper's HACC-IO FPP file for 8 ranks
HEADER = 64 * 1024

MPI_SOURCE = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) MPI_Abort(MPI_COMM_WORLD, 2);
    long long bytes = atoll(argv[2]);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-Part%08d-of-%08d.data", argv[1], argv[3], rank, size);
    static char header[65536];
    memset(header, 'h', sizeof header);
    MPI_File fh;
    MPI_Status st;
    if (MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_File_write_at(fh, 0, header, (int)sizeof header, MPI_BYTE, &st);
    MPI_File_write_at(fh, (MPI_Offset)(bytes - 1), "e", 1, MPI_BYTE, &st);   /* sparse: full logical size */
    MPI_File_close(&fh);
    MPI_Finalize();
    return 0;
}
"""

PYTHON_RANK = r"""
import os, sys
rank, size, out, nbytes = int(os.environ["IEZ_DEMO_RANK"]), int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
path = os.path.join(out, f"{sys.argv[4]}-Part{rank:08d}-of-{size:08d}.data")
fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
os.pwrite(fd, b"h" * 65536, 0)
os.pwrite(fd, b"e", nbytes - 1)   # sparse: full logical size
os.close(fd)
"""


MEASURE_RANK = r"""
import json, os, sys, time
# rewrites the first NBYTES of one (placed) file in 1 MiB writes, starting at a common time; under
# IEZ_EMULATE with IEZ_EMULATE_SCALE=K each byte stands for K, so the emulated cluster serves the whole
# logical file through its layout; prints when this rank's I/O began and ended (wall clock)
path, nbytes, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
block = b"d" * (1 << 20)
while time.time() < start:
    time.sleep(0.002)
t0 = time.time()
fd = os.open(path, os.O_WRONLY)
done = 0
while done < nbytes:
    done += os.write(fd, block[:min(len(block), nbytes - done)])
os.close(fd)
print(json.dumps({"start": t0, "end": time.time()}))
"""


def file_bytes(ranks: int) -> int:
    """Bytes per file for 10 M particles over ``ranks`` (the paper's 8-rank size scaled)."""
    return BYTES_8_RANKS * 8 // ranks


def measure(files: list[tuple[Path, int]], env: dict[str, str], scale: int, timeout: float = 300) -> float:
    """The wall-clock I/O time of processes that each rewrite one of ``files`` (path, logical bytes) through
    the emulated bandwidth, all starting together (after interpreter start): from the first open to the
    last close."""
    start = time.time() + 1.0 + 0.1 * len(files)
    procs = [subprocess.Popen([sys.executable, "-c", MEASURE_RANK, str(path), str(nbytes // scale), str(start)],
                              env={**os.environ, **env, "IEZ_EMULATE_SCALE": str(scale)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for path, nbytes in files]
    spans, failed = [], []
    for (path, _), proc in zip(files, procs):
        stdout, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            failed.append(f"{path.name}: {err.strip()[-200:]}")
        else:
            spans.append(json.loads(stdout))
    if failed:
        raise RuntimeError("the measured rewrite failed: " + "; ".join(failed))
    return max(s["end"] for s in spans) - min(s["start"] for s in spans)


class Writer:
    """One job's writer: ``ranks`` processes, each writing ``PREFIX-PartRRRRRRRR-of-NNNNNNNN.data`` of
    ``nbytes`` (default: HACC-IO's 10 M particles over the ranks)."""

    def __init__(self, work: Path, ranks: int, prefer_mpi: bool = True, nbytes: int | None = None,
                 prefix: str = "FPP1"):
        self.work, self.ranks, self.prefix = work, ranks, prefix
        self.nbytes = nbytes or file_bytes(ranks)
        self.kind = "python"
        self.exe: Path | None = None
        if prefer_mpi and shutil.which("mpicc") and shutil.which("mpirun"):
            src = work / "hacc_writer.c"
            exe = work / "hacc_writer"
            if exe.is_file():
                self.kind, self.exe = "mpi", exe
                return
            src.write_text(MPI_SOURCE)
            built = subprocess.run(["mpicc", "-O2", "-o", str(exe), str(src)], capture_output=True, text=True)
            if built.returncode == 0:
                self.kind, self.exe = "mpi", exe
            else:
                self.note = f"mpicc failed, using the Python writer: {built.stderr.strip()[:200]}"

    def describe(self) -> str:
        what = f"mpirun -np {self.ranks} (MPI-IO)" if self.kind == "mpi" else f"{self.ranks} Python processes"
        return f"{what}, {self.ranks} files of {self.nbytes:,} bytes (sparse)"

    def files(self, out: Path) -> list[Path]:
        return [out / f"{self.prefix}-Part{rank:08d}-of-{self.ranks:08d}.data" for rank in range(self.ranks)]

    def run(self, out: Path, env: dict[str, str], timeout: float = 180) -> None:
        out.mkdir(parents=True, exist_ok=True)
        nbytes = self.nbytes
        if self.kind == "mpi":
            passed = [a for key in env if key.startswith("IEZ_") or key == "LD_PRELOAD" for a in ("-x", key)]
            cmd = ["mpirun", "--oversubscribe", "-np", str(self.ranks), *passed, str(self.exe), str(out), str(nbytes),
                   self.prefix]
            done = subprocess.run(cmd, env={**os.environ, **env, "OMPI_ALLOW_RUN_AS_ROOT": "1",
                                            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"},
                                  capture_output=True, text=True, timeout=timeout)
            if done.returncode != 0:
                raise RuntimeError(f"mpirun exited with {done.returncode}: {done.stderr.strip()[-400:]}")
            return
        procs = [subprocess.Popen([sys.executable, "-c", PYTHON_RANK, str(self.ranks), str(out), str(nbytes),
                                   self.prefix],
                                  env={**os.environ, **env, "IEZ_DEMO_RANK": str(rank), "PMI_RANK": str(rank),
                                       "PMI_SIZE": str(self.ranks)},
                                  stderr=subprocess.PIPE, text=True) for rank in range(self.ranks)]
        failed = []
        for rank, proc in enumerate(procs):
            _, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                failed.append(f"rank {rank}: {err.strip()[-200:]}")
        if failed:
            raise RuntimeError("the writer failed: " + "; ".join(failed))
