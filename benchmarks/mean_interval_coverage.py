"""Coverage of the mean-over-tasks interval: how often the stratified Wilson 95% interval
(`harness.results.mean_interval`) holds the true mean of the per-task success rates, by simulation.

No simulator: each simulated run draws every task's successes from Binomial(n_t, p_t) for a mix of true
per-task rates (tasks at 0 and 1 included) and checks whether the interval holds mean(p_t). Beside it,
for comparison, the MOVER interval (per-task Wilson limits added in quadrature, Zou & Donner 2008), the
narrower alternative the module's docstring explains it did not choose. It prints figures; it does not
pass or fail.

Last line: `min_coverage_pct=<worst mix> mean_coverage_pct=<over mixes> mover_min_coverage_pct=<...>
runs=<per mix> mixes=<count>`.

Example:
  $SIM_PY benchmarks/mean_interval_coverage.py --runs 20000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from statsmodels.stats.proportion import proportion_confint

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.results.mean_interval import stratified_wilson  # noqa: E402

MIXES: dict[str, tuple[list[float], list[int] | int]] = {  # name: (true rates, episodes per task)
    "mixed_0_to_1_n10": ([0, 0, 0.05, 0.2, 0.5, 0.8, 0.95, 1, 1, 1], 10),
    "mixed_0_to_1_n20": ([0, 0, 0.05, 0.2, 0.5, 0.8, 0.95, 1, 1, 1], 20),
    "mixed_0_to_1_n50": ([0, 0, 0.05, 0.2, 0.5, 0.8, 0.95, 1, 1, 1], 50),
    "libero_like_n50": ([1, 1, 1, 0.98, 0.96, 0.94, 0.9, 0.9, 0.85, 0.7], 50),
    "near_0_n20": ([0, 0, 0, 0.02, 0.05, 0.05, 0.1, 0.1, 0, 0.02], 20),
    "near_1_n10": ([1, 1, 1, 0.98, 0.98, 0.95, 0.95, 1, 1, 0.9], 10),
    "all_0.5_n20": ([0.5] * 10, 20),
    "three_tasks_n5": ([0, 0.5, 1], 5),
    "forty_tasks_n10": (list(np.linspace(0, 1, 40)), 10),
    "forty_near_0_n10": ([0.01] * 20 + [0.0] * 10 + [0.05] * 10, 10),
    "mixed_unequal_n": ([0, 0, 0.05, 0.2, 0.5, 0.8, 0.95, 1, 1, 1], [5, 40, 10, 20, 20, 50, 8, 20, 3, 30]),
    "near_0_unequal_n": ([0.02, 0.0, 0.05, 0.1, 0.0, 0.01], [50, 5, 10, 40, 20, 8]),
    "skewed_unequal_n": ([0.1, 0.9, 0.5, 0.5], [5, 100, 20, 10]),
}


def mover(k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-task Wilson limits added in quadrature around the mean over tasks (the alternative)."""
    p = k / n
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    lo, hi = np.minimum(lo, p), np.maximum(hi, p)
    tasks, mean = k.shape[-1], p.mean(axis=-1)
    return mean - np.sqrt(((p - lo) ** 2).sum(-1)) / tasks, mean + np.sqrt(((hi - p) ** 2).sum(-1)) / tasks


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20000, help="simulated runs per mix (default 20000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    rng = np.random.default_rng(args.seed)
    print(f"{args.runs} simulated runs per mix, 95% intervals of the mean over tasks")
    print(f"{'mix':18s}  tasks  true_mean  coverage%  width  mover_cov%  mover_width")
    coverages, mover_coverages = [], []
    for name, (rates, episodes) in MIXES.items():
        p = np.array(rates, dtype=float)
        n = np.broadcast_to(np.array(episodes, dtype=float), (args.runs, p.size))
        k = rng.binomial(n.astype(int), p).astype(float)
        truth = p.mean()
        lo, hi = stratified_wilson(k, n)
        m_lo, m_hi = mover(k, n)
        coverage = 100 * ((lo <= truth) & (truth <= hi)).mean()
        mover_coverage = 100 * ((m_lo <= truth) & (truth <= m_hi)).mean()
        coverages.append(coverage)
        mover_coverages.append(mover_coverage)
        print(
            f"{name:18s}  {p.size:5d}  {truth:9.3f}  {coverage:9.2f}  {100 * (hi - lo).mean():5.1f}"
            f"  {mover_coverage:10.2f}  {100 * (m_hi - m_lo).mean():11.1f}"
        )
    print(
        f"min_coverage_pct={min(coverages):.2f} mean_coverage_pct={np.mean(coverages):.2f} "
        f"mover_min_coverage_pct={min(mover_coverages):.2f} runs={args.runs} mixes={len(MIXES)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
