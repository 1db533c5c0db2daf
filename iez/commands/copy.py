"""``iez copy SRC... DST``: the layout-aware mover (seed 000), or with ``--naive`` its file-per-thread baseline.

Under ``IEZ_EMULATE=ROOT`` the copy re-executes itself with libiez preloaded, so its reads and writes
take the time the emulated cluster's OSTs need (``os.pread``/``os.pwrite`` release the GIL: the
worker threads overlap). ``--share``/``--weight`` are exported to that process as ``IEZ_IO_SHARE``,
``IEZ_IO_WEIGHT`` and ``IEZ_IO_CLASS`` (``copy-PID``) for the emulated bandwidth's per-class shares.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from iez.move import CongestionSettings, MoveOptions, move
from iez.move.congestion import SKIP, THRESHOLD_S, WINDOW
from iez.move.files import keep_directory_attributes, make_directories, plan
from iez.runtime import LibraryNotFound, needs_preload, preload_into

REEXEC_MARK = "IEZ_COPY_REEXEC"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "copy", help="copy files layout-aware: stripe chunks per OST queue, congested OSTs avoided",
        description="Copy SRC... into DST (a directory; a file name for a single file) as seed 000's "
        "layout-aware mover: each source file is cut into stripe-sized chunks queued on the OST that "
        "serves them; worker threads visit the OST queues round-robin, pass by an OST another worker is "
        "on, and pass by an OST whose mean chunk time among the side's last --window chunks exceeded "
        "--threshold seconds for the next --skip picks. Destinations are placed by iez's allocator with the live "
        "loads, away from congested OSTs (in an emulated cluster's data directories or on Lustre). "
        "Every file is written under a temporary name naming this process, given every attribute cp -a keeps "
        "(owner, mode with setuid/setgid/sticky bits, extended attributes and ACLs, atime and mtime, holes), "
        "fsynced and renamed; temporaries that killed movers left beside the destinations are removed first. "
        "A failed file is one line on stderr and the others are still copied (exit 1).")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="SRC... (files or directories), then DST")
    parser.add_argument("--naive", action="store_true",
                        help="the paper's baseline: each worker copies whole files in turn, destinations "
                        "placed round-robin")
    parser.add_argument("--workers", type=int, default=4, metavar="N", help="worker threads (default 4)")
    parser.add_argument("--window", type=int, default=WINDOW, metavar="W",
                        help=f"the last W chunks of a side (reads or writes, every OST); an OST's mean time over its "
                        f"chunks among them is judged (default {WINDOW})")
    parser.add_argument("--threshold", type=float, default=THRESHOLD_S, metavar="T",
                        help=f"mean chunk seconds above which an OST is congested (default {THRESHOLD_S})")
    parser.add_argument("--skip", type=int, default=SKIP, metavar="M",
                        help=f"picks that pass a congested OST by before a probe chunk; doubled after each slow probe, "
                        f"up to 8 M (default {SKIP})")
    parser.add_argument("--stripe-count", type=int, metavar="N",
                        help="destination stripe count (default: the source's; 1 without a layout)")
    holes = parser.add_mutually_exclusive_group()
    holes.add_argument("--sparse", action="store_true",
                       help="chunks of zeros become holes in the destination (nothing written there; cp "
                       "--sparse=always). By default the source's holes stay holes and its data is written")
    holes.add_argument("--dense", action="store_true",
                       help="write every byte: the source's holes are written as zeros (cp --sparse=never)")
    parser.add_argument("--share", type=float, metavar="F",
                        help="the fraction of each OST this copy may take (exported as IEZ_IO_SHARE)")
    parser.add_argument("--weight", type=float, metavar="W",
                        help="this copy's weight against other movements (exported as IEZ_IO_WEIGHT)")
    parser.add_argument("--no-mirror-skip", dest="mirror_skip", action="store_false",
                        help="read a mirrored source from its preferred copy only (default: every in-sync copy, "
                        "chunks dealt in turn and moved off a copy whose OST is congested)")
    parser.add_argument("--json", action="store_true",
                        help="print bytes, seconds, files, chunks per OST, throughput_mib_s, congested, "
                        "failed, temporaries_removed (left by killed movers beside the destinations) "
                        "(only the JSON on stdout)")
    parser.add_argument("--background", action="store_true",
                        help="journal the movement and return at once; a detached stager copies it at --share "
                             "(default 0.3) of each server and survives a kill or reboot (iez stage status/resume)")
    parser.set_defaults(handler=_run)


def wanted_env(args: argparse.Namespace, env: dict) -> dict[str, str]:
    """The variables the process doing the I/O must have."""
    out: dict[str, str] = {}
    if args.share is not None or args.weight is not None:
        out["IEZ_IO_CLASS"] = env.get("IEZ_IO_CLASS") or f"copy-{os.getpid()}"
        if args.share is not None:
            out["IEZ_IO_SHARE"] = repr(args.share)
        if args.weight is not None:
            out["IEZ_IO_WEIGHT"] = repr(args.weight)
    return out


def argv_of(args: argparse.Namespace) -> list[str]:
    """The command line that repeats ``args`` (for the re-execution)."""
    out = ["copy"]
    if args.naive:
        out.append("--naive")
    if args.sparse:
        out.append("--sparse")
    if getattr(args, "dense", False):
        out.append("--dense")
    if args.json:
        out.append("--json")
    if not args.mirror_skip:
        out.append("--no-mirror-skip")
    for flag, value in (("--workers", args.workers), ("--window", args.window), ("--threshold", args.threshold),
                        ("--skip", args.skip), ("--stripe-count", args.stripe_count), ("--share", args.share),
                        ("--weight", args.weight)):
        if value is not None:
            out += [flag, repr(value) if isinstance(value, float) else str(value)]
    return out + ["--"] + list(args.paths)


def reexec_if_needed(args: argparse.Namespace, argv: list[str] | None = None) -> None:
    """Under IEZ_EMULATE without libiez (or without the share variables it needs), start again with them
    (``argv``: the iez command line to run again; the copy's own by default)."""
    env = dict(os.environ)
    wanted = wanted_env(args, env)
    unloaded = needs_preload(env)
    missing = unloaded or any(env.get(k) != v for k, v in wanted.items())
    if not missing or env.get(REEXEC_MARK):
        os.environ.update(wanted)
        return
    if unloaded:
        try:
            preload_into(env)  # placement off: the copy places its files itself
        except LibraryNotFound as err:
            raise ValueError(f"IEZ_EMULATE is set but libiez cannot be preloaded: {err}") from None
    env.update(wanted)
    env[REEXEC_MARK] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "iez.cli"] + (argv or argv_of(args)), env)


def _run(args: argparse.Namespace) -> int:
    if len(args.paths) < 2:
        raise ValueError("give SRC... and DST")
    if args.background:  # seed 004: staged asynchronously (iez.move.staging)
        from iez.commands.stage import submit_and_start

        mid, movement, problems = submit_and_start(args.paths, args.share if args.share is not None else 0.3,
                                                   args.weight if args.weight is not None else 1.0)
        for line in problems:
            print(f"iez copy: {line}", file=sys.stderr)
        if args.json:
            print(json.dumps({"id": mid, "background": True, "files": movement["files"], "bytes": movement["bytes"],
                              "problems": problems}))
        else:
            print(f"movement {mid}: {movement['files']} files queued in the background; iez stage status")
        return 1 if problems else 0
    if args.share is not None and not 0 < args.share <= 1:
        raise ValueError(f"--share {args.share} is outside (0, 1]")
    if args.weight is not None and not args.weight > 0:
        raise ValueError(f"--weight {args.weight} must be positive")
    options = MoveOptions(naive=args.naive, workers=args.workers, sparse=args.sparse, dense=args.dense,
                          stripe_count=args.stripe_count,
                          congestion=CongestionSettings(args.window, args.threshold, args.skip),
                          mirror_skip=args.mirror_skip,
                          on_error=lambda line: print(f"iez copy: {line}", file=sys.stderr, flush=True))
    reexec_if_needed(args)
    *sources, dest = args.paths
    directories: list[tuple[str, str, os.stat_result]] = []
    pairs, problems = plan(sources, dest, directories)
    problems += make_directories(directories)
    for line in problems:
        print(f"iez copy: {line}", file=sys.stderr, flush=True)
    report = move([(s, d, None) for s, d in pairs], options)
    late = keep_directory_attributes(directories)  # after every file: a rename changes its directory's mtime
    for line in late:
        print(f"iez copy: {line}", file=sys.stderr, flush=True)
    problems += late
    report.failed = [{"src": p.split(":", 1)[0], "dst": None, "error": p} for p in problems] + report.failed
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        r = report
        print(f"copied {r.files} file{'s' if r.files != 1 else ''}, {r.bytes / 2**20:,.1f} MiB in {r.seconds:.2f} s "
              f"({r.throughput_mib_s:,.1f} MiB/s), {r.mode}, {r.workers} workers; placement: {r.placement}")
        if r.chunks:
            print("chunks per OST: " + " ".join(f"{k}:{v}" for k, v in
                                                 sorted(r.chunks.items(), key=lambda kv: (kv[0] == 'none', kv[0].zfill(8)))))
        for e in r.congested:
            state = "congested" if e["congested"] else "recovered"
            print(f"OST {e['ost']} {state} ({e['side']}, mean chunk {e['mean_chunk_s']} s) at {e['at_s']} s")
        if r.temporaries_removed:
            print(f"removed {r.temporaries_removed} temporar{'ies' if r.temporaries_removed != 1 else 'y'} "
                  "that killed movers left beside the destinations")
        if r.failed:
            print(f"{len(r.failed)} file{'s' if len(r.failed) != 1 else ''} not copied (see above)")
    return 1 if report.failed else 0
