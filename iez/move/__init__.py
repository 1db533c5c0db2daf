"""Moving data: the layout-aware mover of seed 000 and its naive baseline (``iez copy``).

    from iez.move import MoveOptions, move
    report = move([(src, dst, None)], MoveOptions(workers=4))   # None: iez places dst
    report.to_json()   # bytes, seconds, files, chunks per OST, congestion events, failures

- :mod:`iez.move.chunks`: a file cut into stripe-sized chunks, each on one OST;
- :mod:`iez.move.congestion`: the window/threshold/skip detector per OST;
- :mod:`iez.move.placement`: destinations placed by iez's allocator away from congested OSTs;
- :mod:`iez.move.files`: what ``SRC... DST`` copies, one chunk's copy, a file's atomic end;
- :mod:`iez.move.mover`: per-OST queues and workers (layout-aware), the :func:`move` entry point;
- :mod:`iez.move.naive`: file per thread, round-robin placement (the paper's baseline).
"""

from iez.move.congestion import Settings as CongestionSettings
from iez.move.mover import MoveOptions, MoveReport, move

__all__ = ["CongestionSettings", "MoveOptions", "MoveReport", "move"]
