"""CPU utilisation from /proc/stat deltas and memory utilisation from /proc/meminfo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents import AgentError
from agents.host import CpuMeter, CpuTimes, cpu_percent, mem_percent, read_cpu_times

from agent_support import DATA, run_agent  # noqa: F401 (fixture)

STAT_HEAD = "cpu  {}\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 12345 0 0\nctxt 987\nbtime 1700000000\n"


def write_stat(path: Path, ticks: str) -> Path:
    path.write_text(STAT_HEAD.format(ticks))
    return path


def test_cpu_times_and_delta(tmp_path: Path):
    before = read_cpu_times(write_stat(tmp_path / "a", "100 0 50 800 50 0 0 0 0 0"))
    assert before == CpuTimes(busy=150, total=1000)
    # guest (10) is already inside user: not counted twice
    after = read_cpu_times(write_stat(tmp_path / "b", "200 0 100 1500 100 0 0 0 10 0"))
    assert after == CpuTimes(busy=300, total=1900)
    assert cpu_percent(before, after) == 16.67  # 150 busy of 900 ticks
    assert cpu_percent(after, after) == 0.0
    assert cpu_percent(CpuTimes(0, 0), CpuTimes(100, 100)) == 100.0
    # irq, softirq and steal are busy; iowait is idle
    old = read_cpu_times(write_stat(tmp_path / "c", "0 0 0 0 0 0 0 0"))
    new = read_cpu_times(write_stat(tmp_path / "d", "10 10 10 40 20 5 3 2"))
    assert cpu_percent(old, new) == 40.0
    # old kernels: only user nice system idle
    assert read_cpu_times(write_stat(tmp_path / "e", "1 2 3 4")) == CpuTimes(busy=6, total=10)


def test_cpu_meter_first_window_then_deltas(tmp_path: Path):
    stat = write_stat(tmp_path / "stat", "100 0 100 800 0 0 0 0 0 0")
    meter = CpuMeter(stat, first_window=0.01)
    assert meter.sample() == 0.0  # the file did not change during the first window
    write_stat(stat, "175 0 100 825 0 0 0 0 0 0")  # +75 busy, +25 idle
    assert meter.sample() == 75.0
    write_stat(stat, "175 0 100 925 0 0 0 0 0 0")
    assert meter.sample() == 0.0


def test_real_proc_files_are_in_range():
    assert 0 <= CpuMeter().sample() <= 100
    assert 0 < mem_percent() < 100


@pytest.mark.parametrize("text, words", [
    ("intr 1 2\n", "no 'cpu' line"),
    ("cpu 1 2 x 4\n", ":1: the cpu line holds a non-integer"),
    ("cpu 1 2\n", "at least 4"),
])
def test_bad_proc_stat(tmp_path: Path, text: str, words: str):
    path = tmp_path / "stat"
    path.write_text(text)
    with pytest.raises(AgentError, match=words):
        read_cpu_times(path)
    with pytest.raises(AgentError, match="cannot read CPU statistics"):
        read_cpu_times(tmp_path / "missing")


def test_mem_percent(tmp_path: Path):
    path = tmp_path / "meminfo"
    path.write_text("MemTotal:        1000000 kB\nMemFree:          100000 kB\nMemAvailable:     250000 kB\n"
                    "Buffers:           10000 kB\nCached:            50000 kB\nHugePages_Total:       0\n")
    assert mem_percent(path) == 75.0
    path.write_text("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 200 kB\nSReclaimable: 50 kB\n")
    assert mem_percent(path) == 60.0  # no MemAvailable: free + buffers + cached + reclaimable
    path.write_text("MemFree: 100 kB\n")
    with pytest.raises(AgentError, match="no MemTotal"):
        mem_percent(path)


@pytest.mark.slow
def test_cli_uses_the_given_proc_files(tmp_path: Path, run_agent):
    stat = write_stat(tmp_path / "stat", "1 2 3 4 5 6 7 8 0 0")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 2000 kB\nMemAvailable: 500 kB\n")
    done = run_agent("--once", "--json", "--lctl-output", str(DATA / "osd.txt"), "--oss-id", "x",
                     "--proc-stat", str(stat), "--meminfo", str(meminfo))
    assert done.returncode == 0, done.stderr
    msg = json.loads(done.stdout)
    assert (msg["cpu_pct"], msg["mem_pct"]) == (0.0, 75.0)
    done = run_agent("--once", "--json", "--lctl-output", str(DATA / "lustre-2.15-ex8761-lctl.txt"),
                     "--meminfo", str(tmp_path / "no"))
    assert done.returncode == 2
    assert done.stderr == (f"iez-agent: error: cannot read memory statistics {tmp_path / 'no'}: "
                           f"No such file or directory\n")
