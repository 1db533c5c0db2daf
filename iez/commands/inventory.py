"""``iez inventory``: the file inventory plans read instead of walking the tree (docs/inventory.md).

    iez inventory scan [--db DB] (--root DIR... | --cluster ROOT) [--workers N] [--json]
    iez inventory follow [--db DB] (--mdt NAME --user ID --root MOUNT | --cluster ROOT) [--once] [--json]
    iez inventory show [--db DB] [--json]

``scan`` seeds (or rescans) the inventory of the roots once, in parallel. ``follow`` keeps it current from
an MDT's changelog (``lfs changelog``/``lfs changelog_clear`` with a registered changelog user), or from the
emulated MDT of an emulated cluster (``iez cluster emulate`` writes its log); ``--once`` applies what is
there and exits. ``show`` prints the counts, bytes per OST, roots and changelog positions with their age.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from typing import TYPE_CHECKING

from iez.commands.db import add_db_option, db_errors, settings_from

if TYPE_CHECKING:
    from iez.emulate.cluster import ClusterLayout


def register(subparsers) -> None:
    parser = subparsers.add_parser("inventory", help="the file inventory: seed by a scan, follow MDT changelogs")
    actions = parser.add_subparsers(dest="inventory_action", metavar="ACTION", required=True)
    scan = actions.add_parser("scan", help="seed or rescan the inventory of some trees (parallel)")
    add_db_option(scan)
    scan.add_argument("--root", action="append", metavar="DIR", help="a tree to scan (repeatable)")
    scan.add_argument("--cluster", metavar="ROOT", help="an emulated cluster: scan its data directories")
    scan.add_argument("--workers", type=int, metavar="N", help="scanning processes (default: CPUs, at most 8)")
    scan.add_argument("--json", action="store_true", help="print one JSON object")
    scan.set_defaults(handler=_scan)
    follow = actions.add_parser("follow", help="apply an MDT's changelog records to the inventory")
    add_db_option(follow)
    follow.add_argument("--mdt", metavar="NAME", help="the MDT on Lustre, e.g. lustre-MDT0000 (with --user, --root)")
    follow.add_argument("--user", metavar="ID", help="the changelog user registered for iez, e.g. cl1")
    follow.add_argument("--root", action="append", metavar="MOUNT",
                        help="with --mdt: the Lustre mount point (lfs fid2path; rescanned on a hole)")
    follow.add_argument("--cluster", metavar="ROOT", help="an emulated cluster: follow its emulated MDT's log")
    follow.add_argument("--once", action="store_true", help="apply the records there are now and exit")
    follow.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between reads")
    follow.add_argument("--batch", type=int, default=100_000, metavar="N", help="records per transaction")
    follow.add_argument("--max-lag", type=int, default=None, metavar="N",
                        help="rescan rather than replay a backlog of more records (default 10,000,000)")
    follow.add_argument("--json", action="store_true", help="print one JSON object")
    follow.set_defaults(handler=_follow)
    show = actions.add_parser("show", help="counts, bytes per OST, roots and changelog positions")
    add_db_option(show)
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(handler=_show)


def _engine(args):
    from iez.db import open_db

    return open_db(settings_from(args))


def _cluster_roots(root: str) -> tuple[list[str], ClusterLayout]:
    from iez.emulate.cluster import ClusterLayout

    layout = ClusterLayout.load(root)
    return list(layout.data), layout


@db_errors
def _scan(args: argparse.Namespace) -> int:
    from iez.inventory.scan import scan

    roots = list(args.root or [])
    if args.cluster:
        roots += _cluster_roots(args.cluster)[0]
    if not roots:
        raise ValueError("give the trees to scan: --root DIR (repeatable) or --cluster ROOT")
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers {args.workers} must be at least 1")
    report = scan(_engine(args), roots, args.workers)
    for problem in report.problems:
        print(f"iez inventory: warning: {problem}", flush=True) if not args.json else None
    doc = report.to_json()
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(f"scanned {', '.join(doc['roots'])}: {doc['files']} files, {doc['dirs']} directories, "
              f"{doc['bytes']} bytes in {doc['seconds']} s ({doc['removed']} gone since the last scan)")
    return 0


def consumer_for(engine, mdt: str | None = None, user: str | None = None, roots: list[str] | None = None,
                 cluster: str | None = None, **options):
    """The consumer of an MDT on Lustre (``mdt``, ``user``, ``roots``: the mount point) or of an emulated
    cluster's MDT (``cluster``)."""
    from iez.inventory.consumer import Consumer
    from iez.inventory.readers import EmulatedChangelog, LustreChangelog

    if cluster:
        from iez.inventory.emulated_mdt import EMULATED_USER, changelog_path

        data, layout = _cluster_roots(cluster)
        log = changelog_path(layout.root, layout.fsname)
        name = f"{layout.fsname}-MDT0000"
        return Consumer(engine, EmulatedChangelog(log, user or EMULATED_USER), name, user or EMULATED_USER, data,
                        **options)
    if not (mdt and user and roots):
        raise ValueError("follow needs --mdt NAME --user ID --root MOUNT (Lustre) or --cluster ROOT (emulated)")
    if len(roots) != 1:
        raise ValueError("--mdt takes one --root: the Lustre mount point")
    return Consumer(engine, LustreChangelog(mdt, user), mdt, user, roots, lustre_mount=roots[0], **options)


@db_errors
def _follow(args: argparse.Namespace) -> int:
    if args.cluster and (args.mdt or args.root):
        raise ValueError("--cluster follows the emulated MDT; --mdt/--root are for Lustre: give one or the other")
    if args.batch < 1:
        raise ValueError(f"--batch {args.batch} must be at least 1")
    if not 0.05 <= args.interval <= 3600:
        raise ValueError(f"--interval {args.interval} is outside 0.05..3600")
    options = {"batch": args.batch}
    if args.max_lag is not None:
        if args.max_lag < 1:
            raise ValueError(f"--max-lag {args.max_lag} must be at least 1")
        options["max_lag"] = args.max_lag
    consumer = consumer_for(_engine(args), args.mdt, args.user, args.root, args.cluster, **options)
    if args.once:
        report = consumer.run_once()
    else:
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        report = consumer.follow(args.interval, stop)
    doc = report.to_json()
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        for note in doc["notes"]:
            print(f"iez inventory: {note}")
        print(f"{doc['mdt']} ({doc['user']}): {doc['records']} records applied, at record {doc['position']}; "
              f"{doc['files_written']} files written, {doc['files_removed']} removed, {doc['rescans']} rescans")
    return 0


@db_errors
def _show(args: argparse.Namespace) -> int:
    from iez.db.engine import read
    from iez.inventory.store import summary

    doc = read(_engine(args), summary)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"{doc['files']} files ({doc['bytes']} bytes), {doc['dirs']} directories, {doc['stale_files']} stale")
    for r in doc["roots"]:
        print(f"root {r['path']}: scanned {r['scanned'] or 'never'} ({r['age_s']} s ago)")
    for c in doc["changelogs"]:
        print(f"changelog {c['mdt']} user {c['user']}: record {c['position']}, {c['records']} applied, "
              f"{c['rescans']} rescans, updated {c['age_s']} s ago" + (f"; {c['note']}" if c["note"] else ""))
    for o in doc["per_ost"]:
        print(f"OST {o['ost']}: {o['objects']} objects, {o['bytes']} bytes")
    return 0
