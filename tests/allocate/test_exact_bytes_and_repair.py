"""Issue 29: the fill cap in exact integer arithmetic, a PFL component's exact object bytes, and the batch repair
never making a batch slower than the class-by-class solve alone."""

from fractions import Fraction

import numpy as np
import pytest

from iez.allocate import make_policy
from iez.allocate.base import StripeRules, expand_requests, part_objects
from iez.model import (
    ALL_OSTS,
    EOF_END,
    Allocation,
    Component,
    MiB,
    WriteRequest,
    allowed_bytes,
    component_stripe_bytes,
    io_time,
)
from iez.sim.engine import prepare
from iez.sim.family import instance


@pytest.mark.parametrize("cap", [0.9, 0.95, 0.8, 0.333, 1.0, 0.123456789])
def test_allowed_bytes_is_the_floor_of_the_decimal_cap_times_capacity(cap):
    rng = np.random.default_rng(29)
    exact = Fraction(repr(cap))
    for total in [1, 19, 20, 1024, 4 << 40, *rng.integers(1, 1 << 52, 200).tolist()]:
        got = allowed_bytes(int(total), cap)
        assert got <= exact * total < got + 1  # never past the cap, and not a byte short of it
        assert got / total <= cap  # a fill computed in floating point never reads above the cap


def test_a_pfl_components_parts_hold_the_bytes_lustre_stripes_there():
    """Each part's objects, as iez and the greedy count them, are what the placed component holds (file offsets,
    not RAID-0 of the component's length from stripe 0)."""
    pfl = (Component(0, 1 * MiB, 1), Component(1 * MiB, 256 * MiB, 4), Component(256 * MiB, EOF_END, ALL_OSTS))
    rules = StripeRules()
    for size in (300 * MiB + 12345, 5000 * MiB + 7, 200 * MiB, 256 * MiB + 1):
        request = WriteRequest("a", "/f", size, 1, components=pfl)
        parts, fixed, owners = expand_requests([request], rules, lambda pool: 9)
        shape, first = owners[0]
        checked = 0
        for comp, indices, stripe in shape.components:
            for i in indices:
                part = parts[first + i]
                count = 9 if part.stripe_count == ALL_OSTS else part.stripe_count
                chosen = fixed[first + i] or stripe or rules.size(part.write_bytes, count)
                placed = Component(comp.start, comp.end, count, chosen, comp.pool, tuple(range(count)))
                assert part_objects(part, chosen, count) == component_stripe_bytes(placed, size)
                checked += 1
        assert checked == len(parts)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [3, 8, 12, 31])
def test_the_batch_repair_never_makes_a_batch_slower_than_the_class_solve(seed):
    """On each job of a family instance, on the instance's cluster: iez (repair, greedy comparison) places every
    file the class solve alone places and is no slower in the same model (every stored object's exact bytes)."""
    inst = instance(seed)
    cluster = prepare(inst.scenario).cluster

    def time(requests, placement) -> float:
        per_ost: dict[int, float] = {}
        for request, a in zip(requests, placement.outcomes):
            if isinstance(a, Allocation):
                for ost, b in a.stripe_bytes(request.write_bytes):
                    per_ost[ost] = per_ost.get(ost, 0.0) + b
        return io_time(cluster, per_ost, 0.5)

    judged = 0
    for job in inst.scenario.jobs():
        full = make_policy("iez").place(cluster, job.requests)
        alone = make_policy("iez", greedy_check=False).place(cluster, job.requests)
        assert len(full.refused) <= len(alone.refused)
        if len(full.refused) == len(alone.refused):
            assert time(job.requests, full) <= time(job.requests, alone) * (1 + 1e-9)
            judged += 1
    assert judged
