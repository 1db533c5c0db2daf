"""The OSSs of a set of OSTs as arrays, for the vectorised solvers (bandwidth, greedy, the batch repair).

Each solver needs, per OST, which of the OSSs in view serves it, and per OSS what a new job can get through
it (:func:`iez.model.oss_usable_bandwidth`, its load being its OSTs' in view): computed once here.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from iez.model import OSS, OST, oss_usable_bandwidth


def server_arrays(osts: Sequence[OST], osses: dict[str, OSS], oss_load_weight: float
                  ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``(oss_ids, oss_of, oss_bw)``: the OSSs of ``osts`` in first-seen order, each OST's position in that
    list, and each OSS's usable bandwidth."""
    oss_ids = list(dict.fromkeys(o.oss_id for o in osts))
    code = {oss_id: k for k, oss_id in enumerate(oss_ids)}
    oss_of = np.array([code[o.oss_id] for o in osts], dtype=np.int64)
    load = np.bincount(oss_of, weights=[o.load for o in osts], minlength=len(oss_ids))
    oss_bw = np.array([oss_usable_bandwidth(osses[oss_id], float(load[k]), oss_load_weight)
                       for k, oss_id in enumerate(oss_ids)], dtype=float)
    return oss_ids, oss_of, oss_bw
