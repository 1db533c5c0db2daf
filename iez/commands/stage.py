"""``iez stage``: background movements (seed 004, DataStager) and the stager that drains them.

    iez stage submit SRC... DST [--share F] [--weight W] [--json]   # what iez copy --background does
    iez stage status [--json]        # movements queued, running, done, with their progress
    iez stage run                    # drain the journal here (foreground); exits when nothing is pending
    iez stage resume                 # start the stager detached if anything is pending (after a reboot)
    iez stage cancel ID

The journal is ``$IEZ_STATE_DIR/staging.db`` (:mod:`iez.move.staging`).
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("stage", help="background movements (iez copy --background) and their stager")
    actions = parser.add_subparsers(dest="stage_action", metavar="ACTION", required=True)
    submit = actions.add_parser("submit", help="journal a movement and start the stager; returns at once",
                                description="Journal SRC... DST as one movement and start the stager (detached) "
                                "if none runs. The stager copies at its share of each server (IEZ_IO_SHARE under "
                                "IEZ_EMULATE; NRS TBF rules on Lustre: iez shares rules).")
    submit.add_argument("paths", nargs="+", metavar="SRC... DST", help="sources (files or directories) then DST")
    submit.add_argument("--share", type=float, default=0.3, metavar="F",
                        help="at most this fraction of each server for the stager (default 0.3)")
    submit.add_argument("--weight", type=float, default=1.0, metavar="W",
                        help="this movement's weight against the other movements in flight (default 1)")
    submit.add_argument("--json", action="store_true", help='print {"id", "files", "bytes", "problems"}')
    submit.set_defaults(handler=_submit)
    status = actions.add_parser("status", help="movements in flight and done, with their progress")
    status.add_argument("--all", action="store_true", help="also movements that ended (default: in flight only)")
    status.add_argument("--json", action="store_true", help="print a JSON list of movements")
    status.set_defaults(handler=_status)
    run = actions.add_parser("run", help="drain the journal in the foreground (exits when nothing is pending)")
    run.add_argument("--workers", type=int, default=2, metavar="N", help="files copied at once (default 2)")
    run.set_defaults(handler=_run)
    resume = actions.add_parser("resume", help="start the stager detached if movements are pending (after a reboot)")
    resume.add_argument("--share", type=float, default=0.3, metavar="F", help="the stager's share (default 0.3)")
    resume.set_defaults(handler=_resume)
    cancel = actions.add_parser("cancel", help="stop a movement: its pending files are not copied")
    cancel.add_argument("id", type=int, help="movement id (iez stage status)")
    cancel.set_defaults(handler=_cancel)


def submit_and_start(paths: list[str], share: float, weight: float) -> tuple[int, dict, list[str]]:
    from iez.move import staging

    if len(paths) < 2:
        raise ValueError("give SRC... and DST")
    *sources, dest = paths
    mid, problems = staging.submit(sources, dest, weight=weight, share=share)
    staging.start_detached(share=share)
    movement = next(m for m in staging.movements() if m.id == mid)
    return mid, movement.to_json(), problems


def _submit(args: argparse.Namespace) -> int:
    mid, movement, problems = submit_and_start(args.paths, args.share, args.weight)
    for line in problems:
        print(f"iez stage: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps({"id": mid, "files": movement["files"], "bytes": movement["bytes"], "problems": problems}))
    else:
        print(f"movement {mid}: {movement['files']} files, {movement['bytes']} bytes queued; "
              f"iez stage status shows its progress")
    return 1 if problems else 0


def table(moves: list[dict]) -> str:
    if not moves:
        return "no movements"
    lines = [f"{'id':>4} {'state':<9} {'files':>11} {'progress':>8} {'weight':>6} {'share':>5}  destination"]
    for m in moves:
        lines.append(f"{m['id']:>4} {m['state']:<9} {m['done_files']:>5}/{m['files']:<5} {m['progress']:>8.1%} "
                     f"{m['weight']:>6g} {m['share']:>5g}  {m['dst']}" + (f"  ({m['failed']} failed)" if m['failed'] else ""))
    return "\n".join(lines)


def _status(args: argparse.Namespace) -> int:
    from iez.move import staging

    moves = [m.to_json() for m in staging.movements(active_only=not args.all)]
    print(json.dumps(moves, indent=1) if args.json else table(moves))
    return 0


def _run(args: argparse.Namespace) -> int:
    from iez.move import staging

    stager = staging.Stager(workers=args.workers)
    try:
        copied = stager.run()
    except staging.Busy as err:
        print(f"iez stage: {err}", file=sys.stderr)
        return 0
    removed = stager.temporaries_removed
    print(f"iez stage: {copied} files copied; nothing pending"
          + (f"; removed {removed} temporaries that killed movers left" if removed else ""), flush=True)
    return 0


def _resume(args: argparse.Namespace) -> int:
    from iez.move import staging

    pending = [m for m in staging.movements(active_only=True)]
    if not pending:
        print("nothing pending")
        return 0
    started = staging.start_detached(share=args.share)
    print(f"{len(pending)} movements pending; " + ("stager started" if started else "a stager already runs"))
    return 0


def _cancel(args: argparse.Namespace) -> int:
    from iez.move import staging

    m = staging.cancel(args.id)
    print(f"movement {m.id}: {m.state} ({m.done_files} of {m.files} files copied)")
    return 0
