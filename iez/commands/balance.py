"""``iez balance``: the balancing service (issue 24), or one pass of it.

    iez balance [--once] [--db DB] [--root DIR] [--dry-run] [--json] [--config FILE]
                [--high-water F] [--low-water F] [--target S] [--hysteresis S] [--share F]
                [--busy-mib-s R] [--interval S] [--pool P] [--state-dir DIR] [--status-file FILE]
                [--metrics-bind HOST:PORT]

Settings come from a TOML file (``--config``, else ``$IEZ_BALANCE_CONFIG``;
:mod:`iez.rebalance.settings`) and flags override them. ``DIR`` is an emulated
cluster's root (its OSTs and files, its servers' counters as the live view) or a
Lustre mount point (the DB's live view for the OSTs; ``--db`` also makes an
emulated cluster's view come from the DB). The service is :mod:`iez.rebalance.service`;
on an emulated cluster it runs itself again with the placement library preloaded,
in the I/O class ``rebalance`` capped at ``--share`` (on Lustre the share is the
NRS TBF rule ``iez shares`` makes for the application ``rebalance``, which the agents
apply). One service per state directory (a lock).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import sys
from pathlib import Path

from iez.commands.db import db_errors
from iez.commands.preloaded import rerun_preloaded

#: The settings flags (dest -> the key of the config file), each overriding the file.
_SETTINGS = ("root", "db", "high_water", "low_water", "target", "hysteresis", "share", "busy_mib_s", "interval",
             "state_dir", "pools")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "balance", help="the balancing service: keep every pool under its high-water fill and spread, by itself",
        description="Per pool, start a pass when an OST passes --high-water or the fill spread passes --target "
        "plus --hysteresis; move (the fewest bytes, at --share of each OST, journalled) until every OST is under "
        "--low-water and the spread under --target; pause while the pool has degraded, inactive or readonly "
        "OSTs or a source or destination OST is busy with jobs (--busy-mib-s). Without --once it runs until "
        "SIGTERM, looking every --interval seconds; a killed service, restarted, finishes its plan first.")
    p.add_argument("--once", action="store_true", help="one pass over every pool, then exit (prints the outcome)")
    p.add_argument("--dry-run", action="store_true", help="plan and say what would move; move nothing")
    p.add_argument("--json", action="store_true", help="with --once: print the outcome as one JSON object")
    p.add_argument("--config", metavar="FILE", help="TOML settings ([balance] table; default $IEZ_BALANCE_CONFIG)")
    p.add_argument("--root", metavar="DIR", help="the file system: an emulated cluster's root or a Lustre mount point")
    p.add_argument("--db", metavar="DB", help="interaction DB for the live view (default: $IEZ_DB; an emulated "
                   "root without --db uses the emulated servers' own counters)")
    p.add_argument("--high-water", type=float, metavar="F", help="OST fill that starts a pass (default 0.85)")
    p.add_argument("--low-water", type=float, metavar="F", help="OST fill a pass brings every OST under (default 0.80)")
    p.add_argument("--target", type=float, metavar="S", help="fill spread a pass ends under (default 0.10)")
    p.add_argument("--hysteresis", type=float, metavar="S",
                   help="a pass starts when the spread is above target + this (default 0.05)")
    p.add_argument("--share", type=float, metavar="F", help="share of each OST's bandwidth for moves (default 0.3)")
    p.add_argument("--busy-mib-s", type=float, metavar="R",
                   help="pause while jobs drive more than R MiB/s on a source or destination OST (default 256)")
    p.add_argument("--interval", type=float, metavar="S", help="seconds between looks while idle (default 60)")
    p.add_argument("--pool", action="append", dest="pools", metavar="P",
                   help="balance only this pool (repeatable; default every pool)")
    p.add_argument("--state-dir", metavar="DIR", help="plans and journals (default $IEZ_STATE_DIR/balance)")
    p.add_argument("--status-file", type=Path, metavar="FILE",
                   help="where iez status reads what the service does (default $IEZ_STATE_DIR/balance-status.json)")
    p.add_argument("--metrics-bind", metavar="HOST:PORT", help="serve Prometheus metrics there (default: none)")
    p.set_defaults(handler=_run)


def _argv(args: argparse.Namespace) -> list[str]:
    """The command line of ``args`` again (for the run under the library)."""
    out = ["balance"]
    for flag in ("once", "dry_run", "json"):
        if getattr(args, flag):
            out.append("--" + flag.replace("_", "-"))
    for dest in ("config", "root", "db", "high_water", "low_water", "target", "hysteresis", "share", "busy_mib_s",
                 "interval", "state_dir", "status_file", "metrics_bind"):
        value = getattr(args, dest)
        if value is not None:
            out += ["--" + dest.replace("_", "-"), str(value)]
    for pool in args.pools or ():
        out += ["--pool", pool]
    return out


def _lock(state_dir: Path):
    state_dir.mkdir(parents=True, exist_ok=True)
    handle = open(state_dir / "lock", "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        raise OSError(f"another iez balance (pid {holder}) runs on {state_dir}") from None
    handle.truncate(0)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


@db_errors
def _run(args: argparse.Namespace) -> int:
    from iez.config import Settings
    from iez.rebalance.service import Balancer
    from iez.rebalance.settings import resolve
    from iez.rebalance.status import FILE, serve_metrics

    settings = resolve(args.config, {k: getattr(args, k) for k in _SETTINGS})
    if not settings.root:
        raise ValueError("no file system to balance: give --root DIR or root in the config's [balance] table")
    if not args.dry_run:
        cluster = Path(settings.root) / "cluster.json"
        rerun_preloaded(_argv(args), settings.share, str(cluster.parent.resolve()) if cluster.is_file() else None)
    base = Settings.from_env(db=settings.db).state_dir
    state_dir = Path(settings.state_dir) if settings.state_dir else Path(base) / "balance"
    status_path = None if args.dry_run else (args.status_file or Path(base) / FILE)
    lock = None if args.dry_run else _lock(state_dir)
    err = sys.stderr

    def log(text: str) -> None:
        print(f"iez balance: {text}", file=err, flush=True)

    balancer = Balancer(settings, state_dir, status_path, args.dry_run, log)
    server = serve_metrics(balancer, args.metrics_bind) if args.metrics_bind else None
    try:
        if args.once:
            step = balancer.step()
            doc = step.to_json(args.dry_run)
            if args.json:
                print(json.dumps(doc, indent=1))
            else:
                print(f"{doc['action']}: {doc['files_moved']} files, {doc['bytes_moved']} bytes"
                      f"{' (dry run: nothing moved)' if args.dry_run else ''}; spread {doc['spread_before']:.3f} -> "
                      f"{doc['spread_after']:.3f}" + (f"; {doc['reason']}" if doc["reason"] else ""))
                for p in doc["pools"]:
                    print(f"  pool {p['pool'] or '(all)'}: {p['state']}: {p['reason']}")
            return 0

        def stop(signum, frame):  # noqa: ARG001
            balancer.stop.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        log(f"balancing {settings.root} (high water {settings.high_water}, low water {settings.low_water}, target "
            f"{settings.target}, share {settings.share}); state in {state_dir}")
        balancer.serve()
        log("stopped")
        return 0
    finally:
        if server is not None:
            server.shutdown()
        balancer.close()
        if lock is not None:
            lock.close()
