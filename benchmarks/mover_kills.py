"""The movers under kill -9 (issue 27, items 4 and 5): every attribute ``cp -a`` keeps, and no temporary left.

    python benchmarks/mover_kills.py [--mover copy|rebalance|both] [--kills 20] [--seed 1] [--files 24]
                                     [--ost-mib 32] [--json]
    python benchmarks/mover_kills.py --tree /tmp/iez-before     # another iez tree's movers (e.g. git archive)

Each file moved carries every attribute ``cp -a`` / ``rsync -aHAX`` keeps: an owner and group other than
root's, setuid/setgid/sticky bits (a different mix per file), a POSIX ACL (``system.posix_acl_access``),
``user.`` and ``trusted.`` attributes, ``security.capability``, an atime older than its mtime (so any read
without ``O_NOATIME`` moves it under ``relatime``) with nanoseconds, and holes (sparse regions).

The work is tests/move/move_helpers.py's (:func:`copy_under_kills`, :func:`rebalance_under_kills`), which the
tests run too (tests/move/test_move_kills.py, tests/rebalance/test_rebalance_kills.py); run as root.

- ``copy``: files striped over an emulated 2 OSS x 4 OST cluster (``iez cluster emulate``, slow OSTs), copied
  by ``iez copy SRC OUT --json`` into its data directory; ``--kills`` times the copy is killed with SIGKILL a
  random time after its first temporary appears, then one complete run.
- ``rebalance``: an emulated cluster filled unevenly (tests/rebalance's helpers), ``iez rebalance plan``, then
  ``iez rebalance apply PLAN --journal J`` killed ``--kills`` times a random time after a temporary appears
  (each run resumes from the journal), then one complete run.

Reported per mover: files tried, lost (gone), corrupted (sha256 or size differ), attributes changed (files
with any attribute not as before; each attribute's count beside), temporaries left (any mover's, old names
included) and what the complete run said it removed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "move"))

from move_helpers import copy_under_kills, rebalance_under_kills  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mover", choices=("copy", "rebalance", "both"), default="both")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--files", type=int, default=24, help="files iez copy copies (default 24)")
    parser.add_argument("--ost-mib", type=int, default=32,
                        help="the rebalanced cluster's OST size: 8 OSTs filled 20-90 %% (default 32: 264 files, "
                             "28 moves)")
    parser.add_argument("--tree", type=Path, default=REPO,
                        help="the iez tree whose movers run (default: this one; e.g. git archive of an older commit)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("mover_kills: run as root (owners, trusted. attributes, security.capability)", file=sys.stderr)
        return 2
    out = {}
    for mover in ("copy", "rebalance") if args.mover == "both" else (args.mover,):
        with tempfile.TemporaryDirectory(prefix=f"iez-kills-{mover}-") as work:
            if mover == "copy":
                out[mover] = copy_under_kills(Path(work), args.tree.resolve(), args.kills, args.seed, files=args.files)
            else:
                out[mover] = rebalance_under_kills(Path(work), args.tree.resolve(), args.kills, args.seed,
                                                   ost_mib=args.ost_mib)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for mover, r in out.items():
            print(f"{mover}: {r['files_tried']} files tried, {r['lost']} lost, {r['corrupted']} corrupted, "
                  f"{r['attributes_changed']} with attributes changed {r['changed_by_attribute'] or ''}, "
                  f"{r['temporaries_left']} temporaries left ({r['temporaries_before_the_complete_run']} before "
                  f"the complete run, which said it removed {r['temporaries_removed_said']}); "
                  f"{r['killed']} kills, {r['finished_before_the_kill']} runs ended before their kill")
    return 0


if __name__ == "__main__":
    sys.exit(main())
