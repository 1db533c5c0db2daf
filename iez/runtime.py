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

Which emulated cluster a process runs against is :func:`emulated_root` (``IEZ_EMULATE``, empty counting as
unset), and whether it must run again under the library is :func:`needs_preload`; every command and mover asks
these two. ``IEZ_EMULATE`` is not a field of :class:`iez.config.Settings` but one of its
``PROCESS_VARIABLES``: it is per-process protocol, not a service's configuration. The preload library reads it
in every process (a job's, the movers'), iez sets it for the processes it starts (the demo's writers, the
competitor, ``iez drain --cluster`` before it re-executes itself), and it is read from the environment as it is
at the moment of asking, after such a change, where ``Settings`` is read once per process and cached.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from iez.errors import ConfigError

PRELOAD_ENV = "IEZ_PRELOAD_LIB"
EMULATE_ENV = "IEZ_EMULATE"
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


def emulated_root(env: Mapping[str, str] | None = None) -> str | None:
    """The root of the emulated cluster this process runs against (``IEZ_EMULATE`` in ``env``, the process's
    environment by default, read now), or None on Lustre or on no cluster at all (unset or empty)."""
    return (os.environ if env is None else env).get(EMULATE_ENV) or None


def preloaded(env: Mapping[str, str]) -> bool:
    """Whether ``env`` already preloads libiez (a library of that name in ``LD_PRELOAD``, whichever separator)."""
    return any(os.path.basename(p).startswith("libiez") for p in env.get("LD_PRELOAD", "").replace(":", " ").split())


def preload_into(env: dict[str, str]) -> None:
    """Put libiez first in ``env``'s ``LD_PRELOAD`` and placement off unless ``env`` sets a mode (a mover or
    copier places its files itself); :class:`LibraryNotFound` when there is none."""
    env["LD_PRELOAD"] = " ".join(filter(None, [str(find_library()), env.get("LD_PRELOAD", "")]))
    env.setdefault("IEZ_MODE", "off")


def needs_preload(env: Mapping[str, str] | None = None) -> bool:
    """Whether a process with ``env`` (this one's by default) must run under libiez and does not yet: it runs
    against an emulated cluster, whose bandwidths only the library's pacing gives its I/O."""
    env = os.environ if env is None else env
    return emulated_root(env) is not None and not preloaded(env)
