"""Lustre's limits on a layout, defined once: every check, schema and solver reads them from here.

They are Lustre's own (``lustre_user.h``, ``lod_verify_striping``, ``lfs setstripe``); a value written
anywhere else drifts (a test fails on a limit defined outside this module).
"""

from __future__ import annotations

#: ``LOV_MIN_STRIPE_SIZE``: stripe sizes and extent boundaries are multiples of 64 KiB.
STRIPE_ALIGNMENT = 65536
#: ``lmm_stripe_size`` is 32 bits: the largest stripe size is 4 GiB - 64 KiB. A file larger than
#: ``stripe_count`` such stripes wraps around its OSTs (RAID-0).
MAX_STRIPE_SIZE = (1 << 32) - STRIPE_ALIGNMENT
#: ``LOV_MAX_STRIPE_COUNT``: stripes in one layout component (-1, every OST, is capped to it).
MAX_STRIPE_COUNT = 2000
#: ``LOV_MAXPOOLNAME``: characters in an OST pool's name.
MAX_POOL_NAME = 15
#: OST indices are 16 bits in a layout (``l_ost_idx``); 0xFFFF is "any" (``LOV_OFFSET_DEFAULT``).
MAX_OST_INDEX = 65535
