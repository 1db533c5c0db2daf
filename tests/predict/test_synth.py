"""``iez trace synth``: the paper's IOR and HACC-IO sizes and names, in the tracing mode's CSV format."""

from __future__ import annotations

import csv

import pytest

from conftest import run_iez
from iez.predict.synth import (GIB, HACC_HEADER, HACC_RECORD, SynthSpec, base_requests, hacc_file_size,
                               run_requests, write_runs)
from iez.trace.csvformat import TRACE_COLUMNS_V1
from iez.trace.parse import parse_dir, trace_files


def test_hacc_fpp_part_file_for_8_ranks_is_table_one_size_and_name():
    requests = base_requests(SynthSpec("hacc-fpp", 8))
    assert len(requests) == 8
    assert {size for _, size, _ in requests} == {803_405_824}
    assert requests[3] == ("FPP1-Part00000003-of-00000008.data", 803_405_824, 3)
    # 24 MiB header + 38 bytes per particle (7 float32, int64, uint16) x 20,480,000 particles
    assert HACC_HEADER == 24 * 2**20 and HACC_RECORD == 38
    assert hacc_file_size(20_480_000) == 803_405_824


def test_hacc_ssf_is_one_part_file_of_every_rank_particles():
    [(name, size, rank)] = base_requests(SynthSpec("hacc-ssf", 16))
    assert name == "SSF1-Part00000000-of-00000001.data" and rank == -1
    assert size == HACC_HEADER + 38 * 20_480_000 * 16


@pytest.mark.parametrize("ranks,total", [(8, 16 * GIB), (16, 32 * GIB), (32, 64 * GIB), (64, 64 * GIB)])
def test_ior_fpp_totals_follow_the_paper_and_split_evenly(ranks, total):
    requests = base_requests(SynthSpec("ior-fpp", ranks))
    assert sum(size for _, size, _ in requests) == total
    assert {size for _, size, _ in requests} == {total // ranks}
    assert requests[3][0] == "testFile.00000003"


@pytest.mark.parametrize("ranks,total", [(16, 32 * GIB), (32, 64 * GIB)])
def test_ior_ssf_is_one_shared_file_of_block_times_ranks(ranks, total):
    assert base_requests(SynthSpec("ior-ssf", ranks)) == [("testFile", total, -1)]


def test_noise_is_seeded_multiplicative_and_per_file():
    spec = SynthSpec("ior-fpp", 8, runs=3, noise=0.05, seed=4)
    first, again = run_requests(spec), run_requests(spec)
    assert first == again
    assert run_requests(SynthSpec("ior-fpp", 8, runs=3, noise=0.05, seed=5)) != first
    sizes = [size for run in first for _, size, _ in run]
    assert len(set(sizes)) == len(sizes)  # every file its own draw
    assert all(0.7 * 2 * GIB < s < 1.3 * 2 * GIB for s in sizes)
    assert all(size == 2 * GIB for run in run_requests(SynthSpec("ior-fpp", 8, runs=2)) for _, size, _ in run)


def test_bad_arguments_are_refused():
    for kwargs in (dict(workload="ior-xyz", ranks=4), dict(workload="ior-fpp", ranks=0),
                   dict(workload="ior-fpp", ranks=4, noise=-0.1), dict(workload="ior-fpp", ranks=4, stripe_count=0)):
        with pytest.raises(ValueError):
            SynthSpec(**kwargs)


@pytest.mark.slow
def test_cli_writes_one_trace_file_per_rank_per_run_that_parse_reads_back(tmp_path):
    out = tmp_path / "hacc"
    proc = run_iez("trace", "synth", "--workload", "hacc-fpp", "--ranks", "8", "--runs", "3", "--out", str(out),
                   "--stripe-count", "4")
    assert proc.returncode == 0, proc.stderr
    runs = sorted(p.name for p in out.iterdir())
    assert runs == ["run-0001", "run-0002", "run-0003"]
    for run in runs:
        files = trace_files(out / run)
        assert len(files) == 8 and all(f.name.startswith("iez-trace.client") for f in files)
        with open(files[0], newline="") as f:
            rows = list(csv.DictReader(f))
        assert list(rows[0]) == list(TRACE_COLUMNS_V1)  # synthetic runs know no layouts: the older header
        assert {r["job"] for r in rows} == {run}
        parsed = parse_dir(out / run)
        assert parsed.job == run and parsed.apps == ["hacc-io"]
        assert [(r.file, r.write_bytes, r.stripe_count, r.rank) for r in parsed.requests] == [
            (f"/lustre/scratch/hacc-io/FPP1-Part{k:08d}-of-00000008.data", 803_405_824, 4, k) for k in range(8)]


def test_ssf_traces_merge_into_one_shared_request(tmp_path):
    write_runs(SynthSpec("ior-ssf", 16, runs=1), tmp_path)
    parsed = parse_dir(tmp_path / "run-0001")
    assert [(r.file, r.write_bytes, r.rank) for r in parsed.requests] == [("/lustre/scratch/ior/testFile", 32 * GIB, -1)]
    assert len(trace_files(tmp_path / "run-0001")) == 16
