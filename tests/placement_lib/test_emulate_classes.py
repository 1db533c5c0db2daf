"""I/O class slots of the emulated bandwidth are released when their last process exits (issue 31
item 4). The table holds 32 class slots; every process with its own IEZ_IO_CLASS (what `iez copy
--share` exports, copy-PID) took one for good, so from the 32nd such process on its cap was
silently ignored. 40 sequential dd processes, each in its own class capped at a quarter of the
OST, must each be slowed to the cap."""

from __future__ import annotations

import pytest

from conftest import MIB, read_layout
from iez.emulate.bandwidth import CLASSES, Server, Table, class_key, write_table
from iez.maps import MapEntry, write_map

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_forty_sequential_capped_processes_each_keep_their_cap(runner, tmp_path):
    root = tmp_path / "emu"
    root.mkdir()
    # one OST of 16 MiB/s; a quarter of it is 4 MiB/s: 2 MiB take >= 0.5 s capped, 0.125 s uncapped
    write_table(root, {0: (Server(16), "oss0")}, {"oss0": Server(1000)}, window=256 * 1024)
    work = tmp_path / "work"
    work.mkdir()
    target = work / "out"
    layout_map = tmp_path / "job.map"
    write_map(layout_map, "classes", [MapEntry(str(target), MIB, 1, "0")])
    n = CLASSES + 8
    slow = []
    for i in range(n):
        target.unlink(missing_ok=True)
        run = runner.iez(["dd", "if=/dev/zero", f"of={target}", "bs=256K", "count=8"], None, timeout=60,
                         IEZ_MAP=layout_map, IEZ_EMULATE=root, IEZ_IO_CLASS=f"copy-{i}", IEZ_IO_SHARE="0.25")
        assert run.returncode == 0, run.stderr
        assert read_layout(target) is not None
        slow.append(run.elapsed)
    uncapped = [i for i, t in enumerate(slow) if t < 0.4]
    assert not uncapped, f"processes {uncapped} ran uncapped: {[round(slow[i], 2) for i in uncapped]}"
    table = Table(root)
    try:
        keys = {c["key"]: c["cap"] for c in table.classes()}
    finally:
        table.close()
    assert keys.get(class_key(f"copy-{n - 1}")) == 0.25  # the last one had a slot of its own
