"""``iez mds``: run the MDS control loop; ``iez mds --status`` prints what a running one reports.

The service binds a ZeroMQ SUB socket the OSS agents connect to, keeps the
live view, stores reports and allocations in the interaction DB, and writes
its counters to a status file every two seconds (``$IEZ_STATE_DIR/mds-status.json``
by default). ``--lustre-params`` says where it reads the MDS node's own Lustre
parameters (pools, ``osp.*`` states, reserved space, qos settings): ``lctl``,
a parameter tree ``DIR[:DIR...]``, saved ``lctl get_param`` text, or ``none``;
by default lctl when it is on PATH, else none.

One MDS is active per interaction DB (:mod:`iez.mds.lease`): at start it claims
the DB's active-MDS record, renews it every ``--interval`` and releases it on a
clean exit. A second ``iez mds`` on the same DB says in one line which one is
active (pid, host, since) and exits 2, or with ``--standby`` waits and takes
over when the active one stops, or misses its heartbeat for 3 lease intervals
(``--lease-interval``, by default half the report interval). A standby binds and
ingests the agents' reports into its own view meanwhile (agents publish to every
MDS endpoint listed), so the takeover places with fresh data.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

from iez.allocate import POLICY_NAMES
from iez.commands.db import add_db_option, db_errors, settings_from

from iez.mds.resources import DEFAULT_DEFER_MAX_S
from iez.model import DEFAULT_FILL_CAP, DEFAULT_OSS_BANDWIDTH, DEFAULT_OST_BANDWIDTH, MiB


def register(subparsers) -> None:
    p = subparsers.add_parser("mds", help="run the MDS control loop (agents -> live view -> allocations)")
    add_db_option(p)
    p.add_argument("--bind", default="tcp://*:5555", help="ZeroMQ endpoint agents connect to (default tcp://*:5555)")
    p.add_argument("--policy", default="iez", choices=POLICY_NAMES, help="the allocator pending files are placed with "
                   "(default iez)")
    p.add_argument("--interval", type=float, default=60.0, metavar="S",
                   help="agents' report interval when their messages do not say (default 60)")
    p.add_argument("--stale-intervals", type=int, default=3, metavar="N",
                   help="missed intervals after which an OSS is stale (default 3)")
    p.add_argument("--cpu-max", type=float, default=70.0, metavar="PCT", help="allocate only below this MDS CPU %% (default 70; 100: no limit)")
    p.add_argument("--defer-max", type=float, default=DEFAULT_DEFER_MAX_S, metavar="S",
                   help="while the node is over --cpu-max/--mem-max, defer allocation at most this long, then "
                        f"allocate anyway (default {DEFAULT_DEFER_MAX_S:g}; 0: never defer)")
    p.add_argument("--ignore-reservations", action="store_true",
                   help="place against measured load only; by default other applications' unexpired reservations "
                        "count as load where they are (jobs allocated seconds apart spread over the OSTs; the cost: "
                        "an allocation never written counts until its reservation expires)")
    p.add_argument("--mem-max", type=float, default=50.0, metavar="PCT", help="allocate only below this MDS memory %% (default 50; 100: no limit)")
    p.add_argument("--fill-cap", type=float, default=DEFAULT_FILL_CAP, metavar="F",
                   help="no OST is pushed past this fill (default 0.95)")
    p.add_argument("--fill-weight", type=float, default=0.0, metavar="W",
                   help="share of a job's I/O time iez may give up to even out fill (default 0: fastest placement, "
                        "fill breaks ties)")
    p.add_argument("--ost-bandwidth", type=float, default=DEFAULT_OST_BANDWIDTH / MiB, metavar="MIB_S",
                   help="an OST's bandwidth until its counters show more (default 200 MiB/s)")
    p.add_argument("--oss-bandwidth", type=float, default=DEFAULT_OSS_BANDWIDTH / MiB, metavar="MIB_S",
                   help="an OSS's bandwidth over all its OSTs (default 600 MiB/s)")
    p.add_argument("--bandwidths", type=Path, metavar="FILE",
                   help="the servers' bandwidths, per OST and per OSS (bandwidth_mib_s of a cluster description, "
                        "JSON or lfs df; nothing else is taken from it, loads included: those are measured)")
    p.add_argument("--oss-load-weight", type=float, default=0.5, metavar="W",
                   help="share of an OSS's bandwidth lost at 100%% reported CPU (default 0.5; 0 ignores CPU)")
    p.add_argument("--curve-secret-key", type=Path, metavar="FILE",
                   help="the MDS's CURVE secret certificate (iez-agent keys DIR mds writes DIR/mds.key_secret); "
                        "required unless --insecure")
    p.add_argument("--curve-authorized", type=Path, metavar="DIR",
                   help="one public certificate per OSS, named OSS_ID.key: a key speaks only for that OSS, and the "
                        "keys are the OSS list (read again when the directory changes); required unless --insecure")
    p.add_argument("--insecure", action="store_true",
                   help="accept unauthenticated reports from anyone who reaches --bind (logged at start, shown in "
                        "the status; key options given too are ignored); for tests and closed networks only")
    p.add_argument("--oss-list", type=Path, metavar="FILE",
                   help="with --insecure: known OSS ids, one per line; messages from others are dropped "
                        "(default: accept all). With keys the key names are the list")
    p.add_argument("--max-skew", type=float, default=300.0, metavar="S",
                   help="drop messages whose time is more than S seconds ahead of the MDS clock (default 300); "
                        "this also bounds how long a forged future message can hold an OSS's reports back")
    p.add_argument("--retain-days", type=float, default=7.0, help="days of statistics kept (default 7)")
    p.add_argument("--series-interval", type=float, default=60.0, metavar="S",
                   help="seconds between an OSS's rows in the stored time series (default 60; 0 keeps every "
                        "message); the live view always uses every message")
    p.add_argument("--lustre-params", metavar="lctl|DIR|FILE|none", action="append",
                   help="where the MDS's Lustre parameters (lod.*.pools.*, osp.*.active, max_create_count, "
                        "reserved_mb_low, lod.*.qos_*) are read: lctl, a parameter tree (DIR[:DIR...], e.g. "
                        "/proc/fs/lustre:/sys/fs/lustre), saved 'lctl get_param' text, or none "
                        "(default: lctl when on PATH, else none). Several MDSs (DNE): give it once per MDS node "
                        "(its tree or saved text); every MDT's pools and osp states are merged: an OST takes new "
                        "stripes only if every MDT may create on it, a pool has the OSTs every MDT lists in it")
    p.add_argument("--lustre-params-interval", type=float, metavar="S",
                   help="seconds between readings of those parameters (default: --interval)")
    p.add_argument("--fsname", metavar="NAME", help="the file system this MDS serves: OSTs of others are refused, "
                                                    "and its parameters are read when the node serves several "
                                                    "(default: learnt from the first accepted OST name, FS-OSTxxxx)")
    p.add_argument("--status-file", type=Path, metavar="FILE", help="default $IEZ_STATE_DIR/mds-status.json")
    p.add_argument("--maps-dir", metavar="DIR", help="where each application's layout map is written after it is "
                   "allocated, as DIR/<app>.cdb (default $IEZ_STATE_DIR/maps; none: not written)")
    p.add_argument("--metrics-bind", default="none", metavar="HOST:PORT|none",
                   help="serve Prometheus metrics (iez.mds.metrics) on http://HOST:PORT/metrics; the shipped "
                        "unit uses 127.0.0.1:9555 (default: none, not served)")
    p.add_argument("--standby", action="store_true",
                   help="when another MDS is active on this DB, stand by (saying so once): bind, ingest the agents' "
                        "reports into this service's own view, store and allocate nothing, and take over when the "
                        "active one stops or misses its heartbeat for 3 lease intervals (default: say which MDS is "
                        "active, exit 2)")
    p.add_argument("--lease-interval", type=float, metavar="S",
                   help="seconds between renewals of the active-MDS lease; it is stale (a standby takes over) after "
                        "3 of them (default: half of --interval, so a standby on another node takes over within "
                        "2 report intervals of the active service's death; on the same node at its next poll)")
    p.add_argument("--status", action="store_true", help="print the status of the running MDS and exit")
    p.add_argument("--json", action="store_true", help="with --status: print the JSON as is")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="least severe log records printed (default info)")
    p.set_defaults(handler=_run)


def _status_file(args, settings) -> Path:
    return args.status_file or Path(settings.state_dir) / "mds-status.json"


@db_errors
def _run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    status_file = _status_file(args, settings)
    if args.status:
        return _print_status(status_file, args.json, settings)
    for name, value, low, high in (("--interval", args.interval, 1.0, 86400.0), ("--cpu-max", args.cpu_max, 0, 100),
                                   ("--mem-max", args.mem_max, 0, 100),
                                   ("--defer-max", args.defer_max, 0, 86400), ("--oss-load-weight", args.oss_load_weight, 0, 1),
                                   ("--fill-cap", args.fill_cap, 0.01, 1), ("--fill-weight", args.fill_weight, 0, 10),
                                   ("--ost-bandwidth", args.ost_bandwidth, 1e-3, 1e9),
                                   ("--oss-bandwidth", args.oss_bandwidth, 1e-3, 1e9),
                                   ("--series-interval", args.series_interval, 0, 86400),
                                   ("--lease-interval", args.lease_interval or 1.0, 0.1, 86400),
                                   ("--lustre-params-interval", args.lustre_params_interval or 1.0, 0.1, 86400)):
        if not low <= value <= high:
            raise ValueError(f"{name} {value} is outside {low}..{high}")
    if args.stale_intervals < 1:
        raise ValueError(f"--stale-intervals {args.stale_intervals} must be at least 1")
    if not 1 <= args.max_skew <= 86400:
        raise ValueError(f"--max-skew {args.max_skew} is outside 1..86400")
    if not args.insecure and not (args.curve_secret_key and args.curve_authorized):
        print("iez mds: refusing to start without CURVE keys: give --curve-secret-key FILE and --curve-authorized DIR "
              "(iez-agent keys DIR NAME makes them), or --insecure to accept reports from anyone", file=sys.stderr)
        return 2
    ignored_keys = args.insecure and (args.curve_secret_key or args.curve_authorized)
    if args.insecure:
        args.curve_secret_key = args.curve_authorized = None  # the explicit choice wins (e.g. IEZ_MDS_ARGS=--insecure)
    if args.oss_list and args.curve_secret_key:
        raise ValueError("--oss-list is for --insecure: with CURVE keys the names in --curve-authorized are the OSS list")
    if args.curve_secret_key:
        from iez.mds.keys import load_server_key, read_keys

        load_server_key(args.curve_secret_key)  # a bad key file or directory is one line, before anything starts
        read_keys(args.curve_authorized)
    allowed = None
    if args.oss_list:
        allowed = frozenset(line.strip() for line in args.oss_list.read_text().splitlines()
                            if line.strip() and not line.startswith("#"))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from iez.db import open_db
    from iez.mds.lustre_params import LustreParamsReader
    from iez.mds.service import MdsConfig, MdsService

    lustre_params = LustreParamsReader.from_option(args.lustre_params, args.fsname)

    engine = open_db(settings)  # never creates: `iez db upgrade` does
    from iez.placement import PlacementSettings

    ost_bandwidths, oss_bandwidths = {}, {}
    if args.bandwidths:
        from iez.sim.description import load_cluster

        described = load_cluster(args.bandwidths)
        ost_bandwidths = {o.index: o.bandwidth for o in described.osts}
        oss_bandwidths = {k: oss.bandwidth for k, oss in described.osses.items()}
    placement = PlacementSettings(args.policy, fill_cap=args.fill_cap, fill_weight=args.fill_weight,
                                  ost_bandwidth=args.ost_bandwidth * MiB, oss_bandwidth=args.oss_bandwidth * MiB,
                                  oss_load_weight=args.oss_load_weight, ost_bandwidths=ost_bandwidths,
                                  oss_bandwidths=oss_bandwidths, fair_share=not args.ignore_reservations)
    config = MdsConfig(bind=args.bind, placement=placement, interval_s=args.interval,
                       stale_intervals=args.stale_intervals, cpu_max=args.cpu_max, mem_max=args.mem_max,
                       defer_max_s=args.defer_max,
                       reservation_ttl_s=settings.reservation_ttl_s,
                       retain=timedelta(days=args.retain_days), allowed_oss=allowed,
                       series_interval_s=args.series_interval,
                       curve_secret_key=args.curve_secret_key, curve_authorized=args.curve_authorized,
                       insecure=args.insecure, max_skew_s=args.max_skew,
                       fsname=args.fsname,
                       status_file=status_file,
                       lustre_params=lustre_params if lustre_params.source else None,
                       lustre_params_interval_s=args.lustre_params_interval,
                       maps_dir=None if args.maps_dir == "none" else Path(args.maps_dir or Path(settings.state_dir) / "maps"))
    # one active MDS per DB: claim its record before reading the view, binding or allocating
    from iez.mds.lease import MdsLease, log_active, start_as_active

    lease_interval = args.lease_interval or args.interval / 2
    lease, stopping = MdsLease(engine, lease_interval, endpoint=args.bind), threading.Event()
    services: list[MdsService] = []

    def _stop(*_) -> None:  # SIGTERM/SIGINT while starting (the service's run() sets its own)
        stopping.set()
        for started in services:
            started.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    mds_log = logging.getLogger("iez.mds")
    holder, said = None, False
    if args.standby:
        holder = lease.claim()
        if holder is not None:
            mds_log.warning("standing by: another MDS is active on this DB: %s; ingesting the agents' reports and "
                            "taking over when it stops or misses its heartbeat for %g s", holder.who(),
                            holder.stale_after_s)
    else:
        code = start_as_active(lease, False, stopping)
        if code is not None:
            return code
        said = True
    if holder is None and not said:
        log_active(lease)
    mds_log.info("Lustre parameters of the MDS from %s", lustre_params.describe())
    if ignored_keys:
        mds_log.warning("--insecure: ignoring --curve-secret-key and --curve-authorized")
    try:
        service = MdsService(engine, config)
        services.append(service)
        if stopping.is_set():
            service.stop()

        def deposed() -> None:  # another MDS took the record over: stop, leaving its status file alone
            service.config.status_file = None
            service._standby_status_file = None
            service.stop()

        service.fence, service.fenced = lease.fence, lambda _err: deposed()

        def heartbeat() -> None:
            lease.start_heartbeat(on_lost=deposed, endpoint=lambda: service.endpoint)

        if holder is None:
            service.lease_generation = lease.generation
            heartbeat()
        else:  # standby: the service ingests into its view while a thread waits for the lease
            service.stand_by()
            first = holder

            def changed(now) -> None:
                if now.owner != first.owner:
                    mds_log.info("standing by: the active MDS is now %s", now.who())

            def wait_for_lease() -> None:
                # read the record 4 times a lease interval (at most every second): a stale lease is claimed
                # within a quarter of a lease interval of going stale
                if lease.wait(service._stop, on_holder=changed, poll_s=min(1.0, lease_interval / 4)):
                    heartbeat()
                    log_active(lease)
                    service.promote(lease.generation)

            threading.Thread(target=wait_for_lease, name="iez-mds-standby", daemon=True).start()
        if args.metrics_bind != "none":
            from iez.mds.metrics import MdsMetrics

            service.metrics = MdsMetrics(service)
            mds_log.info("metrics on http://%s:%d/metrics", *service.metrics.serve(args.metrics_bind))
        code = service.run()
    finally:
        lease.release()  # after the last allocation and the last stored report
    if lease.lost is not None:
        print("iez mds: stopped: another MDS took over the active MDS lease"
              + (f" ({lease.lost.who()})" if lease.lost.held else "") + " while this one's heartbeat was late",
              file=sys.stderr)
        return 1
    return code


def _active_mds(settings) -> tuple[dict | None, str, bool]:
    """The DB's active-MDS record (:mod:`iez.mds.lease`) as JSON and as a phrase, and whether the DB told;
    never fails."""
    try:
        from iez.db import open_db
        from iez.mds.lease import read_holder

        holder = read_holder(open_db(settings))
    except Exception as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        return {"error": reason}, f"active MDS of the DB: unknown ({reason})", False
    if holder is None:
        return None, "active MDS of the DB: none (no MDS has run on this DB)", True
    return holder.to_json(), f"active MDS of the DB: {holder.describe()}", True


def _print_status(path: Path, as_json: bool, settings) -> int:
    try:
        status = json.loads(path.read_text())
    except FileNotFoundError:
        _, active, known = _active_mds(settings)  # e.g. on a standby's node: which one is active
        print(f"iez mds: no status at {path}: is the MDS running with this IEZ_STATE_DIR?"
              + (f"; {active}" if known else ""), file=sys.stderr)
        return 1
    from iez.freshness import mds_running

    if not mds_running(status, time.time()):  # a stopped MDS's last status is not the live one
        when = status.get("time")
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if isinstance(when, (int, float)) else "?"
        record, active, known = _active_mds(settings)
        if as_json:
            print(json.dumps({**status, "running": False, "active_mds": record}, indent=1))
        print(f"iez mds: MDS not running (last status from {stamp}, pid {status.get('pid')}, {path})"
              + (f"; {active}" if known else ""), file=sys.stderr)
        return 1
    record, active, _ = _active_mds(settings)
    if as_json:
        print(json.dumps({**status, "active_mds": record}, indent=1))
        return 0
    m, a = status["messages"], status["allocation"]
    dropped = ", ".join(f"{k} {v}" for k, v in m["dropped"].items() if v) or "none"
    since = status.get("active_since")
    print(f"MDS pid {status['pid']} on {status['endpoint']}, ingest {status.get('ingest', '?')}"
          + (f", file system {status['fsname']}" if status.get("fsname") else "")
          + (f", {status['role']}" if status.get("role") else "")
          + (f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}"
             if isinstance(since, (int, float)) else "")
          + (f" (lease generation {status['lease_generation']})" if status.get("lease_generation") else ""))
    print(f"messages: {m['accepted']} accepted, {m['stored']} stored, dropped: {dropped}")
    print(f"OSS: {len(status['osses']['fresh'])} fresh, stale: {' '.join(status['osses']['stale']) or 'none'}; "
          f"{status['osts']} OSTs")
    print(f"allocation: {a['files']} files in {a['passes']} passes, {a['deferred']} deferred, {a['failed']} failed")
    from iez.commands.status import gate_text

    if gate_text(status.get("gate")):
        print(gate_text(status.get("gate")))
    states = status.get("ost_states") or {}
    print("OST states: " + (", ".join(f"{state} {' '.join(map(str, osts))}" for state, osts in states.items())
                            or "all active"))
    lustre = status.get("lustre") or {}
    if lustre.get("source", "none") != "none":
        pools = ", ".join(f"{name} ({len(members)})" for name, members in (lustre.get("pools") or {}).items())
        qos = " ".join(f"{k}={v}" for k, v in (lustre.get("qos") or {}).items())
        print(f"Lustre parameters from {lustre['source']}: pools {pools or 'none'}; qos {qos or 'unknown'}"
              + (f"; error: {lustre['error']}" if lustre.get("error") else ""))
    print(active)
    return 0
