"""Moving commands (``iez rebalance apply``, ``iez drain``, ``iez balance``) run again with libiez preloaded
on an emulated cluster, so their I/O takes the time the emulated OSTs give it at the mover's share.

One place for what all three need: the I/O class ``rebalance`` and the share in the environment (the library
reads them), and under emulation a single re-execution of the same command line with the library preloaded
and placement off (a mover places its files itself).
"""

from __future__ import annotations

import os
import sys

from iez.runtime import EMULATE_ENV, LibraryNotFound, emulated_root, preload_into

#: Set in the re-executed command, so it runs once more only.
MARK = "IEZ_MOVER_PRELOADED"


def rerun_preloaded(argv: list[str], share: float, emulate: str | None = None) -> None:
    """Put the class and ``share`` in the environment; under ``IEZ_EMULATE`` (or ``emulate``, an emulated
    cluster's root), run ``iez ARGV`` again with libiez preloaded, once. Returns only when no rerun is due."""
    os.environ["IEZ_IO_CLASS"] = "rebalance"
    os.environ["IEZ_IO_SHARE"] = repr(share)
    if emulate:
        os.environ.setdefault(EMULATE_ENV, emulate)
    root = emulated_root()
    if not root or os.environ.get(MARK):
        return
    env = dict(os.environ, IEZ_MODE="off", **{MARK: "1"})
    try:
        preload_into(env)
    except LibraryNotFound as err:
        raise OSError(f"IEZ_EMULATE={root} is an emulated cluster but the placement library "
                      f"is not available: {err}") from None
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "iez.cli", *argv], env)
