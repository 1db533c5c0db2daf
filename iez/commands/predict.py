"""``iez predict``, ``iez learn`` and ``iez run``: the learning phase (paper III-A2) from the command line.

- ``iez predict DIR_OR_FILE``: ARIMA orders, accuracy on the held-out last
  run, and the next run's predicted requests (:mod:`iez.predict`);
- ``iez learn APP --trace DIR_OR_LOG``: the same, stored as APP's requests
  for the MDS to allocate; ``iez learn APP --status``: whether APP's next run
  will be traced again (its latest run missed more than the threshold);
- ``iez run APP -- CMD ...``: CMD under the preload library, traced (and
  learnt from) when APP needs it, placed otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from iez.commands.db import add_db_option, db_errors, settings_from
from iez.db import open_db
from iez.predict.aipa import SELECTIONS, Prediction, predict
from iez.predict.arima import MAX_ORDER, Fitter
from iez.predict.learn import (
    DEFAULT_MISS_RATE,
    RETRACE_ENV,
    flag,
    load_trace,
    post_learning,
    record_learning,
    run_app,
    status,
)
from iez.trace.csvformat import write_requests_csv


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "predict", help="forecast an application's next run (ARIMA, AIPA) from traces of its runs",
        description="Read the runs at DIR_OR_FILE, forecast the held-out last run from the runs before it "
        "(accuracy per variable) and the next run from all of them (the predicted requests).")
    p.add_argument("path", metavar="DIR_OR_FILE", help="a directory of runs (run-* subdirectories of tracing-mode "
                   "CSV files, or one directory whose rows carry several job ids), or a requests CSV/JSON with a "
                   "run column")
    _add_model_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object: orders, accuracy, requests, ...")
    p.add_argument("--out", metavar="FILE.csv", help="also write the predicted requests as CSV "
                   "(file,write_bytes,stripe_count,rank,pool,components; components is the PFL template's JSON "
                   "text), replayable with iez simulate --replay")
    p.set_defaults(handler=_predict)

    p = subparsers.add_parser(
        "learn", help="store an application's predicted requests for the MDS, or show its re-trace flag",
        description="Predict APP's next run from the traces at --trace and store the requests (source "
        "predicted) so that the MDS allocates them; with --status, say whether APP is flagged for re-tracing "
        f"(its latest run missed more than {DEFAULT_MISS_RATE:.0%} of its files, or ${RETRACE_ENV}).")
    p.add_argument("app", metavar="APP", nargs="?", help="application name (as the library records it: IEZ_APP)")
    p.add_argument("--darshan-dir", metavar="DIR", help="instead of APP: import the new Darshan logs of a site's "
                   "log tree (DIR/YYYY/M/D/...), group them by application and user, predict each group's next "
                   "run and store it as APP <exe>.<user> (docs/scheduler.md); never reads a log twice")
    p.add_argument("--watch", type=float, nargs="?", const=60.0, metavar="S",
                   help="with --darshan-dir: keep importing, a pass every S seconds (default 60)")
    p.add_argument("--darshan-state", metavar="FILE", help="with --darshan-dir: the state of imported logs "
                   "(default $IEZ_STATE_DIR/darshan-imports.sqlite)")
    p.add_argument("--trace", metavar="DIR_OR_LOG", help="traces of APP's runs: as for iez predict, or a Darshan log; "
                   "of tracing-mode files only the rows of APP are read")
    p.add_argument("--trace-app", metavar="NAME", help="read the traced rows of NAME instead of APP's (traces made "
                   "without IEZ_APP carry the program's name)")
    p.add_argument("--status", action="store_true", help="print APP's re-trace flag, latest run and predictions")
    p.add_argument("--retrace", action="store_true", help="flag APP so that its next iez run is traced")
    p.add_argument("--allocate", metavar="POLICY", help="also allocate the stored requests now with POLICY "
                   "(e.g. iez), without waiting for the MDS")
    p.add_argument("--api", metavar="URL", help="store the requests through the REST API at URL, as the user the "
                   "environment authenticates (MUNGE or a token, as iez map fetch), instead of in the DB: how a "
                   "compute node learns a job at its end (the SPANK plugin); --allocate then asks the API to "
                   "allocate them")
    p.add_argument("--keep-old", action="store_true", help="keep APP's earlier predicted requests that this "
                   "prediction does not name")
    _add_model_options(p)
    _add_threshold(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_db_option(p)
    p.set_defaults(handler=_learn)

    p = subparsers.add_parser(
        "run", help="run a command under the placement library: traced and learnt when needed, else placed",
        description="Run CMD with LD_PRELOAD=libiez.so. When APP is flagged for re-tracing or has no predictions, "
        "in tracing mode, then learn from the traces (iez learn) by itself; otherwise in placement mode, then "
        "store the run's counts and flag APP when it missed too many files.")
    p.add_argument("app", metavar="APP", help="application name (IEZ_APP for the library)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]",
                   help="the command to run, after -- (options of iez run may come before APP or before --)")
    _add_run_options(p)
    p.set_defaults(handler=_run)


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", action="store_true", help="trace this run whatever the flag says")
    p.add_argument("--output", action="append", default=[], metavar="DIR",
                   help="a directory the job writes to, whose file system is traced and placed besides the working "
                   "directory's (repeatable; /tmp, /dev/shm, /run and $XDG_RUNTIME_DIR never are; IEZ_INCLUDE, "
                   "when set, names them instead)")
    p.add_argument("--preload", metavar="LIB", help="libiez.so (default: $IEZ_PRELOAD_LIB, else "
                   "placement_lib/build/libiez.so of this checkout)")
    p.add_argument("--allocate", metavar="POLICY", help="after learning, allocate the requests now with POLICY")
    p.add_argument("--selection", choices=SELECTIONS, default="fast", help="ARIMA order selection (default fast)")
    _add_threshold(p)
    add_db_option(p)


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--selection", choices=SELECTIONS, default="fast",
                   help="ARIMA order selection: fast (stepwise, KPSS for d) or grid (every p, d, q in 0..5, the "
                   "paper's); default fast")
    p.add_argument("--max-order", type=int, default=MAX_ORDER, metavar="N", help="largest p, d, q (default 5)")
    p.add_argument("--workers", type=int, metavar="N", help="processes fitting in parallel (default min(cpus, 4))")
    p.add_argument("--no-progress", action="store_true", help="no progress display, even on a terminal")


def _add_threshold(p: argparse.ArgumentParser) -> None:
    p.add_argument("--retrace-miss-rate", type=float, metavar="RATE",
                   help=f"re-trace when a run misses more than RATE of its files (default ${RETRACE_ENV}, else "
                   f"{DEFAULT_MISS_RATE})")


class RichProgress:
    """Fits done, on stderr, while a selection runs (only on a terminal)."""

    def __init__(self):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, \
            TimeElapsedColumn

        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  console=Console(stderr=True), transient=True)
        self._task = None

    def begin(self, label: str, total: int | None) -> None:
        if self._task is None:
            self._progress.start()
        else:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(label, total=total)

    def advance(self, n: int = 1) -> None:
        if self._task is not None:
            self._progress.advance(self._task, n)

    def end(self) -> None:
        pass

    def close(self) -> None:
        if self._task is not None:
            self._progress.stop()
            self._task = None


def _run_prediction(args, runs) -> Prediction:
    if args.max_order < 0 or args.max_order > 10:
        raise ValueError(f"--max-order must be 0 to 10, got {args.max_order}")
    show = not args.no_progress and sys.stderr.isatty()
    progress = RichProgress() if show else None
    fitter = Fitter(args.workers, progress.advance if progress else None)
    if progress:
        fitter.start()  # worker processes exist before the display's thread does
    try:
        return predict(runs, args.selection, max_order=args.max_order, progress=progress, fitter=fitter)
    finally:
        fitter.close()
        if progress:
            progress.close()


def _predict(args: argparse.Namespace) -> int:
    prediction = _run_prediction(args, load_trace(args.path))
    if args.out:
        write_requests_csv(args.out, prediction.named_requests)
    if args.json:
        print(json.dumps(prediction.to_dict()))
    else:
        _print_prediction(prediction)
    return 0


def _print_prediction(prediction: Prediction) -> None:
    data = prediction.to_dict()
    print(f"{data['runs']} runs ({', '.join(data['run_ids'][:3])}{', ...' if data['runs'] > 3 else ''}); "
          f"{data['selection']} selection; {data['fit_stats']['fits']} ARIMA fits "
          f"({data['fit_stats']['not_converged']} did not converge) in {data['seconds']:.2f} s")
    held = f"accuracy on {data['held_out_run']}" if data["held_out_run"] else "accuracy (needs 2 runs)"
    print(f"{'variable':<13} {'method':<16} {'order':<10} {held}")
    for v, method in data["methods"].items():
        acc = data["accuracy"].get(v)
        order = "(" + ",".join(map(str, data["orders"][v])) + ")"
        print(f"{v:<13} {method:<16} {order:<10} {'-' if acc is None else f'{acc:.2f} %'}")
    if data["name_accuracy"] is not None:
        print(f"{'file names':<13} {'templates':<16} {'':<10} {data['name_accuracy']:.2f} %")
    print(f"{len(data['requests'])} predicted requests for the next run"
          + (f" ({len(data['unnamed'])} without a predictable name, left out)" if data["unnamed"] else ""))
    for r in data["requests"]:
        print(f"{r['rank']:>6} {r['write_bytes']:>16} {r['stripe_count']:>7}  {r['file']}")


def _learn_darshan_dir(args: argparse.Namespace, settings) -> int:
    from iez.db.darshan_state import open_state
    from iez.predict.darshan_dir import STATE_FILE, one_pass

    if args.app or args.trace or args.status or args.retrace:
        raise ValueError("--darshan-dir takes no APP, --trace, --status or --retrace")
    root = Path(args.darshan_dir)
    if not root.is_dir():
        raise ValueError(f"--darshan-dir {root}: not a directory")
    if args.watch is not None and not 1 <= args.watch <= 86400:
        raise ValueError(f"--watch {args.watch} is outside 1..86400 seconds")
    open_db(settings)  # the DB must exist at the current schema
    conn = open_state(Path(args.darshan_state) if args.darshan_state else Path(settings.state_dir) / STATE_FILE)
    try:
        while True:
            result = one_pass(conn, root, settings, args.selection)
            if args.json:
                print(json.dumps(result.to_dict()), flush=True)
            else:
                print(f"{root}: {result.seen} logs, {result.imported} imported, {result.corrupt} corrupt, "
                      f"{result.skipped} known; {result.groups} application(s) learnt, {result.stored} requests "
                      f"stored ({result.seconds:.2f} s)", flush=True)
            if args.watch is None:
                return 0
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0
    finally:
        conn.close()


@db_errors
def _learn(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if args.darshan_dir:
        return _learn_darshan_dir(args, settings)
    if args.watch is not None or args.darshan_state:
        raise ValueError("--watch and --darshan-state go with --darshan-dir")
    if not args.app:
        raise ValueError("give APP (or --darshan-dir DIR)")
    if args.status or args.retrace:
        if args.trace:
            raise ValueError("--trace does not go with --status or --retrace")
        engine = open_db(settings)  # a missing DB is refused before the flag is written
        if args.retrace:
            flag(settings, args.app, "flagged by hand (iez learn --retrace)")
        info = status(settings, args.app, args.retrace_miss_rate, engine)
        if args.json:
            print(json.dumps(info, default=str))
        else:
            state = f"flagged for re-tracing: {info['reason']}" if info["retrace"] else "not flagged"
            print(f"{args.app}: {state}; {info['predicted_requests']} predicted requests stored; next run: "
                  f"{info['next_mode']} mode")
            run = info["latest_run"]
            if run and run["miss_rate"] is not None:
                print(f"latest run {run['id']}: {run['files_found']} found, {run['files_missed']} missed "
                      f"({run['miss_rate']:.0%}; threshold {info['threshold']:.0%})")
        return 0
    if not args.trace:
        raise ValueError("give --trace DIR_OR_LOG (the traces of APP's runs), or --status")
    if args.api:
        from iez.api.client import base_url

        base_url(args.api)  # a bad URL is refused before minutes of fitting
    else:
        open_db(settings)  # the DB must exist at the current schema before minutes of fitting
    prediction = _run_prediction(args, load_trace(args.trace, args.trace_app or args.app))
    if args.api:
        stored = post_learning(args.api, args.app, prediction, args.allocate)
    else:
        stored = record_learning(settings, args.app, prediction, args.allocate, replace=not args.keep_old)
    if args.json:
        print(json.dumps({**prediction.to_dict(), "stored": stored}))
    else:
        _print_prediction(prediction)
        print(f"stored {stored['stored']} predicted requests for {args.app!r} in {stored.get('db') or stored['api']}"
              + (f", removed {stored['removed']} older ones" if stored["removed"] else "")
              + (f", allocated {stored['allocated']}" if "allocated" in stored else ""))
    return 0


@db_errors
def _run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if "--" in cmd and cmd[0].startswith("-"):  # options between APP and --: iez run's own
        split = cmd.index("--")
        options, cmd = cmd[:split], cmd[split + 1:]
        if options:
            extra = argparse.ArgumentParser(prog="iez run APP", add_help=False)
            _add_run_options(extra)
            args = extra.parse_args(options, namespace=argparse.Namespace(**vars(args)))
    return run_app(settings_from(args), args.app, cmd, force_trace=args.trace, preload=args.preload,
                   threshold=args.retrace_miss_rate, allocate=args.allocate, selection=args.selection,
                   outputs=args.output)
