"""The SR/HSR-per-task bar chart with Wilson whiskers, as a PNG for the static report.

Bars alone invite reading 85% as 85%; the whiskers show how much a 20-episode cell actually knows.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from harness.results.aggregate import Summary
from harness.results.stats import Rate

COLORS = {"SR": "#3b7dd8", "HSR": "#8c5fc7"}


def _bar(rate: Rate) -> tuple[float, float, float]:
    """Height and (lower, upper) whisker lengths in percent; a cell without trials draws nothing."""
    if not rate.n:
        return 0.0, 0.0, 0.0
    lo, hi = rate.interval  # type: ignore[misc]
    value = 100 * rate.value  # type: ignore[operator]
    return value, value - 100 * lo, 100 * hi - value


def write_chart(summary: Summary, path: Path) -> None:
    """Grouped bars (SR, HSR) per task, labelled with scene/task and n, saved as a PNG."""
    tasks = summary.total.tasks
    multi_scene = len(summary.scenes) > 1
    labels = [f"{t.scene}/{t.task}" if multi_scene else t.task for t in tasks]
    labels = [f"{label}\nn={t.sr.n}" for label, t in zip(labels, tasks, strict=True)]
    width = 0.38
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(tasks) + 2), 4.2), dpi=110)
    for offset, (name, pick) in zip((-width / 2, width / 2), (("SR", "sr"), ("HSR", "hsr")), strict=True):
        bars = [_bar(getattr(t, pick)) for t in tasks]
        xs = [i + offset for i in range(len(tasks))]
        ax.bar(
            xs,
            [b[0] for b in bars],
            width,
            label=name,
            color=COLORS[name],
            yerr=[[b[1] for b in bars], [b[2] for b in bars]],
            capsize=4,
            ecolor="#333",
        )
    ax.set_xticks(range(len(tasks)), labels, rotation=30 if len(tasks) > 6 else 0, ha="center", fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel("rate (%) with Wilson 95% interval")
    ax.set_title("SR and HSR per task")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
