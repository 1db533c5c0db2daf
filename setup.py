"""Builds the preload library into the package on ``pip install .`` (iez/_lib/libiez.so, found by
:mod:`iez.runtime`), so that ``iez run`` works after the README's install, outside the source tree.

Best effort: without a C compiler or SQLite's headers the package installs without the library and says so
(``iez run`` then names the ways to get it). Editable installs use the source tree's own build instead."""

import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        source = Path(__file__).resolve().parent / "placement_lib"
        if not (source / "Makefile").is_file():
            return
        done = subprocess.run(["make", "-s", "-C", str(source), "build/libiez.so"], capture_output=True, text=True)
        built = source / "build" / "libiez.so"
        if done.returncode != 0 or not built.is_file():
            sys.stderr.write(f"iez: the preload library was not built ({done.stderr.strip()[-400:]}); iez run needs "
                             "it: install gcc, make and libsqlite3-dev and reinstall, or set IEZ_PRELOAD_LIB\n")
            return
        target = Path(self.build_lib) / "iez" / "_lib"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target / "libiez.so")


setup(cmdclass={"build_py": BuildWithLibrary})
