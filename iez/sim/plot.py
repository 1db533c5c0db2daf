"""Figures of simulator results: per OST, the bytes each policy placed and the fill before and after."""

from __future__ import annotations

from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only, no screen needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from iez.sim.engine import Result  # noqa: E402

#: One colour per policy in every panel, so a refused policy does not shift the others.
POLICY_COLOURS = {"rr": "tab:blue", "qos": "tab:orange", "paper": "tab:green", "iez": "tab:red", "random": "tab:grey"}
GiB = float(1 << 30)


def plot_placement(results: Sequence[Result], path: str) -> None:
    """One row per scenario: GiB placed per OST (a line per policy, I/O time in the legend), and fill per OST
    before the run (grey bars) and after it (a line per policy) with the fill cap."""
    scenarios = list(dict.fromkeys(r.scenario for r in results))
    fig, axes = plt.subplots(len(scenarios), 2, figsize=(12, 3.3 * len(scenarios)), squeeze=False)
    for (bytes_ax, fill_ax), name in zip(axes, scenarios):
        rows = [r for r in results if r.scenario == name]
        xs = np.arange(len(rows[0].ost_index))
        marker = "o" if len(xs) <= 100 else None
        for r in rows:
            colour = POLICY_COLOURS.get(r.policy)
            bytes_ax.plot(xs, np.array(r.ost_bytes) / GiB, marker=marker, markersize=2.5, linewidth=1.1,
                          color=colour, label=f"{r.policy} ({r.makespan_s:.3g} s, ENOSPC {r.enospc_files})")
            fill_ax.plot(xs, 100 * np.array(r.ost_fill_after), marker=marker, markersize=2.5, linewidth=1.1,
                         color=colour, label=f"{r.policy} after (max {r.max_fill:.1%})")
        fill_ax.bar(xs, 100 * np.array(rows[0].ost_fill_before), color="0.82", width=0.8, label="before")
        fill_ax.axhline(100 * rows[0].fill_cap, color="black", linestyle="--", linewidth=0.8, label="fill cap")
        bound = rows[0].makespan_bound_s
        bytes_ax.set_title(f"{name}: bytes placed" + (f" (I/O time bound {bound:.3g} s)" if bound else ""), fontsize=9)
        fill_ax.set_title(f"{name}: fill before and after", fontsize=9)
        bytes_ax.set_ylabel("GiB placed", fontsize=8)
        fill_ax.set_ylabel("fill (%)", fontsize=8)
        fill_ax.set_ylim(0, 105)
        for ax in (bytes_ax, fill_ax):
            ax.set_xlabel("OST (index order)", fontsize=8)
            if len(xs) <= 32:
                ax.set_xticks(xs, [str(i) for i in rows[0].ost_index], fontsize=6)
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=6.5)
            ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


#: The name earlier callers used.
plot_utilisation = plot_placement
