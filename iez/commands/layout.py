"""``iez layout show`` and ``iez usage``: the layouts files actually have, and what they put on each OST.

Both read the file system, not the interaction DB: they check what placement
achieved, on Lustre or under the placement library's emulation.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from iez.layout.read import LayoutReader
from iez.layout.usage import Usage, usage
from iez.units import parse_size


def register(subparsers) -> None:
    parser = subparsers.add_parser("layout", help="print the layout a file actually has (Lustre or emulated)")
    actions = parser.add_subparsers(dest="layout_action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="print a file's stripe size, stripe count and OSTs")
    show.add_argument("path", metavar="PATH")
    show.add_argument("--json", action="store_true",
                      help="print {file, stripe_size, stripe_count, osts, source}")
    show.set_defaults(handler=_show)

    use = subparsers.add_parser(
        "usage", help="bytes per OST of the files below a directory, and their OSTCost",
        description="Walk DIR (symbolic links not followed), stripe each file's size over its layout "
        "RAID-0 and print the bytes each OST holds and OSTCost (max/mean over the pool; 1.0 is perfect). "
        "Exits 1 when some entries could not be read (they are listed on stderr).")
    use.add_argument("dir", metavar="DIR")
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
        print(f"iez layout: {args.path} has no layout (neither Lustre nor an emulated one)", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(layout))
    else:
        osts = " ".join(str(o) for o in layout["osts"])
        print(f"{layout['file']}: stripe_size {layout['stripe_size']} stripe_count {layout['stripe_count']} "
              f"osts {osts} ({layout['source']})")
    return 0


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
    cost = "n/a (no bytes)" if data["ost_cost"] is None else f"{data['ost_cost']:.3f}"
    print(f"OSTCost {cost} (max {human(data['max_bytes'])} / mean {human(data['mean_bytes'])} "
          f"over {len(data['osts'])} OSTs)")
