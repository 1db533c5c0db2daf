"""A real function that no library after libiez defines (issue 28 item 6): the interposer's call fails as
a missing function would (errno ENOSYS, the failure value), never a call through NULL.

``missing_real`` finds MPI and HDF5 entry points with dlsym in a program that has neither: plainly it
finds nothing; under libiez it finds the interposers and calls them. Before the stand-ins of
``placement_lib/src/real.c`` the first call crashed the program (SIGSEGV).
"""

from __future__ import annotations

import pytest

from conftest import reset_dir, tree

pytestmark = pytest.mark.slow

NAMES = ("MPI_Init", "MPI_File_open", "MPI_File_write", "H5Fcreate")


@pytest.mark.parametrize("mode", ["off", "place", "trace"])
def test_a_missing_real_symbol_fails_as_a_missing_function(mode, runner, apps, tmp_path):
    work, traces = tmp_path / "work", tmp_path / "traces"
    traces.mkdir()
    reset_dir(work, None)
    plain = runner.plain([apps("missing_real"), work])
    assert (plain.returncode, plain.stdout.decode()) == (0, "".join(f"{n} absent\n" for n in NAMES))
    lib = runner.iez([apps("missing_real"), work], str(tmp_path / "iez.db"), IEZ_MODE=mode,
                     IEZ_TRACE_DIR=traces)
    assert lib.returncode == 0, lib.stderr.decode(errors="replace")
    assert lib.stdout.decode() == "".join(f"{n} -1 ENOSYS\n" for n in NAMES)
    assert lib.stderr == plain.stderr
    assert tree(work) == {}  # H5Fcreate's and MPI_File_open's file is made by neither run
