"""Seed 000's experiments with `iez copy`: the layout-aware mover against the naive baseline, with and
without one congested OST, on an emulated 2 OSS x 4 OST cluster (`iez cluster emulate --no-agents`).

    python benchmarks/mover_congestion.py [--src-files 200] [--sink-files 200] [--size-mb 20] [--json]
    python benchmarks/mover_congestion.py --src-files 1000 --sink-files 5000     # the issue's sizes

- Source side, W(src) of Table I: ``--src-files`` files of ``--size-mb`` MB (sparse: no disk), each striped
  over 4 OSTs at 1 MiB (start OST round-robin), read by 4 workers into a plain directory (``--sparse``:
  the destination stays holes and is not emulated), layout-aware against ``--naive``, without and with
  congestion. Reported: each throughput and the drop when congested (the issue's target: layout-aware
  drops at most 16 %, naive at least 25 %; the paper measured 16 % and 30 %).
- Sink side, W(sink): ``--sink-files`` files (sparse sources with no layout, so reading costs nothing)
  written in full (``--dense``: their holes written as zeros) by 8 workers into the emulated cluster's data directory (on /dev/shm: tmpfs keeps user
  attributes, and nothing reaches the disk), stripe count 1 as the paper's sink, in rounds of
  ``--round`` files whose destinations are checked (count and size) and deleted; layout-aware (placed by
  iez away from the overloaded OST) against naive (round-robin placement: file per server).

Congestion (``--congestion``): ``writer`` (default) runs Table I's overloading workload, two writer
processes under libiez streaming 256 MiB files, round-robin over the OSTs for the source side and
fixed on OST 5 for the sink side; ``load`` sets a background load instead (``iez cluster set --ost K
--load MIB_S``: ``--load`` on OST 3 for the source side, OST 5 for the sink side). OSTs serve
``--ost-mib-s`` (40: a 1 MiB chunk takes 25 ms, half the threshold T = 50 ms), OSSs 1000 MiB/s.
Throughputs are the mover's own (bytes over its run time, start-up excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from iez.demo.pipeline import find_library  # noqa: E402
from iez.progress import note  # noqa: E402

MiB = 1024 * 1024
XATTR = "user.iez.layout"
INTERLEAVED = [0, 4, 1, 5, 2, 6, 3, 7]  # Lustre's round-robin order over 2 OSS x 4 OSTs

COMPETITOR = r"""
import os, sys, time
root, osts, per_file = sys.argv[1], [int(x) for x in sys.argv[2].split(",")], int(sys.argv[3])
buf = b"\1" * (1 << 20)
k = 0
while True:
    ost = osts[k % len(osts)]
    path = os.path.join(root, f"load-{os.getpid()}-{ost}")
    if not os.path.exists(path):
        open(path, "wb").close()
        os.setxattr(path, "user.iez.layout", f"version=1 stripe_size=1048576 stripe_count=1 osts={ost}".encode())
    fd = os.open(path, os.O_WRONLY)
    for _ in range(per_file):
        os.pwrite(fd, buf, 0)  # the emulation counts every call's bytes on the OST; the disk keeps 1 MiB
    os.close(fd)
    k += 1
"""


def run(cmd: list[str], env: dict, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])}... failed: {done.stderr.strip()[-500:]}")
    return done


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = Path(tempfile.mkdtemp(prefix="iez-mover-", dir=args.work))
        self.shm = Path(tempfile.mkdtemp(prefix="iez-mover-", dir="/dev/shm"))
        self.root, self.data = self.work / "root", self.shm / "data"
        desc = {"oss": [{"id": f"oss{k}", "bandwidth_mib_s": args.oss_mib_s, "osts": [
            {"index": i, "kbytes_total": 1 << 32, "kbytes_avail": 1 << 32, "bandwidth_mib_s": args.ost_mib_s}
            for i in range(4 * k, 4 * k + 4)]} for k in range(2)]}
        (self.work / "cluster.json").write_text(json.dumps(desc))
        self.env = {**os.environ, "IEZ_STATE_DIR": str(self.work / "state")}
        self.env.pop("LD_PRELOAD", None)
        run([sys.executable, "-m", "iez.cli", "cluster", "emulate", "--cluster", str(self.work / "cluster.json"),
             "--root", str(self.root), "--data", str(self.data), "--no-agents"], self.env)
        # a private copy of libiez, built now with the table just written: a rebuild of the shared tree during
        # the run (another change to the emulation) cannot change what this run measures
        self.lib = self.work / "libiez.so"
        shutil.copy2(find_library(), self.lib)
        self.emulated = {**self.env, "IEZ_EMULATE": str(self.root), "IEZ_PRELOAD_LIB": str(self.lib)}
        self.check_slowed()
        self.competitors: list[subprocess.Popen] = []

    def check_slowed(self) -> None:
        """8 MiB read from one OST must take 8 MiB / its rate: else the library and the table disagree."""
        probe = self.data / "probe"
        probe.parent.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as out:
            out.truncate(8 * MiB)
        os.setxattr(probe, XATTR, f"version=1 stripe_size={MiB} stripe_count=1 osts=0".encode())
        env = {**self.emulated, "LD_PRELOAD": str(self.lib), "IEZ_MODE": "off"}
        start = time.monotonic()
        run(["cat", str(probe)], env)
        took = time.monotonic() - start
        probe.unlink()
        if took < 8 / self.args.ost_mib_s * 0.9:
            raise SystemExit(f"emulated bandwidth is not in effect ({took:.3f} s for 8 MiB at {self.args.ost_mib_s} "
                             "MiB/s): libiez and the bandwidth table disagree")

    def close(self) -> None:
        self.uncongest()
        shutil.rmtree(self.work, ignore_errors=True)
        shutil.rmtree(self.shm, ignore_errors=True)

    # -- congestion ------------------------------------------------------------------------------------

    def congest(self, osts: list[int], fixed_ost: int) -> None:
        a = self.args
        if a.congestion == "load":
            run([sys.executable, "-m", "iez.cli", "cluster", "set", "--root", str(self.root), "--ost", str(fixed_ost),
                 "--load", str(a.load)], self.env)
            return
        scratch = self.data / "load"
        scratch.mkdir(exist_ok=True)
        env = {**self.emulated, "LD_PRELOAD": str(self.lib), "IEZ_MODE": "off"}
        for t in range(2):  # Table I: two overloading threads, 256 MB files
            order = ",".join(map(str, osts[t * len(osts) // 2:] + osts[:t * len(osts) // 2]))
            self.competitors.append(subprocess.Popen([sys.executable, "-c", COMPETITOR, str(scratch), order, "256"],
                                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.5)

    def uncongest(self) -> None:
        for p in self.competitors:
            p.kill()
            p.wait()
        self.competitors.clear()
        if self.args.congestion == "load":
            for ost in (3, 5):
                run([sys.executable, "-m", "iez.cli", "cluster", "set", "--root", str(self.root), "--ost", str(ost),
                     "--load", "0"], self.env, check=False)
        time.sleep(0.3)  # what the competitors reserved drains

    # -- workloads -------------------------------------------------------------------------------------

    def copy(self, srcs: list[Path], dst: Path, extra: list[str]) -> dict:
        dst.mkdir(parents=True, exist_ok=True)
        done = run([sys.executable, "-m", "iez.cli", "copy", *map(str, srcs), str(dst), "--json", *extra],
                   self.emulated, check=False)
        if done.returncode not in (0, 1) or not done.stdout.strip():
            raise SystemExit(f"iez copy failed: {done.stderr.strip()[-500:]}")
        report = json.loads(done.stdout)
        if report["failed"]:
            raise SystemExit(f"iez copy: {len(report['failed'])} files failed, first: {report['failed'][0]}")
        return report

    def source_side(self) -> dict:
        a = self.args
        src = self.data / "src"
        src.mkdir(parents=True)
        size = a.size_mb * 1000 * 1000
        files = []
        for k in range(a.src_files):
            path = src / f"f{k:05d}"
            with open(path, "wb") as out:
                out.truncate(size)
            osts = [INTERLEAVED[(k + j) % 8] for j in range(4)]
            os.setxattr(path, XATTR, f"version=1 stripe_size={MiB} stripe_count=4 osts={','.join(map(str, osts))}"
                        .encode())
            files.append(path)
        out: dict = {"files": a.src_files, "size_mb": a.size_mb, "workers": 4, "congestion": a.congestion}
        for mode, extra in (("layout-aware", []), ("naive", ["--naive"])):
            row = {}
            for state in ("clear", "congested"):
                if state == "congested":
                    self.congest(INTERLEAVED, 3)
                note(f"source side: {mode}, {state}, {a.src_files} x {a.size_mb} MB", always=True)
                dst = self.work / "dst"  # outside the emulated data: not slowed, holes (--sparse)
                try:
                    report = self.copy([src], dst, ["--workers", "4", "--sparse", *self._cd(), *extra])
                finally:
                    if state == "congested":
                        self.uncongest()
                shutil.rmtree(dst)
                row[state] = round(report["throughput_mib_s"], 1)
                row[f"{state}_s"] = round(report["seconds"], 2)
                if state == "congested":
                    row["congested_events"] = sum(1 for e in report["congested"] if e["congested"])
            row["drop_pct"] = round(100 * (1 - row["congested"] / row["clear"]), 1)
            out[mode] = row
        shutil.rmtree(src)
        return out

    def sink_side(self) -> dict:
        a = self.args
        src = self.work / "sink-src"  # not emulated: reading costs nothing, the writes are measured
        src.mkdir()
        size = a.size_mb * 1000 * 1000
        paths = []
        for k in range(a.sink_files):
            path = src / f"s{k:05d}"
            with open(path, "wb") as out:
                out.truncate(size)
            paths.append(path)
        out: dict = {"files": a.sink_files, "size_mb": a.size_mb, "workers": 8, "overloaded_ost": 5,
                     "congestion": a.congestion}
        for mode, extra in (("layout-aware", []), ("naive", ["--naive"])):
            row = {}
            for state in ("clear", "congested"):
                if state == "congested":
                    self.congest([5], 5)
                note(f"sink side: {mode}, {state}, {a.sink_files} x {a.size_mb} MB in rounds of {a.round}",
                     always=True)
                moved, seconds, per_ost = 0, 0.0, {}
                try:
                    for first in range(0, len(paths), a.round):
                        batch = paths[first:first + a.round]
                        dst = self.data / "sink-dst"
                        report = self.copy(batch, dst, ["--workers", "8", "--stripe-count", "1", "--dense",
                                                        *self._cd(), *extra])  # the holes written: writes timed
                        written = list(dst.iterdir())
                        if len(written) != len(batch) or any(p.stat().st_size != size for p in written):
                            raise SystemExit(f"sink side: {dst} holds {len(written)} files, not {len(batch)} of {size} B")
                        shutil.rmtree(dst)
                        moved += report["bytes"]
                        seconds += report["seconds"]
                        for k, v in report["dst_files_per_ost"].items():
                            per_ost[k] = per_ost.get(k, 0) + v
                finally:
                    if state == "congested":
                        self.uncongest()
                row[state] = round(moved / MiB / seconds, 1)
                row[f"{state}_s"] = round(seconds, 2)
                row[f"{state}_files_on_ost5"] = per_ost.get("5", 0)
                row[f"{state}_files_per_ost"] = dict(sorted(per_ost.items()))
            row["drop_pct"] = round(100 * (1 - row["congested"] / row["clear"]), 1)
            out[mode] = row
        shutil.rmtree(src)
        return out

    def _cd(self) -> list[str]:
        a = self.args
        return ["--window", str(a.window), "--threshold", str(a.threshold), "--skip", str(a.skip)]


def table(result: dict) -> str:
    lines = []
    for side in ("source", "sink"):
        r = result.get(side)
        if not r:
            continue
        lines.append(f"{side} side: {r['files']} files x {r['size_mb']} MB, {r['workers']} workers, "
                     f"congestion by {r['congestion']}")
        lines.append(f"  {'mover':<14}{'clear MiB/s':>12}{'congested':>12}{'drop':>8}")
        for mode in ("layout-aware", "naive"):
            row = r[mode]
            lines.append(f"  {mode:<14}{row['clear']:>12.1f}{row['congested']:>12.1f}{row['drop_pct']:>7.1f}%")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src-files", type=int, default=200, help="W(src) files (issue: 1000; 0 skips the side)")
    p.add_argument("--sink-files", type=int, default=200, help="W(sink) files (issue: 5000; 0 skips the side)")
    p.add_argument("--size-mb", type=int, default=20, help="file size, MB (issue: 20)")
    p.add_argument("--round", type=int, default=200, help="sink files copied, checked and deleted at a time")
    p.add_argument("--congestion", choices=("writer", "load"), default="writer")
    p.add_argument("--load", type=float, default=30.0, help="with --congestion load: MiB/s of background load")
    p.add_argument("--ost-mib-s", type=float, default=40.0)
    p.add_argument("--oss-mib-s", type=float, default=1000.0)
    p.add_argument("--window", type=int, default=40)
    p.add_argument("--threshold", type=float, default=0.05)
    p.add_argument("--skip", type=int, default=16)
    p.add_argument("--work", default=None, help="directory for the emulated cluster's root (default: $TMPDIR)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    args = p.parse_args()
    bench = Bench(args)
    result: dict = {"ost_mib_s": args.ost_mib_s, "oss_mib_s": args.oss_mib_s,
                    "window": args.window, "threshold_s": args.threshold, "skip": args.skip}
    try:
        if args.src_files:
            result["source"] = bench.source_side()
        if args.sink_files:
            result["sink"] = bench.sink_side()
    finally:
        bench.close()
    print(json.dumps(result, indent=1) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
