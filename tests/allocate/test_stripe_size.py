"""Stripe sizes by the paper's Method I and Method II (III-B3a), with its own numbers."""

import pytest

from iez.allocate.stripe import method_i, method_ii, stripe_size

HACC_FILE = 803_405_824  # Table I: one HACC-IO FPP file, 10 M particles over 8 ranks


def test_table_ii_stripe_size_for_the_hacc_io_file():
    assert stripe_size(HACC_FILE, 8) == 100_532_224


def test_worked_example_over_allocation_in_binary_kilobytes():
    # The paper: "a 766.175 MB file ... 833 KB bigger (Method II) and 63 KB more (Method I)".
    # The file is Table I's, 766.19 MiB; the paper's KB is KiB, each figure within one KiB.
    assert HACC_FILE / 2**20 == pytest.approx(766.19, abs=0.01)
    over_ii = method_ii(HACC_FILE, 8).allocated_bytes - HACC_FILE
    over_i = method_i(HACC_FILE, 8).allocated_bytes - HACC_FILE
    assert over_ii == 851_968 and abs(over_ii / 1024 - 833) <= 1
    assert over_i == 65_536 and abs(over_i / 1024 - 63) <= 1
    assert over_ii / HACC_FILE == pytest.approx(0.001, abs=0.0001)  # "(0.1%)"
    assert over_i / HACC_FILE == pytest.approx(0.00008, abs=0.00001)  # "(0.008%)"


def test_method_i_rest_uses_the_factor_n_that_equation_3_omits():
    plan = method_i(HACC_FILE, 8)
    unit = 2 * 65536
    n = HACC_FILE // (unit * 7)
    assert plan.per_stripe[:7] == (unit * n,) * 7
    rest = HACC_FILE - unit * n * 7
    assert plan.per_stripe[7] == unit * -(-rest // unit)
    assert plan.per_stripe[7] < plan.stripe_size  # Method I's drawback: a short last stripe


@pytest.mark.parametrize("write_bytes", [0, 1, 65536, 131072, 10**9, 2**40 + 3])
@pytest.mark.parametrize("count", [1, 2, 4, 8, 15])
def test_method_ii_gives_equal_aligned_stripes_that_cover_the_file(write_bytes, count):
    plan = method_ii(write_bytes, count)
    assert plan.stripe_size % (2 * 65536) == 0 and 0 < plan.stripe_size < 1 << 32
    assert plan.allocated_bytes >= write_bytes
    if plan.stripe_size * count >= write_bytes:  # no wrap-around: equal stripes, a little over-allocated
        assert set(plan.per_stripe) == {plan.stripe_size}
        assert plan.allocated_bytes - write_bytes < 2 * 65536 * count or write_bytes == 0
    else:  # past Lustre's 32-bit stripe size the file wraps around its OSTs (RAID-0)
        assert plan.stripe_size == (1 << 32) - 2 * 65536
        assert plan.allocated_bytes == write_bytes


def test_a_64_gib_file_at_stripe_count_8_gets_a_capped_stripe_and_wraps_around():
    plan = method_ii(64 << 30, 8)
    assert plan.stripe_size == (1 << 32) - 2 * 65536
    assert plan.allocated_bytes == 64 << 30 and plan.per_stripe[0] == 2 * plan.stripe_size + 16 * 2 * 65536


def test_alignment_is_configurable():
    assert stripe_size(10**6, 1, ap=65536, multiple=1) == 16 * 65536
    assert stripe_size(10**6, 1, ap=1 << 20, multiple=1) == 1 << 20


@pytest.mark.parametrize("args", [(-1, 4), (10, 0), (10, -2)])
def test_bad_inputs_are_refused_with_their_name(args):
    with pytest.raises(ValueError, match="write_bytes|stripe_count"):
        method_ii(*args)
