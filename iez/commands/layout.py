"""``iez layout show``, ``iez layout set-default`` and ``iez usage``: the layouts files and directories
actually have, a directory's default, and what the files put on each OST.

They read and write the file system, not the interaction DB: they check what
placement achieved, on Lustre or under the placement library's emulation, and
set what Lustre's own policy says (a directory's default layout), which iez
then honours.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
from pathlib import Path
import sys
import warnings

from iez.layout import emulated, lustre
from iez.layout.model import Layout, lexical_abspath
from iez.layout.read import LayoutReader
from iez.layout.rules import (check_lustre_components, check_stripe_size, dom_sized, layout_components, loads,
                              tools_layout)
from iez.layout.usage import Usage, usage
from iez.model import ALL_OSTS, EOF_END, Component, check_pool_name
from iez.units import parse_size


def register(subparsers) -> None:
    parser = subparsers.add_parser("layout", help="print the layout a file actually has (Lustre or emulated)")
    actions = parser.add_subparsers(dest="layout_action", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show", help="print a file's layout (a directory: its default layout)",
        description="Print the layout PATH has: stripe size, stripe count, OSTs, and the pool and components "
        "(PFL extents) when it has them. For a directory, its default layout (what files created in it get), "
        "marked as a default. Exits 1 when there is none.")
    show.add_argument("path", metavar="PATH", help="a file on Lustre or with an emulated layout")
    show.add_argument("--json", action="store_true",
                      help="print {file, stripe_size, stripe_count, osts, source} and pool, components, "
                      "default when set")
    show.set_defaults(handler=_show)
    setd = actions.add_parser(
        "set-default", help="set (or clear) a directory's default layout",
        description="Set the default layout of DIR, as lfs setstripe DIR does: on Lustre with lfs setstripe "
        "(or, without lfs, the lustre.lov attribute), elsewhere as the emulated layout attribute the placement "
        "library reads. A default is a template: stripe counts, sizes and pools, no OSTs. A stripe size not "
        "given stays open: Lustre uses the file system's, iez chooses its own.")
    setd.add_argument("dir", metavar="DIR", help="the directory whose default layout is set")
    what = setd.add_mutually_exclusive_group(required=True)
    what.add_argument("--layout", metavar="JSON",
                      help='a template: {"components": [{"end", "stripe_count", "stripe_size", "pool", "pattern"}], '
                      '"pool": P} (end -1: the end of the file; pattern "mdt": Data-on-MDT) or '
                      '{"stripe_count", "stripe_size", "pool"}; @FILE reads it from FILE (a site\'s rule)')
    what.add_argument("--stripe-count", type=int, metavar="N", help="stripes per file (-1: every OST)")
    what.add_argument("--clear", action="store_true", help="remove the directory's default layout")
    setd.add_argument("--stripe-size", metavar="BYTES", help="with --stripe-count: e.g. 1048576 or 4M")
    setd.add_argument("--pool", metavar="NAME", help="with --stripe-count: the OST pool")
    setd.add_argument("--if-unset", action="store_true",
                      help="leave DIR as it is when it has a default layout already (a user's or an administrator's "
                      "choice is never replaced); --json then adds \"kept\": true")
    setd.add_argument("--json", action="store_true", help="print the default as layout show --json does")
    setd.set_defaults(handler=_set_default)

    use = subparsers.add_parser(
        "usage", help="bytes per OST of the files below a directory, and their OSTCost",
        description="Walk DIR (symbolic links not followed), stripe each file's size over its layout "
        "RAID-0 (a composite layout: each component's extent over its own OSTs; Data-on-MDT bytes apart as "
        "mdt_bytes) and print the bytes each OST holds and OSTCost (max/mean over the pool; 1.0 is perfect). "
        "Exits 1 when some entries could not be read (they are listed on stderr).")
    use.add_argument("dir", metavar="DIR", help="the directory whose files are counted (recursively)")
    use.add_argument("--json", action="store_true", help="print one JSON object")
    use.add_argument("--osts", type=int, metavar="N", help="the pool is OSTs 0..N-1 (default: the OSTs seen)")
    use.add_argument("--ost-size", metavar="SIZE", help="every OST's capacity (e.g. 10G); adds util per OST")
    use.set_defaults(handler=_usage)


def _report_warnings(args: argparse.Namespace, caught: list[warnings.WarningMessage]) -> None:
    for warning in caught:
        print(f"iez {args.command}: warning: {warning.message}", file=sys.stderr)


def _show(args: argparse.Namespace) -> int:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layout = LayoutReader().describe(args.path)
    _report_warnings(args, caught)
    if layout is None:
        if os.path.isdir(args.path):
            print(f"iez layout: {args.path} is a directory without a default layout", file=sys.stderr)
        else:
            print(f"iez layout: {args.path} has no layout (neither Lustre nor an emulated one)", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(layout))
    else:
        print("\n".join(describe_text(layout)))
    return 0


def _extent(c: dict) -> str:
    return f"[{c['start']}, {'EOF' if c['end'] == EOF_END else c['end']})"


def describe_text(layout: dict) -> list[str]:
    """The lines ``iez layout show`` and ``iez alloc show`` print for a layout in the contract's JSON."""
    source = f" ({layout['source']})" if "source" in layout else ""
    components = layout.get("components")
    if not components:
        osts = " ".join(str(o) for o in layout["osts"])
        pool = f" pool {layout['pool']}" if layout.get("pool") else ""
        return [f"{layout['file']}: stripe_size {layout['stripe_size']} stripe_count {layout['stripe_count']} "
                f"osts {osts}{pool}{source}"]
    kind = "default layout" if layout.get("default") else "composite layout"
    pool = f", pool {layout['pool']}" if layout.get("pool") else ""
    lines = [f"{layout['file']}: {kind}, {len(components)} component{'s' if len(components) != 1 else ''}"
             f"{pool}{source}"]
    for c in components:
        size = "-" if c["stripe_size"] is None else c["stripe_size"]
        if c.get("pattern") == "mdt":
            lines.append(f"  {_extent(c)} Data-on-MDT stripe_size {size}")
            continue
        osts = " ".join(str(o) for o in c["osts"]) if c["osts"] else "- (not chosen)"
        extra = (f" pool {c['pool']}" if c.get("pool") else "") + (" overstriping" if c.get("overstriping") else "")
        lines.append(f"  {_extent(c)} stripe_size {size} stripe_count {c['stripe_count']} osts {osts}{extra}")
    for k, mirror in enumerate(layout.get("mirrors") or ()):
        flags = (" preferred" if layout.get("preferred_mirror") == k else "") + \
            (" stale" if k in (layout.get("stale_mirrors") or ()) else "")
        osts = " | ".join(" ".join(str(o) for o in c["osts"]) or "-" for c in mirror)
        lines.append(f"  mirror {k + 1}{flags}: osts {osts}")
    return lines


def template_from_args(args: argparse.Namespace) -> tuple[Component, ...]:
    """The template ``set-default`` was given (``--layout`` JSON or ``--stripe-count``/``--stripe-size``/``--pool``),
    checked against Lustre's rules; :class:`ValueError` naming the option at fault."""
    if args.layout is not None:
        if args.stripe_size is not None or args.pool is not None:
            raise ValueError("--stripe-size and --pool go with --stripe-count; inside --layout give "
                             "stripe_size and pool")
        text, where = args.layout, "--layout"
        if text.startswith("@"):
            where = f"--layout {text}"
            try:
                text = Path(text[1:]).read_text()
            except OSError as err:
                raise ValueError(f"{where}: cannot read it: {err.strerror}") from None
        data = loads(text, where)
        if isinstance(data, dict) and "mirrors" in data:  # a mirrored default: each file gets that many copies
            return tools_layout(data, "--layout", template=True)  # type: ignore[return-value]
        return layout_components(data, "--layout", template=True)
    if args.stripe_count == 0 or args.stripe_count < ALL_OSTS:
        raise ValueError(f"--stripe-count {args.stripe_count}: give 1 or more stripes, or -1 for every OST")
    size = None
    if args.stripe_size is not None:
        size = parse_size(args.stripe_size)
        check_stripe_size(size, "--stripe-size")
    pool = check_pool_name(args.pool, "--pool") if args.pool is not None else None
    comps = (Component(0, EOF_END, args.stripe_count, size, pool),)
    check_lustre_components(comps, "--stripe-count", template=True)
    return comps


def _set_default(args: argparse.Namespace) -> int:
    directory = args.dir
    if not os.path.isdir(directory):
        os.stat(directory)  # a missing path: the OS's own error, naming it
        raise ValueError(f"{directory} is not a directory (a default layout belongs to a directory)")
    if args.clear and (args.stripe_size is not None or args.pool is not None):
        raise ValueError("--clear takes no --stripe-size or --pool")
    given = None if args.clear else template_from_args(args)
    if isinstance(given, Layout):  # mirrored
        comps = Layout.from_mirrors([dom_sized(m) for m in given.mirrors], where="--layout")
    else:
        comps = None if given is None else dom_sized(given)
    reader = LayoutReader()
    if args.if_unset and not args.clear:
        kept = reader.describe(directory)
        if kept is not None:
            if args.json:
                print(json.dumps({**kept, "kept": True}))
            else:
                print(f"{directory}: has a default layout already, kept (--if-unset)")
            return 0
    if reader.on_lustre(directory, os.stat(directory)):
        if isinstance(comps, Layout):
            raise ValueError("--layout: a mirrored default on Lustre is set with lfs setstripe -N (iez sets it "
                             "in emulation only)")
        how = lustre.set_default(directory, comps)
    else:
        how = set_emulated_default(directory, comps, reader.xattr)
    if args.clear:
        if args.json:
            print(json.dumps({"file": lexical_abspath(directory), "default": None, "how": how}))
        else:
            print(f"{directory}: default layout cleared ({how})")
        return 0
    shown = reader.describe(directory)
    if shown is None:  # Lustre took it but answers none: say so rather than print nothing
        raise OSError(f"{directory}: the default layout was set ({how}) but reads back as none")
    if args.json:
        print(json.dumps(shown))
    else:
        print("\n".join(describe_text(shown)))
    return 0


def set_emulated_default(directory: str, components: tuple[Component, ...] | Layout | None, name: str) -> str:
    """Write (None: remove) the directory's layout attribute, which the placement library compares with the
    default iez learnt; returns the attribute's name."""
    if components is None:
        try:
            os.removexattr(directory, name)
        except OSError as err:
            if err.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
        return name
    layout = components if isinstance(components, Layout) else Layout.from_components(components)
    text = emulated.format_attr(layout)
    try:
        os.setxattr(directory, name, text.encode("ascii"))
    except OSError as err:
        if err.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            raise OSError(err.errno, f"this file system refuses user attributes ({name}), where an emulated "
                          "default layout lives", directory) from None
        raise
    return name


def _usage(args: argparse.Namespace) -> int:
    ost_size = parse_size(args.ost_size) if args.ost_size is not None else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = usage(args.dir, osts=args.osts, ost_size=ost_size)
    _report_warnings(args, caught)
    for problem in result.problems:
        print(f"iez usage: skipped: {problem}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        _print_table(result)
    return 1 if result.problems else 0


def human(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(nbytes) < 1024 or unit == "TiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


def _print_table(result: Usage) -> None:
    data = result.to_dict()
    print(f"{data['dir']}: {data['files']} files, {data['placed_files']} placed, "
          f"{data['unplaced_files']} without a layout ({human(data['unplaced_bytes'])})"
          + (f", {data['skipped_files']} skipped" if data["skipped_files"] else ""))
    if not data["osts"]:
        print("no OST holds any of these files")
        return
    has_util = result.ost_size is not None
    print(f"{'OST':>6} {'bytes':>16} {'':>10}" + (f" {'util':>8}" if has_util else ""))
    for row in data["osts"]:
        line = f"{row['index']:>6} {row['bytes']:>16} {human(row['bytes']):>10}"
        if has_util:
            line += f" {row['util'] * 100:>7.2f}%"
        print(line)
    if data["ost_cost"] is None:
        print("OSTCost n/a (no bytes)")
        return
    print(f"OSTCost {data['ost_cost_used']:.3f} over the {data['used_osts']} OSTs holding these files' bytes; "
          f"{data['ost_cost']:.3f} over the pool (max {human(data['max_bytes'])} / mean "
          f"{human(data['mean_bytes'])} over {len(data['osts'])} OSTs)")
    if data["used_osts"] < len(data["osts"]):
        print(f"  (the files use {data['used_osts']} of the pool's {len(data['osts'])} OSTs: the pool figure "
              "counts the idle ones, so a job smaller than the pool scores high there however it was placed)")
