"""Utilisation-over-time figure (--plot). matplotlib is imported here only, and lazily."""
from __future__ import annotations

from pathlib import Path

from blendserve.simulator.runner import WorkloadRun


def plot_utilisation(runs: list[WorkloadRun], path: str | Path, bins: int = 200) -> None:
    """One panel per workload and policy: compute and memory utilisation over simulated time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    simulated = [(wr, name, run.result) for wr in runs for name, run in wr.runs.items() if run.result]
    if not simulated:
        raise ValueError("nothing was simulated to plot (--plan-only?)")
    cols = max(len(wr.runs) for wr in runs)
    rows = len(runs)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.6 * rows), squeeze=False, sharey=True)
    for ax in axes.ravel():
        ax.set_visible(False)
    for r, wr in enumerate(runs):
        for c, (name, run) in enumerate(wr.runs.items()):
            if run.result is None:
                continue
            ax = axes[r][c]
            ax.set_visible(True)
            t, cu, mu = run.result.timeline.utilisation(bins)
            ax.plot(t, cu, label="compute", lw=1)
            ax.plot(t, mu, label="memory", lw=1)
            ax.set_ylim(0, 1.02)
            frac = run.result.tokens_per_s / wr.optimum.tokens_per_s
            ax.set_title(f"{wr.name} / {name}: {frac:.1%} of optimum", fontsize=9)
            ax.set_xlabel("simulated s", fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("utilisation")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
