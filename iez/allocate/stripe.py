"""Stripe size under Lustre's 64 KiB alignment (paper III-B3a).

Lustre needs stripe sizes that are multiples of 64 KiB, the alignment
parameter ``AP``; the paper rounds to *even* multiples (``AP * 2``), and so do
we by default (``multiple=2``).

Method II (the paper's choice, ours too) gives every stripe ``AP*2*N`` bytes with
``N = ceil(writeBytes / (AP*2*stripeCount))``: equal stripes, a little
over-allocated.

Method I puts ``AP*2*N`` with ``N = floor(writeBytes / (AP*2*(stripeCount-1)))``
on the first ``stripeCount-1`` OSTs and the rounded-up rest on the last one. The
paper's equation 3 prints the rest as ``writeBytes - AP*2*(stripeCount-1)``; the
factor ``N`` is missing: the rest is ``writeBytes - AP*2*N*(stripeCount-1)``.

The paper's worked example ("a 766.175 MB file is over-allocated by 833 KB under
Method II and 63 KB under Method I") is the HACC-IO file of Table I,
803,405,824 bytes = 766.19 MiB at stripe count 8. Its over-allocations are
851,968 bytes = 832 KiB (Method II) and 65,536 bytes = 64 KiB (Method I): the
paper's kilobyte is the binary KiB (1024 bytes), each figure off by one KiB; in
decimal kB they would read 852 and 66.
"""

from __future__ import annotations

from dataclasses import dataclass

from iez.lustre_limits import MAX_STRIPE_SIZE
from iez.lustre_limits import STRIPE_ALIGNMENT as ALIGNMENT
from iez.model import raid0_bytes


@dataclass(frozen=True)
class StripePlan:
    """Bytes a method reserves per stripe; ``stripe_size`` is the layout's size."""

    stripe_size: int
    per_stripe: tuple[int, ...]

    @property
    def allocated_bytes(self) -> int:
        return sum(self.per_stripe)


def _check(write_bytes: int, stripe_count: int, ap: int, multiple: int) -> int:
    if write_bytes < 0:
        raise ValueError(f"write_bytes={write_bytes} is negative")
    if stripe_count < 1:
        raise ValueError(f"stripe_count={stripe_count} must be at least 1")
    if ap <= 0 or ap % 4096:
        raise ValueError(f"alignment {ap} must be a positive multiple of 4096")
    if multiple < 1:
        raise ValueError(f"alignment multiple {multiple} must be at least 1")
    return ap * multiple


def method_ii(write_bytes: int, stripe_count: int, ap: int = ALIGNMENT, multiple: int = 2,
              max_size: int = MAX_STRIPE_SIZE) -> StripePlan:
    """Equal stripes of ``AP*multiple*N`` bytes, ``N = ceil(w / (AP*multiple*sc))`` (at least 1),
    capped at the largest multiple of the unit within ``max_size``; a capped file wraps around
    its OSTs and ``per_stripe`` holds what each stripe object then stores."""
    unit = _check(write_bytes, stripe_count, ap, multiple)
    n = max(1, -(-write_bytes // (unit * stripe_count)))
    size = min(unit * n, max(unit, max_size // unit * unit))
    if size * stripe_count >= write_bytes:
        return StripePlan(size, (size,) * stripe_count)
    return StripePlan(size, tuple(raid0_bytes(write_bytes, size, stripe_count)))  # wrap-around


def method_i(write_bytes: int, stripe_count: int, ap: int = ALIGNMENT, multiple: int = 2) -> StripePlan:
    """Floor-sized stripes on the first ``sc-1`` OSTs, the rounded-up rest on the last one.

    With one stripe (or a file smaller than one unit per stripe) this is Method II.
    """
    unit = _check(write_bytes, stripe_count, ap, multiple)
    n = write_bytes // (unit * (stripe_count - 1)) if stripe_count > 1 else 0
    if n == 0 or unit * n > MAX_STRIPE_SIZE:
        return method_ii(write_bytes, stripe_count, ap, multiple)
    rest = write_bytes - unit * n * (stripe_count - 1)  # equation 3 with its missing N
    last = unit * -(-rest // unit)
    return StripePlan(unit * n, (unit * n,) * (stripe_count - 1) + (last,))


def stripe_size(write_bytes: int, stripe_count: int, ap: int = ALIGNMENT, multiple: int = 2,
                max_size: int = MAX_STRIPE_SIZE) -> int:
    """Stripe size the allocators use (Method II, capped at ``max_size``)."""
    return method_ii(write_bytes, stripe_count, ap, multiple, max_size).stripe_size
