"""``iez status``: the live view of the cluster from the interaction DB.

    iez status [--db DB] [--json] [--stale-intervals N] [--status-file FILE]

Per OST its OSS, state (the most restrictive of what its OSS and the MDS say),
pools, size, free space, Lustre's reserved space, fill and load; per OSS
whether it is fresh and how old its last report is; and the MDS's qos settings
(``lod.*.qos_*``) when a running MDS has read them (its status file). ``--json``
prints one object: ``osts``, ``oss``, ``qos`` (null when unknown), ``time``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from iez.commands.db import add_db_option, db_errors, settings_from


def register(subparsers) -> None:
    p = subparsers.add_parser("status", help="the live view: OST states, pools, space and load; OSS freshness")
    add_db_option(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--stale-intervals", type=int, default=3, metavar="N",
                   help="an OSS is stale after N of its own report intervals without a report (default 3, as "
                        "iez mds); IEZ_OSS_STALE_S when its reports give no interval")
    p.add_argument("--status-file", type=Path, metavar="FILE",
                   help="the MDS's status file, for its qos settings (default $IEZ_STATE_DIR/mds-status.json)")
    p.set_defaults(handler=_run)


def mds_qos(path: Path) -> dict | None:
    """The qos settings a running MDS last read (None when it has not, or there is no status file)."""
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    lustre = status.get("lustre") if isinstance(status, dict) else None
    qos = lustre.get("qos") if isinstance(lustre, dict) else None
    return dict(qos) if qos else None


@db_errors
def _run(args: argparse.Namespace) -> int:
    if args.stale_intervals < 1:
        raise ValueError(f"--stale-intervals {args.stale_intervals} must be at least 1")
    settings = settings_from(args)
    from iez.db import open_db
    from iez.db.engine import read
    from iez.db.models import utcnow
    from iez.db.stats import live_view

    engine = open_db(settings)  # never creates: a missing DB is one line naming `iez db upgrade`
    try:
        view = read(engine, lambda conn: live_view(conn, utcnow(), settings.oss_stale_s, args.stale_intervals))
    finally:
        engine.dispose()
    view["qos"] = mds_qos(args.status_file or Path(settings.state_dir) / "mds-status.json")
    view["time"] = round(time.time(), 3)
    if args.json:
        print(json.dumps(view, indent=1))
        return 0
    _print_table(view, sys.stdout)
    return 0


def _print_table(view: dict, out) -> None:
    if not view["oss"] and not view["osts"]:
        print("no OSS has reported yet (start the agents and iez mds, or POST /v1/stats)", file=out)
        return
    print(f"{'OSS':<16} {'fresh':<6} {'age':>9} {'OSTs':>5}", file=out)
    for oss in view["oss"]:
        print(f"{oss['id']:<16} {'yes' if oss['fresh'] else 'NO':<6} {oss['age_s']:>8.1f}s {oss['osts']:>5}", file=out)
    print(file=out)
    print(f"{'OST':>5} {'OSS':<12} {'state':<9} {'size GiB':>9} {'avail GiB':>10} {'resv GiB':>9} {'fill':>6} "
          f"{'MiB/s':>8}  pools", file=out)
    gib = 1024 * 1024
    for ost in view["osts"]:
        print(f"{ost['index']:>5} {ost['oss']:<12} {ost['state']:<9} {ost['kbytes_total'] / gib:>9.1f} "
              f"{ost['kbytes_avail'] / gib:>10.1f} {ost['reserved_kbytes'] / gib:>9.2f} {ost['fill']:>6.1%} "
              f"{ost['load_mib_s']:>8.1f}  {' '.join(ost['pools']) or '-'}", file=out)
    qos = view.get("qos")
    if qos:
        print(file=out)
        print("MDS qos settings: " + ", ".join(f"{key} {value}" for key, value in qos.items()), file=out)
