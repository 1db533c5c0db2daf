"""Descriptor numbers at a low `ulimit -n` without CAP_SYS_RESOURCE (issue 31 item 5).

At a soft limit equal to the hard one, libiez cannot raise the limit to put its DB connection's
descriptors above the application's range; at 128 or less it used to leave them where the kernel
put them, so the application's first files got 3, 7, 8 instead of 3, 4, 5. They now go to the top
quarter of the range at such limits. The capability is dropped with setpriv (the tests run as root
here, whose CAP_SYS_RESOURCE would raise any limit)."""

from __future__ import annotations

import shutil

import pytest

from conftest import BACKENDS, MIB, layouts_below, pin_layouts

pytestmark = pytest.mark.slow

LIMITS = ["128:128", "64:64", "32:32"]


def drop_capability() -> list[str]:
    setpriv = shutil.which("setpriv")
    if not setpriv:
        pytest.fail("setpriv (util-linux) is required to run without CAP_SYS_RESOURCE")
    return [setpriv, "--inh-caps=-sys_resource", "--bounding-set=-sys_resource"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_first_files_get_3_4_5_at_a_low_limit(backend, limit, shared_db, runner, apps, tmp_path):
    work = tmp_path / "work"
    db = shared_db(backend)
    expected = pin_layouts(db, {work / name: (MIB, [i + 1]) for i, name in enumerate(["placed", "p1", "p2"])})
    cmd = [*drop_capability(), "prlimit", f"--nofile={limit}", apps("fd_games"), "first", work]
    run = runner.compare(cmd, db, work)
    run.assert_same()
    assert run.lib.stdout == b"placed 3 a 3 b 4 c 5\n"
    assert layouts_below(work) == {str(work / "placed"): expected[str(work / "placed")]}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
def test_as_many_files_before_emfile_at_a_low_limit(backend, shared_db, runner, apps, tmp_path):
    """The descriptors at the top of the range are given back when the application runs out: it opens
    as many files as in the plain run before EMFILE."""
    work = tmp_path / "work"
    db = shared_db(backend)
    pin_layouts(db, {work / "placed": (MIB, [1])})
    cmd = [*drop_capability(), "prlimit", "--nofile=64:64", apps("fd_games"), "emfile", work]
    run = runner.compare(cmd, db, work)
    run.assert_same()
    assert run.lib.stdout.endswith(b" then Too many open files\n")
