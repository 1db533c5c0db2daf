"""Figures of simulator results: OST utilisation per policy, one line per policy (paper Fig. 7)."""

from __future__ import annotations

from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only, no screen needed
import matplotlib.pyplot as plt  # noqa: E402

from iez.sim.engine import Result  # noqa: E402

#: One colour per policy in every panel, so a refused policy does not shift the others.
POLICY_COLOURS = {"rr": "tab:blue", "qos": "tab:orange", "paper": "tab:green", "iez": "tab:red", "random": "tab:grey"}


def plot_utilisation(results: Sequence[Result], path: str, columns: int = 3) -> None:
    """One panel per scenario: utilisation (%) of every OST, a line per policy; OSTCost in the legend."""
    scenarios = list(dict.fromkeys(r.scenario for r in results))
    rows = -(-len(scenarios) // columns)
    fig, axes = plt.subplots(rows, min(columns, len(scenarios)), figsize=(5.2 * min(columns, len(scenarios)),
                             3.4 * rows), squeeze=False)
    for ax, name in zip(axes.flat, scenarios):
        for r in (r for r in results if r.scenario == name):
            xs = range(1, len(r.ost_util) + 1)
            ax.plot(xs, [100 * u for u in r.ost_util], marker="o", markersize=2.5, linewidth=1.2,
                    color=POLICY_COLOURS.get(r.policy), label=f"{r.policy} (OSTCost {r.ost_cost:.2f})")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("OST index", fontsize=8)
        ax.set_ylabel("OST utilisation (%)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6.5)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(scenarios):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
