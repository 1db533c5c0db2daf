"""The exact plan, as a mixed-integer linear program (scipy's HiGHS), for small instances.

The same problem as :func:`iez.rebalance.plan.plan_domain`: ``m_f`` (file f
is moved, costing its size) and ``y_fsj`` (stripe s of file f ends on OST j)
are binary; each stripe ends on one OST, a file's stripes on distinct OSTs, a
stripe leaves its OST only if its file is moved (``y_f,s,own + m_f >= 1``);
every OST's load lies between ``Lo * capacity`` and ``H * capacity`` with
``H - Lo <= target``, and no destination passes the fill cap. Minimise the
bytes moved. Variables grow as files x stripes x OSTs: a yardstick for the
heuristic (tests, benchmarks), not for a whole file system.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass

from iez.rebalance.plan import File, Move, Ost


@dataclass
class Exact:
    moves: list[Move]
    bytes_moved: int
    optimal: bool  # False: the solver stopped at its time limit with this feasible plan
    status: str
    bound: int  # bytes no plan can move fewer than (the solver's dual bound; bytes_moved when optimal)


@contextmanager
def _quiet_stdout():
    """File descriptor 1 on /dev/null for the duration (the solver writes there from C, past sys.stdout)."""
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def solve(osts: list[Ost], files: list[File], target: float, fill_cap: float = 0.95,
          time_limit: float = 60.0) -> Exact | None:
    """The fewest bytes moved (None when no plan reaches ``target``)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    order = [o.index for o in osts]
    pos = {j: n for n, j in enumerate(order)}
    scale = float(max(o.capacity for o in osts))
    cap = np.array([o.capacity for o in osts]) / scale
    used = np.array([o.used for o in osts], dtype=float) / scale
    fixed = used.copy()
    for f in files:
        for j, b in zip(f.osts, f.objects):
            fixed[pos[j]] -= b / scale
    nf, nj = len(files), len(order)
    stripes = [(fi, s) for fi, f in enumerate(files) for s in range(len(f.osts))]
    ny = len(stripes) * nj
    n = nf + ny + 2  # m, y, H, Lo
    H, LO = nf + ny, nf + ny + 1

    def y(k: int, j: int) -> int:
        return nf + k * nj + j

    rows, cols, vals, low, high = [], [], [], [], []
    r = 0

    def add(entries, lo, hi):
        nonlocal r
        for c, v in entries:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        low.append(lo)
        high.append(hi)
        r += 1

    for k, (fi, s) in enumerate(stripes):
        add([(y(k, j), 1.0) for j in range(nj)], 1.0, 1.0)
        add([(y(k, pos[files[fi].osts[s]]), 1.0), (fi, 1.0)], 1.0, np.inf)
    by_file: dict[int, list[int]] = {}
    for k, (fi, _) in enumerate(stripes):
        by_file.setdefault(fi, []).append(k)
    for fi, ks in by_file.items():
        if len(ks) > 1:
            for j in range(nj):
                add([(y(k, j), 1.0) for k in ks], -np.inf, 1.0)
    per_ost: list[list[tuple[int, float]]] = [[] for _ in range(nj)]
    for k, (fi, s) in enumerate(stripes):
        part = files[fi].objects[s] / scale
        for j in range(nj):
            per_ost[j].append((y(k, j), part))
    for j in range(nj):
        add(per_ost[j] + [(H, -cap[j])], -np.inf, -fixed[j])
        add(per_ost[j] + [(LO, -cap[j])], -fixed[j], np.inf)
        add(per_ost[j], -np.inf, max(fill_cap * cap[j], used[j]) - fixed[j] + 1e-9)
    add([(H, 1.0), (LO, -1.0)], -np.inf, target)
    matrix = coo_matrix((vals, (rows, cols)), shape=(r, n)).tocsr()
    cost = np.zeros(n)
    cost[:nf] = [f.size / scale for f in files]
    integrality = np.ones(n)
    integrality[[H, LO]] = 0
    lower, upper = np.zeros(n), np.ones(n)
    lower[[H, LO]], upper[[H, LO]] = -1.0, 2.0
    with _quiet_stdout():  # HiGHS may print a diagnostic line on the process's stdout, where the plan's JSON goes
        res = milp(cost, constraints=LinearConstraint(matrix, low, high), integrality=integrality,
                   bounds=Bounds(lower, upper), options={"time_limit": time_limit, "disp": False})
    if res.x is None:
        return None
    x = res.x
    moves = []
    for fi, f in enumerate(files):
        if x[fi] < 0.5:
            continue
        to = []
        for k in by_file[fi]:
            to.append(order[int(np.argmax([x[y(k, j)] for j in range(nj)]))])
        if tuple(to) != f.osts:
            moves.append(Move(f, tuple(to)))
    moved = sum(m.bytes for m in moves)
    dual = getattr(res, "mip_dual_bound", None)
    bound = moved if res.status == 0 or dual is None else int(min(moved, dual * scale))
    return Exact(moves, moved, res.status == 0, res.message, bound)
