"""Runs as series: reading them in order, and the degenerate series continued exactly without a fit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from iez.predict.series import PRequest, detect, load_runs
from iez.predict.synth import SynthSpec, write_runs
from iez.trace.csvformat import write_trace


def runs_of(*values):
    return [np.array(v, dtype=float) for v in values]


def test_constant_series_is_continued_as_is():
    exact = detect(runs_of([8, 8, 8], [8, 8, 8]), 3)
    assert exact.method == "constant" and exact.order == (0, 0, 0)
    assert exact.forecast.tolist() == [8, 8, 8]


def test_ranks_repeating_every_run_are_periodic_with_the_run_length():
    ranks = list(range(8))
    exact = detect(runs_of(ranks, ranks, ranks), 8)
    assert exact.method == "periodic" and exact.seasonal_order == (0, 1, 0, 8)
    assert exact.forecast.tolist() == ranks


def test_a_single_run_is_taken_to_repeat():
    exact = detect(runs_of([0, 1, 2, 3]), 4)
    assert exact.method == "repeat" and exact.forecast.tolist() == [0, 1, 2, 3]


def test_a_counter_is_continued_with_its_step():
    exact = detect(runs_of([10, 13], [16, 19]), 2)
    assert exact.method == "linear" and exact.forecast.tolist() == [22, 25]


def test_runs_growing_by_the_same_change_each_time():
    exact = detect(runs_of([5, 7], [6, 9], [7, 11]), 2)
    assert exact.method == "seasonal-linear" and exact.forecast.tolist() == [8, 13]


def test_noisy_series_needs_a_model():
    rng = np.random.default_rng(0)
    assert detect([rng.normal(100, 5, 8) for _ in range(4)], 8) is None
    assert detect(runs_of([1, 2, 3], [1, 2, 4]), 3) is None  # two runs that differ: nothing exact


def row(path, size, rank, job, t):
    return dict(path=path, bytes_written=size, file_size=size, stripe_count=4, stripe_size=0, rank=rank, comm_size=2,
                open_time=f"{t:.6f}", pid=100 + rank, host="n1", app="a", job=job)


def test_one_directory_with_several_jobs_orders_runs_by_first_open_not_by_name(tmp_path):
    # job "10" ran before job "9": open times decide
    for rank in (1, 0):
        write_trace(tmp_path / f"iez-trace.n1.{100 + rank}.1.csv",
                    [row(f"/s/b.{rank}", 30 + rank, rank, "10", 1000.0), row(f"/s/b.{rank}", 40 + rank, rank, "9", 2000.0)])
    runs = load_runs(tmp_path)
    assert [r.run_id for r in runs] == ["10", "9"]
    assert [(q.file, q.write_bytes, q.rank) for q in runs[0].requests] == [("/s/b.0", 30, 0), ("/s/b.1", 31, 1)]


def test_run_subdirectories_in_natural_order(tmp_path):
    write_runs(SynthSpec("ior-fpp", 2, runs=2), tmp_path)
    (tmp_path / "run-0002").rename(tmp_path / "run-10")
    (tmp_path / "run-0001").rename(tmp_path / "run-9")
    assert [r.run_id for r in load_runs(tmp_path)] == ["run-0001", "run-0002"]  # job ids inside the files


def test_requests_csv_and_json_with_a_run_column(tmp_path):
    csv_path = tmp_path / "r.csv"
    csv_path.write_text("file,write_bytes,stripe_count,rank,run\n/s/b,20,2,1,2\n/s/a,10,2,0,2\n/s/a,11,2,0,10\n")
    runs = load_runs(csv_path)
    assert [r.run_id for r in runs] == ["2", "10"]
    assert runs[0].requests == (PRequest("/s/a", 10, 2, 0), PRequest("/s/b", 20, 2, 1))
    json_path = tmp_path / "r.json"
    json_path.write_text(json.dumps({"requests": [{"file": "/s/a", "write_bytes": 5, "stripe_count": 1, "rank": 0,
                                                    "run": 1}]}))
    assert load_runs(json_path)[0].requests == (PRequest("/s/a", 5, 1, 0),)


def test_unreadable_inputs_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_runs(tmp_path / "missing")
    with pytest.raises(ValueError, match="no iez-trace"):
        load_runs(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text("file,write_bytes,stripe_count,rank,run\n/s/a,lots,1,0,1\n")
    with pytest.raises(ValueError, match="write_bytes"):
        load_runs(bad)
