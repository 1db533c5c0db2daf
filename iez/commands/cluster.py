"""``iez cluster emulate``: an emulated cluster (parameter trees + one real agent per OSS).

    iez cluster emulate --oss 3 --osts-per-oss 5 --ost-size 10G --root DIR [--data DIR] \\
        [--mds tcp://127.0.0.1:5555] [--interval 1] [--fill 0.1-0.22] [--no-agents]

It creates ``DIR/oss<k>`` trees and ``DIR/cluster.json``, starts
``iez-agent --root DIR/oss<k> --oss-id oss<k> --mds ...`` for each OSS, and
keeps the trees in step with the files below the data directories (default
``DIR/data``) until SIGTERM or Ctrl-C, when it stops the agents it started.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from iez.units import parse_size


def register(subparsers) -> None:
    parser = subparsers.add_parser("cluster", help="an emulated Lustre cluster for machines without Lustre")
    actions = parser.add_subparsers(dest="cluster_action", metavar="ACTION", required=True)
    emulate = actions.add_parser("emulate", help="create parameter trees and run one agent per OSS")
    emulate.add_argument("--root", required=True, type=Path, help="directory for the trees and cluster.json")
    emulate.add_argument("--data", action="append", type=Path,
                         help="directory applications write to (repeatable; default ROOT/data)")
    emulate.add_argument("--oss", type=int, default=3)
    emulate.add_argument("--osts-per-oss", type=int, default=5)
    emulate.add_argument("--ost-size", default="10G", help="capacity of each OST (default 10G)")
    emulate.add_argument("--fill", default="0", help="pre-existing data per OST, a fraction or LOW-HIGH (default 0)")
    emulate.add_argument("--seed", type=int, default=0)
    emulate.add_argument("--fsname", default="iezfs")
    emulate.add_argument("--mds", default="tcp://127.0.0.1:5555", help="MDS endpoint the agents connect to")
    emulate.add_argument("--interval", type=float, default=1.0, help="agent interval and tree refresh, seconds")
    emulate.add_argument("--no-agents", action="store_true", help="only maintain the trees")
    emulate.add_argument("--once", action="store_true", help="create the trees, print them and exit")
    emulate.set_defaults(handler=_emulate)


def _fill(text: str) -> tuple[float, float]:
    try:
        low, _, high = text.partition("-")
        return float(low), float(high or low)
    except ValueError:
        raise ValueError(f"--fill {text!r}: give a fraction (0.2) or a range (0.1-0.22)") from None


def agent_command() -> list[str]:
    exe = shutil.which("iez-agent")
    return [exe] if exe else [sys.executable, "-m", "agents.cli"]


def _emulate(args: argparse.Namespace) -> int:
    from iez.emulate.cluster import Emulator, create

    if not 0.1 <= args.interval <= 3600:
        raise ValueError(f"--interval {args.interval} is outside 0.1..3600")
    data = [str(d) for d in (args.data or [args.root / "data"])]
    layout = create(args.root, data, args.oss, args.osts_per_oss, parse_size(args.ost_size), _fill(args.fill),
                    args.seed, args.fsname)
    print(f"emulated cluster: {layout.oss} OSS x {layout.osts_per_oss} OSTs of {layout.ost_kb // 1024} MiB "
          f"under {layout.root}; data in {', '.join(layout.data)}", flush=True)
    if args.once:
        return 0
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    agents: list[subprocess.Popen] = []
    try:
        if not args.no_agents:
            interval = str(max(1, round(args.interval)))
            for k in range(layout.oss):
                agents.append(subprocess.Popen(agent_command() + [
                    "--root", str(layout.oss_root(k)), "--oss-id", f"oss{k}", "--mds", args.mds,
                    "--interval", interval, "--fsname", layout.fsname]))
            print(f"started {len(agents)} agents -> {args.mds}", flush=True)
        emulator = Emulator(layout)
        reported: set[int] = set()
        while not stop.is_set():
            emulator.update()
            for k, agent in enumerate(agents):
                if agent.poll() is not None and k not in reported:
                    # the trees stay up to date: an agent started by hand for oss<k> takes over
                    reported.add(k)
                    print(f"iez cluster: agent oss{k} exited with {agent.returncode}", file=sys.stderr, flush=True)
            stop.wait(args.interval / 2)
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.terminate()
        for agent in agents:
            try:
                agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                agent.kill()
    return 0
