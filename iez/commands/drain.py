"""``iez drain`` and ``iez undrain``: empty OSTs before hardware leaves, and let them take stripes again.

    iez drain --ost N[,M...] [--db DB | --cluster ROOT] [--root DIR] [--share F] [--json]
    iez drain --status [--root DIR | --cluster ROOT] [--json]
    iez drain --cancel [--root DIR | --cluster ROOT] [--json]
    iez undrain --ost N[,M...] [--root DIR | --cluster ROOT | --db DB] [--json]

``--root DIR`` is an emulated cluster's root (it holds ``cluster.json``; its data directories are drained),
or with ``--db`` a Lustre directory whose files are moved (the DB's live view gives the OSTs);
``--cluster ROOT --root DIR`` drains only the files below DIR of an emulated cluster. Without either,
``IEZ_EMULATE`` names the emulated cluster. The drain (:mod:`iez.rebalance.drain`) stops new stripes on the
OSTs (``max_create_count=0`` on the MDS), moves every object off them, prints progress lines on stderr and
ends with ``objects_left`` 0 when no file has an object there; killed, it resumes when run again. Under
``IEZ_EMULATE`` it runs itself again with the placement library preloaded, in the I/O class ``rebalance``
at ``--share`` of each server, as ``iez rebalance apply`` does. ``--cancel`` stops it after the move in
progress and leaves the OSTs refusing new stripes until ``iez undrain``.
"""

from __future__ import annotations

import argparse
import json
import sys

from iez.commands.preloaded import rerun_preloaded

#: Of each OST's bandwidth, what a drain takes when --share is not given (as a rebalance).
DEFAULT_SHARE = 0.3


def _where(parser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--db", metavar="DB", help="the interaction DB whose live view gives the OSTs (Lustre; with "
                        "--root DIR, the files to move)")
    source.add_argument("--cluster", metavar="ROOT", help="an emulated cluster's root (files: its data directories, "
                        "or --root DIR)")
    parser.add_argument("--root", metavar="DIR", help="an emulated cluster's root, or with --db a Lustre directory")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "drain", help="empty OSTs: no new stripes there, every stripe object moved off (resumable)",
        description="Stop new stripes on the OSTs (the MDS's osp.*.max_create_count=0; in emulation the emulated "
        "MDS's), then move every stripe object off them onto OSTs of the same pools (least full, not busy, taking "
        "stripes, failure domains of mirrors kept apart), every layout kind kept. Progress on stderr; run it again "
        "after a kill to resume. objects_left is 0 when no file has an object there; what could not move is listed "
        "with its reason. --cancel stops a running drain (the OSTs keep refusing new stripes until iez undrain).")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--ost", metavar="N[,M...]", help="the OSTs to drain (indices, or OST0003)")
    action.add_argument("--status", action="store_true", help="what is draining, objects and bytes left, progress")
    action.add_argument("--cancel", action="store_true",
                        help="stop a running drain after its move in progress (the OSTs stay nocreate)")
    _where(parser)
    parser.add_argument("--share", type=float, default=DEFAULT_SHARE, metavar="F",
                        help=f"the share of each OST's bandwidth the moves may take, 0..1 (default {DEFAULT_SHARE})")
    parser.set_defaults(handler=_drain)
    undo = subparsers.add_parser("undrain", help="let drained OSTs take new stripes again",
                                 description="Give the OSTs back the max_create_count they had before iez drain "
                                 "(Lustre's default 20000 when unknown): they take new stripes again.")
    undo.add_argument("--ost", required=True, metavar="N[,M...]", help="the OSTs to undrain")
    _where(undo)
    undo.set_defaults(handler=_undrain)


def _target(args: argparse.Namespace):
    from iez.commands.db import settings_from
    from iez.rebalance.drain import resolve

    return resolve(args.cluster, args.root, settings_from(args), bool(args.db))


def _drain(args: argparse.Namespace) -> int:
    from iez.rebalance import drain

    target = _target(args)
    if args.status:
        out = drain.status(target)
        if args.json:
            print(json.dumps(out, indent=1))
        else:
            print(f"{out['status']}: OST {','.join(map(str, out['draining'])) or '-'}"
                  f"{' (pid ' + str(out['pid']) + ')' if out['running'] else ''}; {out['files_moved']} files "
                  f"({out['bytes_moved']} bytes) moved; objects left {_known(out['objects_left'])}, bytes left "
                  f"{_known(out['bytes_left'])}; refusing new stripes: {','.join(map(str, out['nocreate'])) or 'none'}")
        return 0
    if args.cancel:
        out = drain.cancel(target)
        if args.json:
            print(json.dumps(out, indent=1))
        else:
            print(("cancelled" if out["cancelled"] else out["reason"]) + "; OSTs refusing new stripes until iez "
                  f"undrain: {','.join(map(str, out['nocreate'])) or 'none'}")
        return 0
    if not 0.0 < args.share <= 1.0:
        raise ValueError(f"--share {args.share}: a fraction of each OST's bandwidth, above 0 and at most 1")
    osts = drain.parse_osts(args.ost)
    argv = ["drain", "--ost", args.ost, "--share", repr(args.share)]
    for option in ("db", "cluster", "root"):
        if getattr(args, option):
            argv += [f"--{option}", getattr(args, option)]
    rerun_preloaded(argv + (["--json"] if args.json else []), args.share)
    report = drain.drain(target, osts, say=lambda line: print(line, file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"{report['status']}: {report['files_moved']} files ({report['bytes_moved']} bytes) moved off OST "
              f"{','.join(map(str, osts))}; {report['objects_left']} objects left")
        for x in report["left"][:20]:
            print(f"  {x['file']}: {x['objects']} object(s) on OST {x['ost']}: {x['reason']}")
    return 0 if report["objects_left"] == 0 else 1


def _known(value) -> str:
    return "-" if value is None else str(value)


def _undrain(args: argparse.Namespace) -> int:
    from iez.rebalance import drain

    out = drain.undrain(_target(args), drain.parse_osts(args.ost))
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"OST {','.join(map(str, out['undrained']))} take new stripes again; still refusing: "
              f"{','.join(map(str, out['nocreate'])) or 'none'}")
    return 0
