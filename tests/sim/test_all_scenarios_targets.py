"""Every named scenario, as ``iez simulate --scenario all --policy iez,rr,qos --json`` prints it.

On every scenario (mirrors included): the bound counts every byte a policy writes, every copy of a
mirrored file too; iez's modelled I/O time is within 5 % of the bound; and iez is never slower than a
Lustre baseline that kept to the fill cap without ENOSPC. A baseline is faster than iez only by
breaking the cap (``hetfill-new-oss-3``: round-robin writes the same bytes but fills old OSTs to 99.7 %
under a 95 % cap), and no placement that keeps to the cap beats the bound.
"""

from __future__ import annotations

import json

import pytest

from conftest import iez_cli
from iez.sim.engine import job_objects, prepare
from iez.sim.scenarios import SCENARIOS

pytestmark = pytest.mark.slow

#: Floating-point slack on "never slower" (the times are sums of bytes over bandwidths).
REL = 1e-9


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, dict]]:
    done = iez_cli("simulate", "--scenario", "all", "--policy", "iez,rr,qos", "--json")
    assert done.returncode == 0, done.stderr
    out: dict[str, dict[str, dict]] = {}
    for row in json.loads(done.stdout):
        assert "error" not in row, row
        out.setdefault(row["scenario"], {})[row["policy"]] = row
    assert set(out) == set(SCENARIOS)
    return out


def kept_to_the_cap(row: dict) -> bool:
    return row["enospc_files"] == 0 and row["max_fill"] <= row["fill_cap"]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_iez_is_within_5_percent_of_the_bound_and_never_slower_than_a_baseline_within_the_cap(rows, name):
    iez = rows[name]["iez"]
    assert iez["makespan_bound_s"] is not None and iez["makespan_bound_s"] > 0
    assert iez["makespan_s"] <= 1.05 * iez["makespan_bound_s"], (name, iez["makespan_s"] / iez["makespan_bound_s"])
    assert kept_to_the_cap(iez) and not iez["refused"] and iez["excluded_bytes"] == 0
    for policy in ("rr", "qos"):
        base = rows[name][policy]
        if kept_to_the_cap(base):
            assert iez["makespan_s"] <= base["makespan_s"] * (1 + REL), (name, policy,
                                                                        iez["makespan_s"] / base["makespan_s"])
            if not base["refused"]:  # no placement within the cap beats the bound
                assert base["makespan_s"] >= base["makespan_bound_s"] * (1 - REL), (name, policy)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_bound_counts_every_byte_every_policy_sends(rows, name):
    """The bound's stripe objects add up to the bytes each policy sent (every mirror copy included)."""
    prepared = prepare(SCENARIOS[name])
    counted = sum(sum(objects) for job in prepared.jobs for objects in job_objects(prepared, job.requests).values())
    for policy, row in rows[name].items():
        if not row["refused"]:
            assert sum(row["ost_bytes"]) == counted, (name, policy)


def test_a_baseline_faster_than_iez_broke_the_cap(rows):
    """Where a baseline beats iez, it wrote the same bytes past the fill cap (so the bound, which keeps to
    the cap, does not apply to it)."""
    faster = [(name, p) for name, by in rows.items() for p in ("rr", "qos")
              if by[p]["makespan_s"] < by["iez"]["makespan_s"] * (1 - REL)]
    assert ("hetfill-new-oss-3", "rr") in faster
    for name, policy in faster:
        base, iez = rows[name][policy], rows[name]["iez"]
        assert not kept_to_the_cap(base), (name, policy)
        assert sum(base["ost_bytes"]) == sum(iez["ost_bytes"]) and not base["refused"]  # not fewer bytes
