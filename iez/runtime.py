"""Where libiez.so (the preload library) is, for every command that runs programs under it: ``iez run``,
``iez demo``, ``iez copy``, ``iez stage``, ``iez rebalance``, ``iez mirror`` and the emulated movers.

One rule, in this order:

1. the path given (``iez run --preload LIB``), else ``$IEZ_PRELOAD_LIB``: taken as it is, and an error
   naming it when it is not a file;
2. a source tree's ``placement_lib/`` (the working directory's, else the one beside the package, as an
   editable install has): built with ``make`` first when ``build`` (an up-to-date build costs a ``make -q``),
   so a developer's edits are what runs;
3. the copy installed with the package (``iez/_lib/libiez.so``, built by ``pip install .``: setup.py), which
   is what a scientist has after the README's install, anywhere outside the source tree.

Client nodes that run jobs without the Python package get the library from the administrator (deploy/README.md:
``/usr/lib/iez/libiez.so``, the path the SPANK plugin's ``lib=`` names); ``IEZ_PRELOAD_LIB`` points the commands
at it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from iez.errors import ConfigError

PRELOAD_ENV = "IEZ_PRELOAD_LIB"
#: The copy ``pip install .`` puts in the package (setup.py's build step).
PACKAGED = Path(__file__).resolve().parent / "_lib" / "libiez.so"


class LibraryNotFound(ConfigError):
    """No usable libiez.so (the message says where it looked and how to get one)."""


def source_trees() -> list[Path]:
    """``placement_lib/`` directories that may build the library: the working directory's, the package's."""
    out: list[Path] = []
    for src in (Path.cwd() / "placement_lib", Path(__file__).resolve().parents[1] / "placement_lib"):
        if (src / "Makefile").is_file() and src.resolve() not in [o.resolve() for o in out]:
            out.append(src)
    return out


def find_library(given: str | None = None, build: bool = True) -> Path:
    """libiez.so by the module's rule; :class:`LibraryNotFound` naming what was tried."""
    from iez.config import Settings

    named = given or Settings.from_env().preload_lib
    if named:
        what = "--preload" if given else PRELOAD_ENV
        if not Path(named).is_file():
            raise LibraryNotFound(f"{what}={named} does not exist (the preload library libiez.so)")
        return Path(named).resolve()
    failures = []
    for src in source_trees():
        lib = src / "build" / "libiez.so"
        if build:
            done = subprocess.run(["make", "-s", "-C", str(src)], capture_output=True, text=True)
            if done.returncode != 0:
                failures.append(f"make -C {src} failed: {done.stderr.strip()[-300:]}")
                continue
        if lib.is_file():
            return lib.resolve()
    if PACKAGED.is_file():
        return PACKAGED
    tried = "; ".join(failures) or "no placement_lib/ source tree here nor beside the package, and none installed"
    raise LibraryNotFound(f"the preload library libiez.so was not found ({tried}): reinstall iez with a C "
                          f"compiler and libsqlite3-dev present (pip install . builds it), build it with "
                          f"`make -C placement_lib`, or set {PRELOAD_ENV}")
