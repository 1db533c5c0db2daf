"""``iez cluster``: an emulated cluster (parameter trees + one real agent per OSS), and its administrator.

    iez cluster emulate --cluster FILE --root DIR [--data DIR] [--fsname NAME] \\
        [--mds tcp://127.0.0.1:5555] [--interval 1] [--no-agents] [--once]
    iez cluster emulate --oss 3 --osts-per-oss 5 --ost-size 10G --root DIR [--fill 0.1-0.22] ...
    iez cluster set --root DIR --ost 3[,4] --state degraded|readonly|nocreate|inactive|active
    iez cluster set --root DIR --pool flash (--add-osts 3,4 | --remove-osts 4 | --destroy)
    iez cluster set --root DIR --param osp.*-OST0003-*.max_create_count=0

``emulate`` creates one OSS tree per server (``DIR/<oss id>``), the MDS's tree
(``DIR/mds``, for ``iez mds --lustre-params DIR/mds``) and ``DIR/cluster.json``,
starts ``iez-agent --root DIR/<oss id> --oss-id <oss id> --mds ...`` for each
OSS, and keeps the trees in step with the files below the data directories
(default ``DIR/data``) until SIGTERM or Ctrl-C, when it stops the agents it
started. ``--no-agents`` sets up the trees and exits (``--once`` is the same).
``set`` changes the trees of a running emulation as ``lctl set_param`` and
``lctl pool_add``/``pool_remove`` would; agents and the MDS see it at their
next reading.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from iez.model import OST_STATES
from iez.units import parse_size


def register(subparsers) -> None:
    parser = subparsers.add_parser("cluster", help="an emulated Lustre cluster for machines without Lustre")
    actions = parser.add_subparsers(dest="cluster_action", metavar="ACTION", required=True)
    emulate = actions.add_parser("emulate", help="create parameter trees and run one agent per OSS")
    emulate.add_argument("--root", required=True, type=Path, help="directory for the trees and cluster.json")
    emulate.add_argument("--cluster", type=Path, metavar="FILE",
                         help="cluster description: JSON, or `lfs df` [+ `lfs pool_list`] output (OST indices, "
                              "sizes, fill, pools and states); replaces --oss/--osts-per-oss/--ost-size/--fill")
    emulate.add_argument("--data", action="append", type=Path,
                         help="directory applications write to (repeatable; default ROOT/data)")
    emulate.add_argument("--oss", type=int, default=3, help="OSSs without --cluster (default 3)")
    emulate.add_argument("--osts-per-oss", type=int, default=5, help="OSTs per OSS without --cluster (default 5)")
    emulate.add_argument("--ost-size", default="10G", help="capacity of each OST (default 10G)")
    emulate.add_argument("--fill", default="0", help="pre-existing data per OST, a fraction or LOW-HIGH (default 0)")
    emulate.add_argument("--seed", type=int, default=0, help="seed of the OSTs' fill (default 0)")
    emulate.add_argument("--fsname", default="iezfs", help="file system name in OST names, FS-OSTxxxx (default iezfs)")
    emulate.add_argument("--mds", default="tcp://127.0.0.1:5555", help="MDS endpoint(s) the agents publish to; a comma list for an active MDS service and its standbys")
    emulate.add_argument("--interval", type=float, default=1.0, help="agent interval and tree refresh, seconds")
    emulate.add_argument("--no-agents", action="store_true", help="set up the trees without agents and exit")
    emulate.add_argument("--tbf-rules", type=Path, metavar="FILE",
                         help="NRS TBF rules (iez shares rules --json) each agent keeps in its OSS's tree; the "
                              "emulated bandwidth limits each rule's job id (an IEZ_IO_CLASS) to its rate")
    emulate.add_argument("--insecure", action="store_true",
                         help="agents publish without CURVE keys (for an MDS run with --insecure); by default each "
                              "agent has its key under ROOT/keys, and the MDS takes --curve-secret-key "
                              "ROOT/keys/mds.key_secret --curve-authorized ROOT/keys/authorized")
    emulate.add_argument("--once", action="store_true", help="create the trees, print them and exit")
    emulate.set_defaults(handler=_emulate)

    change = actions.add_parser("set", help="change OST states, pools or any parameter of an emulated cluster")
    change.add_argument("--root", required=True, type=Path, help="the emulated cluster's root")
    change.add_argument("--ost", metavar="LIST", help="OSTs to put in --state: indices, e.g. 3,4 or OST0003")
    change.add_argument("--state", choices=OST_STATES,
                        help="degraded, readonly, nocreate (obdfilter switches on the OSS), inactive "
                             "(osp.*.active=0 on the MDS) or active (all cleared)")
    change.add_argument("--load", type=float, metavar="MIB_S",
                        help="with --ost: background load of those OSTs (traffic of other jobs), MiB/s; "
                             "processes under IEZ_EMULATE feel it at their next read or write")
    change.add_argument("--bandwidth", type=float, metavar="MIB_S", help="with --ost: their bandwidth, MiB/s")
    change.add_argument("--pool", metavar="NAME", help="the pool to change (created by --add-osts when new)")
    change.add_argument("--add-osts", metavar="LIST", help="lctl pool_add: OSTs joining --pool")
    change.add_argument("--remove-osts", metavar="LIST", help="lctl pool_remove: OSTs leaving --pool")
    change.add_argument("--destroy", action="store_true", help="lctl pool_destroy: drop the (empty) --pool")
    change.add_argument("--param", action="append", metavar="NAME=VALUE",
                        help="lctl set_param on the emulated node holding NAME (globs allowed; repeatable)")
    change.set_defaults(handler=_set)


def _fill(text: str) -> tuple[float, float]:
    try:
        low, _, high = text.partition("-")
        return float(low), float(high or low)
    except ValueError:
        raise ValueError(f"--fill {text!r}: give a fraction (0.2) or a range (0.1-0.22)") from None


#: How often the emulated servers' traffic counters are rewritten (seconds).
COUNTER_TICK_S = 0.2


def agent_command() -> list[str]:
    exe = shutil.which("iez-agent")
    return [exe] if exe else [sys.executable, "-m", "agents.cli"]


def _emulate(args: argparse.Namespace) -> int:
    from iez.emulate.cluster import (Emulator, create, describe_states, ensure_keys, layout_from_counts,
                                     layout_from_description)

    if not 0.1 <= args.interval <= 3600:
        raise ValueError(f"--interval {args.interval} is outside 0.1..3600")
    data = [str(d) for d in (args.data or [args.root / "data"])]
    args.root.mkdir(parents=True, exist_ok=True)
    from iez.progress import Progress

    with Progress("emulated cluster") as progress:  # stderr, on a terminal only
        progress.step("laying out the OSTs")
        if args.cluster:
            layout = layout_from_description(args.root, data, args.cluster, args.fsname)
        else:
            layout = layout_from_counts(args.root, data, args.oss, args.osts_per_oss, parse_size(args.ost_size),
                                        _fill(args.fill), args.seed, args.fsname)
        progress.step(f"creating the parameter trees of {len(layout.osts)} OSTs")
        create(layout)
        if not args.insecure:
            progress.step(f"CURVE keys for the MDS and {len(layout.oss_ids)} OSS")
            ensure_keys(layout.root, layout.oss_ids)
    total_gib = sum(o.kbytes_total for o in layout.osts) / (1 << 20)
    print(f"emulated cluster: {len(layout.osses)} OSS, {len(layout.osts)} OSTs, {total_gib:.3g} GiB under "
          f"{layout.root}; data in {', '.join(layout.data)}", flush=True)
    print(f"{describe_states(layout)}; MDS parameters: iez mds --lustre-params {layout.mds_root}", flush=True)
    keys = None if args.insecure else ensure_keys(layout.root, layout.oss_ids)
    if keys is not None:
        print(f"CURVE keys: iez mds {' '.join(keys.mds_options())}", flush=True)
    if args.once or args.no_agents:
        return 0
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    agents: dict[str, subprocess.Popen] = {}
    mdt = None
    try:
        interval = str(max(1, round(args.interval)))
        with Progress("starting agents", total=len(layout.oss_ids)) as progress:
            for oss_id in layout.oss_ids:
                progress.step(oss_id)
                agents[oss_id] = subprocess.Popen(agent_command() + [
                    "--root", str(layout.oss_root(oss_id)), "--oss-id", oss_id, "--mds", args.mds,
                    "--interval", interval, "--fsname", layout.fsname, *(keys.agent_options(oss_id) if keys else []),
                    *(["--tbf-rules", str(args.tbf_rules.resolve())] if args.tbf_rules else [])])
                progress.advance()
        print(f"started {len(agents)} agents -> {args.mds}", flush=True)
        emulator = Emulator(layout)
        from iez.inventory.emulated_mdt import ChangelogWriter, changelog_path

        mdt = ChangelogWriter(layout.data, changelog_path(layout.root, layout.fsname))  # the emulated MDT's changelog
        print(f"MDT changelog: {mdt.log} (iez inventory follow --cluster {layout.root})", flush=True)
        reported: set[str] = set()
        # the space comes from a walk of the data directories every half interval; the traffic counters are
        # rewritten every COUNTER_TICK_S, so an agent's reading is at most that old (a server's is live): over
        # a 3-interval window a half-interval lag would be up to 17 % of the rate
        last_walk = 0.0
        while not stop.is_set():
            walk = time.monotonic() - last_walk >= args.interval / 2
            if walk:
                last_walk = time.monotonic()
            emulator.update(walk=walk)
            mdt.poll()
            if walk:
                mdt.compact()
            for oss_id, agent in agents.items():
                if agent.poll() is not None and oss_id not in reported:
                    # the trees stay up to date: an agent started by hand for this OSS takes over
                    reported.add(oss_id)
                    print(f"iez cluster: agent {oss_id} exited with {agent.returncode}", file=sys.stderr, flush=True)
            stop.wait(min(COUNTER_TICK_S, args.interval / 2))
    finally:
        if mdt is not None:
            mdt.close()
        for agent in agents.values():
            if agent.poll() is None:
                agent.terminate()
        for agent in agents.values():
            try:
                agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                agent.kill()
    return 0


def _set(args: argparse.Namespace) -> int:
    from iez.emulate.cluster import change_pool, describe_states, set_param, set_state, ClusterLayout

    pool_change = args.add_osts or args.remove_osts or args.destroy
    speed = args.load is not None or args.bandwidth is not None
    if not (args.ost or args.state or args.pool or args.param or speed):
        raise ValueError("nothing to change: give --ost LIST with --state STATE, --load or --bandwidth, "
                         "--pool NAME with --add-osts, --remove-osts or --destroy, or --param NAME=VALUE")
    if bool(args.ost) != bool(args.state or speed):
        raise ValueError("--ost goes with --state, --load or --bandwidth: --ost 3,4 --state degraded")
    if bool(args.pool) != bool(pool_change):
        raise ValueError("--pool NAME goes with --add-osts LIST, --remove-osts LIST or --destroy")
    if not (args.root / "cluster.json").is_file():
        ClusterLayout.load(args.root)  # says how to create one
    layout = None
    for assignment in args.param or ():
        for name in set_param(args.root, assignment):
            print(f"{name}={assignment.partition('=')[2]}")
    if args.state:
        layout = set_state(args.root, args.ost, args.state)
    if speed:
        from iez.emulate.cluster import set_speed

        layout = set_speed(args.root, args.ost, args.load, args.bandwidth)
    if args.pool:
        layout = change_pool(args.root, args.pool, args.add_osts, args.remove_osts, args.destroy)
    print(describe_states(layout or ClusterLayout.load(args.root)))
    return 0
