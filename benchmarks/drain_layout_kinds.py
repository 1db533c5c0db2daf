"""Figures for issue 24's drain: ``iez drain --ost 2`` on an emulated tree of every layout kind.

    python benchmarks/drain_layout_kinds.py [--rounds 10] [--mib-s 0] [--kill-after 0]

Builds tests/rebalance/layout_kinds.py's cluster (8 OSTs, 4 OSSs, pool flash) with ``rounds`` files of each kind
(plain 1 and 2 stripes, PFL with Data-on-MDT and an uninstantiated component, PFL with a pooled component,
mirrored with one stale copy in every other file, mirrored with the preferred copy on OST 2, overstriped), every
file given owner, mode bits, ACL, xattrs, capability, times and holes; runs the drain (under IEZ_EMULATE at
``--mib-s`` per OST when given; killed with SIGKILL ``--kill-after`` seconds in, then run again) and prints one
JSON object: objects on OST 2 before and after, files and bytes moved, seconds, layouts intact (extents,
stripe sizes and counts, pools, DoM, uninstantiated, mirrors' OSSs distinct, stale flags), sha256 and
attributes unchanged, temporaries left.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "rebalance"), str(REPO / "tests" / "move")]

import layout_kinds as lk  # noqa: E402
from move_helpers import compare, temporaries  # noqa: E402
from test_drain import check_intact, objects  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--mib-s", type=float, default=0.0)
    parser.add_argument("--kill-after", type=float, default=0.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="iez-drain-"))
    root = lk.cluster(work, per_ost_mib=256, mib_s=args.mib_s or 400.0)
    snaps = lk.tree(root, n=args.rounds)
    before = {p: lk.layout_of(p) for p in snaps}
    env = {**os.environ, "IEZ_STATE_DIR": str(work / "state")}
    if args.mib_s:
        env["IEZ_EMULATE"] = str(root)
    argv = [sys.executable, "-m", "iez.cli", "drain", "--ost", "2", "--root", str(root), "--json", "--share", "1"]
    started = time.monotonic()
    killed = False
    if args.kill_after:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(args.kill_after)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed = True
        proc.wait()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    out = json.loads(done.stdout)
    intact = 0
    for p, lay in before.items():
        check_intact(lay, lk.layout_of(p), 2)
        intact += 1
    result = compare([(s, p) for p, s in snaps.items()])
    print(json.dumps({
        "files": len(snaps), "kinds": sorted({p.name.rsplit("-", 1)[0] for p in snaps}),
        "objects_on_ost2_before": sum(o == 2 for lay in before.values() for _, _, o in objects(lay)),
        "objects_on_ost2_after": sum(o == 2 for p in snaps for _, _, o in objects(lk.layout_of(p))),
        "exit": done.returncode, "killed_once": killed, "files_moved_last_run": out["files_moved"],
        "bytes_moved_last_run": out["bytes_moved"], "objects_left": out["objects_left"],
        "seconds": round(seconds, 2), "layouts_intact": intact, "lost": result["lost"],
        "corrupted": result["corrupted"], "attributes_changed": result["attributes_changed"],
        "temporaries_left": len(temporaries(root / "data")), "work": str(work)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
