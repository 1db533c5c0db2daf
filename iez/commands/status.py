"""``iez status``: the live view of the cluster from the interaction DB.

    iez status [--db DB] [--json] [--stale-intervals N] [--status-file FILE] [--watch S]

Per OST its OSS, state (the most restrictive of what its OSS and the MDS say),
pools, size, free space, Lustre's reserved space, fill and load; per OSS
whether it is fresh (:mod:`iez.freshness`, the MDS's and the API's rule) and how
old its last report is; and the MDS's qos settings (``lod.*.qos_*``) when a
running MDS has read them (its status file); what the balancing service does
(``iez balance``'s status file: per pool idle/moving/paused and why, bytes left,
ETA). ``--json`` prints one object: ``osts``, ``oss``, ``qos`` (null when
unknown), ``balance`` (null when no service has written one), ``time``. On a terminal the view
is a rich table; piped, plain columns; ``--watch S`` redraws it every S seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from iez.commands.db import add_db_option, db_errors, settings_from
from iez.rebalance.status import FILE as BALANCE_FILE
from iez.rebalance.status import read as read_balance
from iez.rebalance.status import text as balance_text


def register(subparsers) -> None:
    p = subparsers.add_parser("status", help="the live view: OST states, pools, space and load; OSS freshness")
    add_db_option(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--stale-intervals", type=int, default=3, metavar="N",
                   help="an OSS is stale after N of its own report intervals without a report (default 3, as "
                        "iez mds and the API); IEZ_OSS_STALE_S (default 180 s) when its reports give no interval")
    p.add_argument("--status-file", type=Path, metavar="FILE",
                   help="the MDS's status file, for its qos settings (default $IEZ_STATE_DIR/mds-status.json)")
    p.add_argument("--balance-status-file", type=Path, metavar="FILE",
                   help="the balancing service's status file (default $IEZ_STATE_DIR/balance-status.json)")
    p.add_argument("--watch", type=float, metavar="S",
                   help="redraw the view every S seconds until interrupted (default: print once)")
    p.set_defaults(handler=_run)


def mds_status(path: Path) -> dict:
    """The running MDS's status file, read once per view; {} without one (or while it is being replaced)."""
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return status if isinstance(status, dict) else {}


def mds_qos(status: dict) -> dict | None:
    """The qos settings a running MDS last read (None when it has not, or there is no status file)."""
    lustre = status.get("lustre")
    qos = lustre.get("qos") if isinstance(lustre, dict) else None
    return dict(qos) if qos else None


def mds_jobs(status: dict) -> dict | None:
    """The jobs driving each OST and OSS, as the running MDS last wrote them (its ``job_stats`` view,
    :mod:`iez.mds.jobs`); None without a status file or when the MDS keeps none."""
    jobs = status.get("jobs")
    return jobs if isinstance(jobs, dict) else None


def mds_gate(status: dict) -> dict | None:
    """The running MDS's CPU/memory allocation gate (``state`` open, deferring or forced; ``deferring_s``,
    ``defer_max_s``, ``reason``), as it last wrote it; None without a status file."""
    gate = status.get("gate")
    return gate if isinstance(gate, dict) else None


def gate_text(gate: dict | None) -> str:
    """'' while allocation runs freely; else one line saying allocation is held back (or forced) and why."""
    if not gate or gate.get("state") in (None, "open"):
        return ""
    waited = gate.get("deferring_s") or 0
    if gate["state"] == "forced":
        return (f"allocation gate: node over its limit for {waited:.0f} s ({gate.get('reason')}); allocating anyway "
                f"after {gate.get('defer_max_s', 0):g} s (--defer-max)")
    return (f"allocation gate: DEFERRING for {waited:.0f} s of at most {gate.get('defer_max_s', 0):g} s "
            f"(--defer-max): {gate.get('reason')}")


def attach_jobs(view: dict, jobs: dict | None) -> None:
    """Each OST of ``view`` gets ``jobs`` (its top jobs, bytes/s; [] when none is known) and the view
    ``jobs_per_oss``."""
    per_ost = (jobs or {}).get("osts") or {}
    for ost in view.get("osts", []):
        ost["jobs"] = per_ost.get(str(ost["index"]), [])
    view["jobs_per_oss"] = (jobs or {}).get("oss") or {}


def movements_in_flight(state_dir: Path) -> list[dict]:
    """Background movements queued or running (iez copy --background; iez.move.staging), with their progress."""
    from iez.move.staging import movements

    try:
        return [m.to_json() for m in movements(state_dir, active_only=True)]
    except Exception as err:  # noqa: BLE001 - a broken journal must not hide the cluster's status
        return [{"error": f"staging journal unreadable: {err}"}]


def active_mds(engine) -> dict:
    """The DB's active-MDS record (:mod:`iez.mds.lease`): ``active``, ``since`` (epoch s), ``generation``, who."""
    from iez.mds.lease import read_holder

    holder = read_holder(engine)
    if holder is None:
        return {"active": False, "since": None, "generation": 0}
    return holder.to_json()


@db_errors
def _run(args: argparse.Namespace) -> int:
    if args.stale_intervals < 1:
        raise ValueError(f"--stale-intervals {args.stale_intervals} must be at least 1")
    if args.watch is not None and not 0.1 <= args.watch <= 3600:
        raise ValueError(f"--watch {args.watch} is outside 0.1..3600 seconds")
    settings = settings_from(args)
    from iez.db import open_db
    from iez.db.engine import read
    from iez.db.models import utcnow
    from iez.db.stats import live_view

    engine = open_db(settings)  # never creates: a missing DB is one line naming `iez db upgrade`
    status_file = args.status_file or Path(settings.state_dir) / "mds-status.json"
    balance_file = args.balance_status_file or Path(settings.state_dir) / BALANCE_FILE

    def snapshot() -> dict:
        view = read(engine, lambda conn: live_view(conn, utcnow(), settings.oss_stale_s, args.stale_intervals))
        status = mds_status(status_file)
        view["qos"] = mds_qos(status)
        view["allocation_gate"] = mds_gate(status)
        attach_jobs(view, mds_jobs(status))
        view["movements"] = movements_in_flight(Path(settings.state_dir))
        view["mds"] = active_mds(engine)
        view["balance"] = read_balance(balance_file)
        view["time"] = round(time.time(), 3)
        return view

    try:
        if args.watch is not None:
            return _watch(snapshot, args.watch, args.json)
        view = snapshot()
    finally:
        engine.dispose()
    if args.json:
        print(json.dumps(view, indent=1))
    elif sys.stdout.isatty():
        from rich.console import Console

        Console().print(*render(view))
    else:
        _print_table(view, sys.stdout)
    return 0


def _watch(snapshot, every_s: float, as_json: bool) -> int:
    """Redraw until interrupted (Ctrl-C ends it with 0): rich's live display on a terminal, else one view per
    period (JSON: one object a line, for a pipe)."""
    try:
        if as_json or not sys.stdout.isatty():
            while True:
                view = snapshot()
                if as_json:
                    print(json.dumps(view), flush=True)
                else:
                    _print_table(view, sys.stdout)
                    print(flush=True)
                time.sleep(every_s)
        from rich.console import Group
        from rich.live import Live

        with Live(Group(*render(snapshot())), auto_refresh=False) as live:
            while True:
                time.sleep(every_s)
                live.update(Group(*render(snapshot())), refresh=True)
    except KeyboardInterrupt:
        return 0


def render(view: dict) -> list:
    """The view as rich renderables: an OSS table, an OST table (stale OSSs and non-active OSTs in colour)."""
    from rich.table import Table
    from rich.text import Text

    if not view["oss"] and not view["osts"]:
        return [Text("no OSS has reported yet (start the agents and iez mds, or POST /v1/stats)")]
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(view.get("time") or time.time()))
    oss = Table(title=f"OSS ({stamp})", title_justify="left")
    for name in ("OSS", "fresh", "age", "interval", "OSTs", "CPU", "mem"):
        oss.add_column(name, justify="left" if name in ("OSS", "fresh") else "right")
    for o in view["oss"]:
        interval = f"{o['interval_s']:.0f}s" if o.get("interval_s") else "-"
        oss.add_row(o["id"], Text("yes", "green") if o["fresh"] else Text("NO", "bold red"), f"{o['age_s']:.1f}s",
                    interval, str(o["osts"]), f"{o.get('cpu_pct') or 0:.0f}%", f"{o.get('mem_pct') or 0:.0f}%")
    fresh = {o["id"]: o["fresh"] for o in view["oss"]}
    osts = Table(title="OST", title_justify="left")
    for name in ("OST", "OSS", "state", "size GiB", "avail GiB", "resv GiB", "fill", "MiB/s", "pools"):
        osts.add_column(name, justify="left" if name in ("OSS", "state", "pools") else "right")
    gib = 1024 * 1024
    for o in view["osts"]:
        style = "" if o["state"] == "active" else "yellow"
        osts.add_row(str(o["index"]), Text(o["oss"], "" if fresh.get(o["oss"], False) else "red"),
                     Text(o["state"], style), f"{o['kbytes_total'] / gib:.1f}", f"{o['kbytes_avail'] / gib:.1f}",
                     f"{o['reserved_kbytes'] / gib:.2f}", Text(f"{o['fill']:.1%}", "red" if o["fill"] >= 0.9 else ""),
                     f"{o['load_mib_s']:.1f}", " ".join(o["pools"]) or "-")
    out: list[Table | Text] = [oss, osts]
    jobs = jobs_text(view)
    if jobs:
        out.append(Text(jobs))
    if view.get("movements"):
        out.append(Text(movements_text(view["movements"])))
    if view.get("balance"):
        out.append(Text(balance_text(view["balance"])))
    if view.get("qos"):
        out.append(Text("MDS qos settings: " + ", ".join(f"{k} {v}" for k, v in view["qos"].items())))
    if view.get("mds"):
        out.append(Text(active_mds_text(view["mds"])))
    if gate_text(view.get("allocation_gate")):
        out.append(Text(gate_text(view.get("allocation_gate")), "bold yellow"))
    return out


def active_mds_text(mds: dict) -> str:
    """'active MDS: pid 4242 on mds1 (tcp://*:5555) since 2026-11-26 14:00:01, lease generation 3'"""
    if mds.get("error"):
        return f"active MDS: unknown ({mds['error']})"
    if not mds.get("active"):
        return f"active MDS: none (lease generation {mds.get('generation', 0)})"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mds["since"])) if mds.get("since") else "?"
    where = f" ({mds['endpoint']})" if mds.get("endpoint") else ""
    return (f"active MDS: pid {mds.get('pid')} on {mds.get('host')}{where} since {since}, "
            f"lease generation {mds.get('generation')}")


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
    jobs = jobs_text(view)
    if jobs:
        print(file=out)
        print(jobs, file=out)
    if view.get("movements"):
        print(file=out)
        print(movements_text(view["movements"]), file=out)
    if view.get("balance"):
        print(file=out)
        print(balance_text(view["balance"]), file=out)
    qos = view.get("qos")
    if qos:
        print(file=out)
        print("MDS qos settings: " + ", ".join(f"{key} {value}" for key, value in qos.items()), file=out)
    if gate_text(view.get("allocation_gate")):
        print(file=out)
        print(gate_text(view.get("allocation_gate")), file=out)


#: Jobs named per OST in the text view (the JSON has the MDS's top 5).
TEXT_JOBS = 3


def jobs_text(view: dict) -> str:
    """Which jobs drive each OST that has any (Lustre's job_stats, as the MDS ranks them), busiest OST first:
    ``OST 3 (412.0 MiB/s): 81234 300.1 MiB/s (5120.0 MiB in all), ...``; '' when no job is known."""
    mib = 1 << 20
    rows = sorted(((o["load_mib_s"], o["index"], o["jobs"]) for o in view["osts"] if o.get("jobs")), reverse=True)
    if not rows:
        return ""
    lines = ["Jobs driving each OST (job_stats, bytes/s read + written):"]
    for load, index, jobs in rows:
        named = ", ".join(f"{j['job_id']} {j['bytes_s'] / mib:.1f} MiB/s "
                          f"({(j['read_bytes'] + j['write_bytes']) / mib:.1f} MiB in all)" for j in jobs[:TEXT_JOBS])
        more = f" (+{len(jobs) - TEXT_JOBS} more)" if len(jobs) > TEXT_JOBS else ""
        lines.append(f"  OST {index} ({load:.1f} MiB/s): {named}{more}")
    return "\n".join(lines)


def movements_text(moves: list[dict]) -> str:
    from iez.commands.stage import table

    broken = [m["error"] for m in moves if "error" in m]
    if broken:
        return broken[0]
    return "Movements in flight (iez copy --background):\n" + table(moves)
