"""``iez mirror resync FILE...``: bring the stale copies of mirrored files back in sync (FLR's delayed resync).

A write leaves every copy but the one it went to stale (FLR, and libiez's emulation of it). For each stale
copy of each file every data extent is read from an in-sync copy (the preferred, else the first) through a
descriptor pinned to it and written to the stale copy through a descriptor pinned to that one
(``LL_IOC_FLR_SET_MIRROR``, as ``llapi_mirror_resync_many`` does), then the stale flag is cleared in the
layout attribute. Under ``IEZ_EMULATE=ROOT`` it re-executes itself with libiez preloaded, as ``iez copy``
does, in the I/O class ``resync`` at ``--share`` of each server (default 0.3), so a resync takes the time the
emulated OSTs need and leaves the rest to the applications. On Lustre the same is ``lfs mirror resync FILE``
(not runnable here: a Lustre file's layout is Lustre's to rewrite).

A resync rewrites no byte's value, so the file keeps its attributes: it is read with ``O_NOATIME``, and what
the kernel takes from a file that is written (``security.capability``; the setuid/setgid bits of a caller
without ``CAP_FSETID``) and the atime and mtime are given back afterwards (:mod:`iez.move.attributes`).
Before the first file, the temporaries that killed movers left beside the files are removed
(:mod:`iez.move.temps`; ``temporaries_removed`` in ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from iez.layout import emulated
from iez.layout.model import Layout
from iez.move import temps
from iez.move.attributes import Attributes, open_source
from iez.move.chunks import in_sync_copies
from iez.move.files import pin_mirror

#: Bytes read and written at a time.
PIECE = 4 * 1024 * 1024
DEFAULT_SHARE = 0.3


def register(subparsers) -> None:
    parser = subparsers.add_parser("mirror", help="mirrored files (FLR): resync stale copies",
                                   description="Mirrored files (Lustre FLR, version-3 layouts in emulation).")
    sub = parser.add_subparsers(dest="mirror_command", metavar="COMMAND", required=True)
    resync = sub.add_parser(
        "resync", help="copy every extent of each stale copy from an in-sync copy, then clear its stale flag",
        description="For each stale copy of each FILE, copy every data extent from an in-sync copy (the "
        "preferred, else the first) to the stale copy through descriptors pinned to each "
        "(LL_IOC_FLR_SET_MIRROR), then clear the stale flag in the file's layout attribute. Under IEZ_EMULATE "
        "the resync runs with libiez preloaded in the I/O class 'resync' at --share of each server. On "
        "Lustre use 'lfs mirror resync FILE'.")
    resync.add_argument("files", nargs="+", metavar="FILE", help="mirrored files (version-3 layouts in emulation)")
    resync.add_argument("--share", type=float, default=DEFAULT_SHARE, metavar="F",
                        help=f"the fraction of each OST the resync may take (default {DEFAULT_SHARE}; "
                        "exported as IEZ_IO_SHARE)")
    resync.add_argument("--json", action="store_true", help="print one JSON object: files, bytes, seconds")
    resync.add_argument("--background", action="store_true",
                        help="return at once: the resync runs detached (its own session) at --share, its output in "
                             "$IEZ_STATE_DIR/resync.log; run again after a crash (a resync is idempotent)")
    resync.set_defaults(handler=_resync)


def stale_layout(path: str) -> Layout:
    """The file's emulated mirrored layout; a file without one (on Lustre, or not mirrored) is refused."""
    try:
        text = os.getxattr(path, emulated.xattr_name())
    except OSError as err:
        if err.errno in (61, 95):  # ENODATA, EOPNOTSUPP: no emulated layout
            raise ValueError(f"{path}: no emulated layout (on Lustre: lfs mirror resync {path})") from None
        raise
    layout = emulated.parse_attr(text, path)
    if not layout.mirrors:
        raise ValueError(f"{path}: not a mirrored file")
    return layout


def extents(fd: int, size: int):
    """(offset, length) of the file's data, holes left out (SEEK_DATA/SEEK_HOLE; the whole file if unknown)."""
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
        except OSError as err:
            if err.errno == 6:  # ENXIO: no data past offset
                return
            yield offset, size - offset
            return
        yield start, min(end, size) - start
        offset = end


def _kept_across_writes(path: str) -> Attributes:
    """What writing ``path`` would change or take, given back after the resync: mode (setuid/setgid), atime,
    mtime and the extended attributes (``security.capability``), the layout's aside (the resync's to set)."""
    return Attributes.of_stat(os.stat(path)).with_xattrs(path)


def resync_file(path: str) -> dict:
    """Resync every stale copy of ``path``; returns what was done (``copies`` resynced, ``bytes`` written)."""
    layout = stale_layout(path)
    started = time.monotonic()
    if not layout.stale:
        return {"file": path, "copies": [], "bytes": 0, "seconds": 0.0}
    source = in_sync_copies(layout)[0]
    written = 0
    kept = _kept_across_writes(path)
    src = open_source(path)
    try:
        pin_mirror(src, source)
        size = os.fstat(src).st_size
        for stale in layout.stale:
            dst = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                pin_mirror(dst, stale)
                for start, length in list(extents(src, size)):
                    for offset in range(start, start + length, PIECE):
                        data = os.pread(src, min(PIECE, start + length - offset), offset)
                        done = 0
                        while done < len(data):
                            done += os.pwrite(dst, memoryview(data)[done:], offset + done)
                        written += len(data)
                os.fsync(dst)
            finally:
                os.close(dst)
    finally:
        os.close(src)
    synced = Layout.from_mirrors(layout.mirrors, layout.preferred_mirror, ())
    os.setxattr(path, emulated.xattr_name(), emulated.format_attr(synced).encode("ascii"))
    fd = open_source(path)
    try:
        kept.apply(fd)
    finally:
        os.close(fd)
    return {"file": path, "copies": [k + 1 for k in layout.stale], "source": source + 1, "bytes": written,
            "seconds": round(time.monotonic() - started, 4)}


def _resync(args: argparse.Namespace) -> int:
    if not 0 < args.share <= 1:
        raise ValueError(f"--share {args.share} is outside (0, 1]")
    from iez.commands.copy import reexec_if_needed

    if args.background:
        return _background(args)
    os.environ.setdefault("IEZ_IO_CLASS", "resync")
    argv = ["mirror", "resync", "--share", repr(args.share)] + (["--json"] if args.json else []) + ["--"] + args.files
    reexec_if_needed(argparse.Namespace(share=args.share, weight=None), argv)
    started = time.monotonic()
    results, failed = [], []
    swept = temps.sweep_beside(args.files)
    for path in args.files:
        try:
            results.append(resync_file(path))
        except (OSError, ValueError) as err:
            line = str(err) if not isinstance(err, OSError) or not err.strerror else f"{path}: {err.strerror}"
            failed.append({"file": path, "error": line})
            print(f"iez mirror resync: {line}", file=sys.stderr, flush=True)
    seconds = time.monotonic() - started
    total = sum(r["bytes"] for r in results)
    if args.json:
        print(json.dumps({"files": results, "failed": failed, "bytes": total, "seconds": round(seconds, 4),
                          "share": args.share, "temporaries_removed": swept.removed}))
    else:
        for r in results:
            what = f"mirror {', '.join(map(str, r['copies']))} from mirror {r['source']}" if r["copies"] else "in sync"
            print(f"{r['file']}: {what}, {r['bytes'] / 2**20:,.1f} MiB in {r['seconds']:.2f} s")
        print(f"resynced {total / 2**20:,.1f} MiB in {seconds:.2f} s"
              + (f"; removed {swept.removed} temporaries that killed movers left" if swept.removed else ""))
    return 1 if failed else 0


def _background(args: argparse.Namespace) -> int:
    """The same resync, detached: stale copies are brought back at the resync's share while the caller goes on."""
    import subprocess

    from iez.config import settings

    state = Path(settings().state_dir)
    state.mkdir(parents=True, exist_ok=True)
    files = [os.path.abspath(f) for f in args.files]
    for path in files:
        stale_layout(path)  # a file that cannot be resynced is said now, not only in the log
    with open(state / "resync.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "iez.cli", "mirror", "resync", "--share", repr(args.share),
                                 "--json", "--", *files], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    out = {"pid": proc.pid, "files": files, "log": str(state / "resync.log"), "share": args.share}
    print(json.dumps(out) if args.json else f"resync of {len(files)} files in the background (pid {proc.pid}); "
          f"see {out['log']}")
    return 0
