"""Emulated bandwidth never blocks on "busy until" times it cannot trust (issue 31 item 3).

The tester's table had its busy-until times far in the future (a table kept across a reboot,
processes with another clock, a corrupted table) and a 4 MiB dd was still blocked at 30 s. The
library now trusts a lane's backlog only as far as the bytes in flight could justify: the same dd
finishes promptly (bound 20 s against an unbounded wait), and a healthy table still slows it."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from conftest import MIB, read_layout
from iez.emulate.bandwidth import CLASSES, HEADER, SLOT, Server, write_table
from iez.maps import MapEntry, write_map

pytestmark = pytest.mark.slow


def setup(tmp_path: Path, rate_mib_s: float, busy_until_ns: int | None) -> tuple[Path, Path, Path]:
    root = tmp_path / "emu"
    root.mkdir()
    table = write_table(root, {0: (Server(rate_mib_s), "oss0"), 1: (Server(rate_mib_s), "oss0")},
                        {"oss0": Server(1000 * rate_mib_s)})
    if busy_until_ns is not None:
        data = bytearray(table.read_bytes())
        servers = 2 + 1
        lanes = HEADER + (servers + CLASSES) * SLOT
        for i in range(servers * CLASSES):
            struct.pack_into("<Q", data, lanes + 8 * i, busy_until_ns)
        table.write_bytes(bytes(data))
    work = tmp_path / "work"
    work.mkdir()
    target = work / "out"
    layout_map = tmp_path / "job.map"
    write_map(layout_map, "clamp", [MapEntry(str(target), MIB, 2, "0 1")])
    return root, layout_map, target


@pytest.mark.timeout(120)
@pytest.mark.parametrize("busy_until", [2**62, 2**64 - 1, 10**9 * 86400 * 365], ids=["far", "max", "a-year"])
def test_a_dd_finishes_promptly_whatever_the_tables_busy_times(busy_until, runner, tmp_path):
    root, layout_map, target = setup(tmp_path, 100, busy_until)
    run = runner.iez(["dd", "if=/dev/zero", f"of={target}", "bs=1M", "count=4", "conv=fsync"], None,
                     timeout=60, IEZ_MAP=layout_map, IEZ_EMULATE=root)
    assert run.returncode == 0, run.stderr
    assert target.stat().st_size == 4 * MIB
    assert read_layout(target) is not None  # placed, so emulated
    assert run.elapsed < 20, f"dd took {run.elapsed:.1f} s"


@pytest.mark.timeout(120)
def test_a_healthy_table_still_slows_the_dd(runner, tmp_path):
    """2 OSTs of 2 MiB/s: 8 MiB take 2 s of service at the least (a lower bound only)."""
    root, layout_map, target = setup(tmp_path, 2, None)
    run = runner.iez(["dd", "if=/dev/zero", f"of={target}", "bs=1M", "count=8"], None, timeout=60,
                     IEZ_MAP=layout_map, IEZ_EMULATE=root)
    assert run.returncode == 0, run.stderr
    assert run.elapsed >= 1.5, f"dd took {run.elapsed:.2f} s: not slowed"
