"""``iez trace``: turn what traced runs wrote into write requests, and store them for allocation.

One sub-action per source of traces; each adds itself through :data:`ACTIONS`.
``parse`` reads the placement library's tracing-mode CSV files;
``import-darshan`` reads a Darshan log (:mod:`iez.trace.darshan`).

Stored requests go through ``upsert_requests`` (the same file again updates
its row), and counts become ``runs`` rows; a run already stored with the same
application, start and end is not stored twice, so parsing a directory again
is harmless. ``--store`` needs a database at the current schema (``iez db
upgrade`` creates one); a missing database is refused, never created.

Each request keeps its file's Lustre policy (:mod:`iez.trace.policy`): the
pool and PFL template, and, for traces, the directory default it was learnt
under (``default_layout``; Darshan cannot tell, so it stays unknown there).
``--out`` writes them as the ``pool`` and ``components`` columns (the
template's JSON text) that ``iez simulate --replay`` and ``iez predict`` read.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from datetime import datetime, timezone
from typing import Callable, Sequence

from sqlalchemy import select

from iez.commands.db import add_db_option, db_errors, settings_from
from iez.config import Settings, describe
from iez.db import open_db
from iez.db.engine import write_transaction
from iez.db.models import Run
from iez.db.owners import login_user
from iez.db.requests import RequestIn, application, upsert_requests
from iez.model import MAX_MIRRORS
from iez.trace.csvformat import REQUEST_COLUMNS, write_requests_csv
from iez.trace.darshan import DarshanImport, read_log
from iez.trace.parse import ParsedRun, Request, RunCounts, TraceDir, parse_dir

#: Columns of ``--out``: what ``iez simulate --replay`` (``load_requests``) reads; ``components`` is the PFL
#: template's JSON text (empty for none).


def register(subparsers) -> None:
    parser = subparsers.add_parser("trace", help="turn traces of application runs into write requests")
    actions = parser.add_subparsers(dest="trace_action", metavar="ACTION", required=True)
    for add in ACTIONS:
        add(actions)


def _add_parse(actions) -> None:
    p = actions.add_parser(
        "parse", help="merge the tracing-mode CSV files of a directory into one write request per file",
        description="Read every iez-trace.*.csv and iez-counts.*.csv in DIR, merge the rows of one job into "
        "one write request per file (rank -1 for a file several ranks wrote) and print them.")
    p.add_argument("dir", metavar="DIR", help="the IEZ_TRACE_DIR of the traced run(s)")
    p.add_argument("--json", action="store_true", help="print a JSON list of {file, write_bytes, stripe_count, "
                   "stripe_size, rank, pool, components, default_layout}")
    p.add_argument("--out", metavar="FILE.csv", help=f"also write the requests as CSV ({','.join(REQUEST_COLUMNS)})")
    p.add_argument("--job", metavar="ID", help="the job to read when DIR holds several ('' for rows without one)")
    p.add_argument("--keep-empty", action="store_true", help="keep files nothing was written to")
    p.add_argument("--store", action="store_true", help="store the requests (source traced) and the runs in the DB")
    p.add_argument("--app", metavar="NAME", help="application to store under (default: the app column, "
                   "when it has one value)")
    p.add_argument("--mirror-count", type=int, metavar="N",
                   help="the application's policy: every file gets N copies (1 to 4; FLR mirrors, each in its own "
                   "failure domains), whatever its traced layout had")
    add_db_option(p)
    p.set_defaults(handler=_parse)


def _add_import_darshan(actions) -> None:
    p = actions.add_parser(
        "import-darshan", help="turn a Darshan log into one write request per file written",
        description="Read the POSIX, MPI-IO, STDIO, H5F and LUSTRE records of a Darshan log and print one "
        "write request per file written (rank -1 for a file several ranks wrote; stripe size, count, OSTs, "
        "pool and PFL template from the LUSTRE records when the log has them).")
    p.add_argument("log", metavar="LOG", help="a Darshan log (.darshan)")
    p.add_argument("--json", action="store_true", help="print a JSON list of {file, write_bytes, stripe_count, "
                   "stripe_size, rank, ost_ids, pool, components}")
    p.add_argument("--out", metavar="FILE.csv", help=f"also write the requests as CSV ({','.join(REQUEST_COLUMNS)}), "
                   "replayable with iez simulate --replay")
    p.add_argument("--keep-read", action="store_true", help="keep files nothing was written to (only read or "
                   "opened), with write_bytes 0")
    p.add_argument("--store", action="store_true", help="store the requests (source darshan) in the DB")
    p.add_argument("--app", metavar="NAME", help="application to store the requests under (needed with --store)")
    add_db_option(p)
    p.set_defaults(handler=_import_darshan)


def _add_synth(actions) -> None:
    from iez.predict.synth import WORKLOADS

    p = actions.add_parser(
        "synth", help="write synthetic traces of IOR or HACC-IO runs (FPP or SSF) in the tracing-mode CSV format",
        description="Write K runs of a synthetic workload with the paper's sizes into OUT/run-0001, "
        "OUT/run-0002, ...: one iez-trace.*.csv per rank, the job column holding the run's name "
        "(iez.predict.synth says how the sizes and names are made).")
    p.add_argument("--workload", required=True, choices=WORKLOADS, help="the application pattern traced")
    p.add_argument("--ranks", type=int, required=True, metavar="N", help="MPI processes")
    p.add_argument("--runs", type=int, default=5, metavar="K", help="runs to write (default 5)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write the runs into")
    p.add_argument("--stripe-count", type=int, default=8, metavar="C", help="stripe count of every file (default 8)")
    p.add_argument("--noise", type=float, default=0.0, metavar="FRACTION",
                   help="multiply each file's size by 1 + N(0, FRACTION) (default 0: exact sizes)")
    p.add_argument("--seed", type=int, default=0, help="seed of the noise (default 0)")
    p.add_argument("--dir", metavar="PATH", help="directory the application writes into (default "
                   "/lustre/scratch/ior or /lustre/scratch/hacc-io)")
    p.add_argument("--per-run-names", action="store_true", help="each run writes below its own runNNNN/")
    p.add_argument("--block-size", type=int, metavar="BYTES", help="IOR bytes per rank (default min(2 GiB, 64 GiB/N))")
    p.add_argument("--particles", type=int, metavar="N", help="HACC-IO particles per rank (default 20,480,000)")
    p.add_argument("--app", metavar="NAME", help="the app column (default ior or hacc-io)")
    p.set_defaults(handler=_synth)


def _synth(args: argparse.Namespace) -> int:
    from iez.predict.synth import SynthSpec, write_runs

    spec = SynthSpec(args.workload, args.ranks, args.runs, args.stripe_count, args.noise, args.seed, args.dir,
                     args.per_run_names, block_size=args.block_size, particles=args.particles, app=args.app)
    runs = write_runs(spec, args.out)
    print(f"wrote {len(runs)} runs of {args.workload} with {args.ranks} ranks into {args.out}")
    return 0


#: Sub-actions of ``iez trace``, each ``add(actions)``.
ACTIONS: Sequence[Callable] = (_add_parse, _add_import_darshan, _add_synth)


def app_name(given: str | None, apps: Sequence[str]) -> str:
    """``--app`` or the one application the rows name."""
    if given:
        return given
    named = [a for a in apps if a]
    if len(named) == 1 and len(apps) == 1:
        return named[0]
    if not named:
        raise ValueError("the traces name no application: give --app NAME")
    raise ValueError(f"the traces name {len(apps)} applications ({', '.join(repr(a) for a in apps)}): "
                     "give --app NAME")


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc).replace(tzinfo=None)


def store(settings: Settings, app: str, requests: Sequence[Request], runs: Sequence[RunCounts],
          source: str = "traced") -> dict:
    """Store ``requests`` (with their pool, template and learnt directory default) and ``runs`` for ``app``
    in one transaction; what was stored."""
    engine = open_db(settings)
    owner = login_user()

    def body(session) -> tuple[list[int], int]:  # may run twice (write_transaction): DB work only
        new_runs = 0
        ids = upsert_requests(session, app, [
            RequestIn.learnt(r.file, r, source, r.stripe_size) for r in requests], owner=owner)
        app_id = application(session, app, create=True, owner=owner).id
        for run in runs:
            started, ended = _utc(run.started), _utc(run.ended)
            if session.scalar(select(Run.id).where(Run.app_id == app_id, Run.started == started,
                                                   Run.ended == ended)) is not None:
                continue
            session.add(Run(app_id=app_id, started=started, ended=ended,
                            files_found=run.hits, files_missed=run.misses, files_skipped=run.skips))
            new_runs += 1
        return ids, new_runs

    ids, new_runs = write_transaction(engine, body)
    return {"db": describe(settings.db_url), "app": app, "requests": len(ids), "runs": new_runs,
            "runs_already_stored": len(runs) - new_runs}


def _parse_app(directory: str, job: str | None, keep_empty: bool, app: str | None) -> ParsedRun:
    """:func:`parse_dir`; when the rows name several applications and ``app`` is one of them, only its rows
    (so a trace directory two applications of one job share never stores one's files as the other's); another
    name stores every row under it, as chosen."""
    if app is None:
        return parse_dir(directory, job=job, keep_empty=keep_empty)
    traces = TraceDir(directory)
    apps = {r.app for r in traces.rows} | {c.app for c in traces.counts}
    if len(apps) > 1 and app in apps:
        traces.rows = [r for r in traces.rows if r.app == app]
        traces.counts = [c for c in traces.counts if c.app == app]
    return traces.run(job, keep_empty)


@db_errors
def _parse(args: argparse.Namespace) -> int:
    if not args.store and (args.db or args.app):
        raise ValueError("--db and --app only apply with --store")
    parsed = _parse_app(args.dir, args.job, args.keep_empty, args.app if args.store else None)
    if args.mirror_count is not None:
        if not 1 <= args.mirror_count <= MAX_MIRRORS:
            raise ValueError(f"--mirror-count {args.mirror_count}: give 1 to {MAX_MIRRORS} copies")
        parsed = dataclasses.replace(parsed, requests=[dataclasses.replace(r, mirror_count=args.mirror_count)
                                                       for r in parsed.requests])
    stored = store(settings_from(args), app_name(args.app, parsed.apps), parsed.requests, parsed.runs) \
        if args.store else None
    if args.out:
        write_requests_csv(args.out, parsed.requests)
    if args.json:
        print(json.dumps([r.to_dict() for r in parsed.requests]))
    else:
        _print_table(parsed)
    if stored:
        print(f"stored {stored['requests']} requests and {stored['runs']} runs "
              f"({stored['runs_already_stored']} already there) for {stored['app']!r} in {stored['db']}",
              file=sys.stderr if args.json else sys.stdout)
    return 0


@db_errors
def _import_darshan(args: argparse.Namespace) -> int:
    if not args.store and (args.db or args.app):
        raise ValueError("--db and --app only apply with --store")
    if args.store and not args.app:
        raise ValueError("--store needs --app NAME")
    imported = read_log(args.log, keep_read=args.keep_read)
    stored = store(settings_from(args), args.app, imported.requests, [], source="darshan") if args.store else None
    if args.out:
        write_requests_csv(args.out, imported.requests)
    note = sys.stderr if args.json else sys.stdout
    if args.json:
        print(json.dumps([r.to_dict() for r in imported.requests]))
    else:
        _print_darshan_table(imported)
    if imported.partial_modules:
        print(f"note: the log's {', '.join(imported.partial_modules)} module ran out of record memory while "
              "the job ran: some files may be missing", file=note)
    if stored:
        print(f"stored {stored['requests']} requests for {stored['app']!r} in {stored['db']}", file=note)
    return 0


def _print_darshan_table(imported: DarshanImport) -> None:
    kept = "files" if any(r.write_bytes == 0 for r in imported.requests) else "write requests"
    print(f"{len(imported.requests)} {kept} in {imported.path} ({imported.nprocs} processes, job "
          f"{imported.jobid}; modules: {', '.join(imported.modules) or 'none'})")
    if imported.requests:
        print(f"{'rank':>6} {'write_bytes':>16} {'stripes':>7} {'stripe_size':>12}  {'osts':<16} {'pool':<8} "
              f"{'comps':<5} file")
        for r in imported.requests:
            size = "-" if r.stripe_size is None else str(r.stripe_size)
            osts = "-" if r.ost_ids is None else ",".join(map(str, r.ost_ids))
            osts = osts if len(osts) <= 16 else osts[:13] + "..."
            pfl = str(len(r.components)) if r.components else "-"
            print(f"{r.rank:>6} {r.write_bytes:>16} {r.stripe_count:>7} {size:>12}  {osts:<16} {r.pool or '-':<8} "
                  f"{pfl:<5} {r.file}")


def _print_table(parsed: ParsedRun) -> None:
    job = f"job {parsed.job!r}" if parsed.job else "no job id"
    print(f"{len(parsed.requests)} write requests ({job}; apps: {', '.join(parsed.apps) or 'none'})")
    if parsed.requests:
        print(f"{'rank':>6} {'write_bytes':>16} {'stripes':>7} {'stripe_size':>12}  {'pool':<8} {'comps':<5} file")
        for r in parsed.requests:
            size = "-" if r.stripe_size is None else str(r.stripe_size)
            pfl = str(len(r.components)) if r.components else "-"
            print(f"{r.rank:>6} {r.write_bytes:>16} {r.stripe_count:>7} {size:>12}  {r.pool or '-':<8} {pfl:<5} "
                  f"{r.file}")
    for run in parsed.runs:
        print(f"run of {run.app!r}: {run.processes} processes, {run.hits} hits, {run.misses} misses, "
              f"{run.errors} errors, {run.skips} skips")
