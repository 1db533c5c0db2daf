"""File-name templates: counters, rank fields and padding extrapolated; no name invented."""

from __future__ import annotations

import random

from iez.predict.names import NameModel, predict_names


def hacc(ranks: int, base="/lustre/scratch/hacc-io/FPP1"):
    return [(f"{base}-Part{r:08d}-of-{ranks:08d}.data", r) for r in range(ranks)]


def test_hacc_rank_fields_and_padding_are_kept():
    model = NameModel([hacc(8), hacc(8)])
    assert model.predict(list(range(8))) == [name for name, _ in hacc(8)]
    assert model.describe() == ["/lustre/scratch/hacc-io/FPP1-Part{rank:08}-of-00000008.data"]


def test_a_rank_beyond_the_observed_ones_is_formatted_by_the_template():
    names = predict_names([[(f"/s/testFile.{r:08d}", r) for r in range(4)]], [0, 1, 2, 3])
    assert names == [f"/s/testFile.{r:08d}" for r in range(4)]
    model = NameModel([[(f"/s/out.{r:04d}", r) for r in range(4)] for _ in range(2)])
    assert model.templates and model.describe() == ["/s/out.{rank:04}"]


def test_the_total_follows_the_run_size_when_runs_differ_in_size():
    model = NameModel([hacc(4), hacc(8)])
    assert "-of-{ranks:08}" in model.describe()[0]
    assert model.predict(list(range(8)))[7] == "/lustre/scratch/hacc-io/FPP1-Part00000007-of-00000008.data"


def test_a_run_counter_is_extrapolated_with_its_padding():
    runs = [[(f"/x/ckpt{10 * (k + 1):04d}/p{r}.h5", r) for r in range(3)] for k in range(3)]
    assert predict_names(runs, [0, 1, 2]) == ["/x/ckpt0040/p0.h5", "/x/ckpt0040/p1.h5", "/x/ckpt0040/p2.h5"]


def test_unpadded_fields_stay_unpadded():
    runs = [[(f"/x/step{k + 8}/f", 0)] for k in range(2)]  # step8, step9
    assert predict_names(runs, [0]) == ["/x/step10/f"]


def test_names_that_fit_no_template_are_not_invented():
    rng = random.Random(3)
    stamps = [[(f"/x/out.{rng.randint(10**8, 10**9)}.dat", 0)] for _ in range(3)]
    assert predict_names(stamps, [0]) == [None]
    letters = [[(f"/x/{word}.dat", 0)] for word in ("alpha", "beta", "gamma")]
    assert predict_names(letters, [0]) == [None]


def test_a_negative_value_or_two_requests_with_one_name_give_no_name():
    runs = [[("/x/part.0", 0), ("/x/part.1", 1)]] * 2
    assert predict_names(runs, [-1, 1]) == [None, "/x/part.1"]
    assert predict_names(runs, [1, 1]) == [None, None]


def test_one_run_of_names_is_assumed_to_repeat():
    run = [("/x/a.h5", 0), ("/x/b.h5", 0), ("/x/c.h5", 0)]
    assert predict_names([run], [0, 0, 0]) == ["/x/a.h5", "/x/b.h5", "/x/c.h5"]
