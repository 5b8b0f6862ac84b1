"""The loss curve a training run writes beside its checkpoints (`<out>/loss_curve.png`).

matplotlib is imported only here, when a curve is drawn, so the rest of training needs only torch
and transformers.
"""

from __future__ import annotations

from pathlib import Path

SMOOTH_WINDOW = 50  # steps averaged in the curve's smoothed line


def plot_losses(losses: list[float], path: Path) -> None:
    """Write the raw and smoothed per-step losses (log scale) as a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    window = SMOOTH_WINDOW
    smooth = [
        sum(losses[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1))
        for i in range(len(losses))
    ]
    ax.plot(losses, alpha=0.3, label="L1 loss")
    ax.plot(smooth, label=f"mean of {window}")
    ax.set_xlabel("step"), ax.set_ylabel("loss (normalised targets)"), ax.set_yscale("log"), ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
