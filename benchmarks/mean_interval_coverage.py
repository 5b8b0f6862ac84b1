"""Coverage of the mean-over-tasks interval: how often the stratified score 95% interval
(`harness.results.stats.stratified_score`) holds the true mean of the per-task success rates, by simulation.

No simulator: each simulated run draws every task's successes from Binomial(n_t, p_t) for a mix of true
per-task rates (tasks at 0 and 1 included) and checks whether the interval holds mean(p_t). Beside it,
for comparison, the two alternatives the module's docstring explains it did not choose: the MOVER
interval (per-task Wilson limits added in quadrature, Zou & Donner 2008) and Yan & Su's stratified
Wilson with its variance M(1 - M) sum 1/n_t / T^2 (the same interval as ours when n is equal). The
`few_small_*` mixes put the mean on one or two tasks of 3-10 episodes among tasks of 50-200. It prints
figures; it does not pass or fail.

Last line: `min_coverage_pct=<worst mix> mean_coverage_pct=<over mixes> min_coverage_pct_equal_n=<...>
mover_min_coverage_pct=<...> yan_su_min_coverage_pct=<...> runs=<per mix> mixes=<count>`.

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

from harness.results.stats import stratified_score  # noqa: E402

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
    "few_small_0.5_5_among_0": ([0.5] + [0.0] * 9, [5] + [100] * 9),
    "few_small_0.5_5_among_.02": ([0.5] + [0.02] * 9, [5] + [100] * 9),
    "few_small_2x0.5_4_among_1": ([0.5, 0.5] + [1.0] * 8, [4, 4] + [50] * 8),
    "few_small_0.5_10_among_0": ([0.5] + [0.0] * 3, [10] + [50] * 3),
    "few_small_0.3_3_among_0": ([0.3] + [0.0] * 9, [3] + [200] * 9),
    "few_small_0.1_10_among_0": ([0.1] + [0.0] * 9, [10] + [100] * 9),
    "two_0.05_20_among_1": ([0.05] * 2 + [1.0] * 8, [20, 20] + [100] * 8),
}


def mover(k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-task Wilson limits added in quadrature around the mean over tasks (the alternative)."""
    p = k / n
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    lo, hi = np.minimum(lo, p), np.maximum(hi, p)
    tasks, mean = k.shape[-1], p.mean(axis=-1)
    return mean - np.sqrt(((p - lo) ** 2).sum(-1)) / tasks, mean + np.sqrt(((hi - p) ** 2).sum(-1)) / tasks


def yan_su(k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Yan & Su's stratified Wilson, equal weights: Wilson at n_eff = T^2 / sum 1/n_t (the alternative)."""
    z2 = 1.959963984540054**2
    mean, n_eff = (k / n).mean(axis=-1), k.shape[-1] ** 2 / (1 / n).sum(axis=-1)
    centre = (mean + z2 / (2 * n_eff)) / (1 + z2 / n_eff)
    half = np.sqrt(z2) / (1 + z2 / n_eff) * np.sqrt(mean * (1 - mean) / n_eff + z2 / (4 * n_eff**2))
    return centre - half, centre + half


def _coverage(bounds: tuple[np.ndarray, np.ndarray], truth: float) -> float:
    return float(100 * ((bounds[0] <= truth) & (truth <= bounds[1])).mean())


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
    print(f"{'mix':26s}  tasks  true_mean  coverage%  width  mover_cov%  mover_width  yan_su_cov%")
    ours, movers, yan_sus, equal_n = [], [], [], []
    for name, (rates, episodes) in MIXES.items():
        p = np.array(rates, dtype=float)
        n = np.broadcast_to(np.array(episodes, dtype=float), (args.runs, p.size))
        k = rng.binomial(n.astype(int), p).astype(float)
        truth = p.mean()
        lo, hi = stratified_score(k, n)
        m_lo, m_hi = mover(k, n)
        ours.append(_coverage((lo, hi), truth))
        movers.append(_coverage((m_lo, m_hi), truth))
        yan_sus.append(_coverage(yan_su(k, n), truth))
        if np.ndim(episodes) == 0:
            equal_n.append(ours[-1])
        print(
            f"{name:26s}  {p.size:5d}  {truth:9.3f}  {ours[-1]:9.2f}  {100 * (hi - lo).mean():5.1f}"
            f"  {movers[-1]:10.2f}  {100 * (m_hi - m_lo).mean():11.1f}  {yan_sus[-1]:11.2f}"
        )
    print(
        f"min_coverage_pct={min(ours):.2f} mean_coverage_pct={np.mean(ours):.2f} "
        f"min_coverage_pct_equal_n={min(equal_n):.2f} mover_min_coverage_pct={min(movers):.2f} "
        f"yan_su_min_coverage_pct={min(yan_sus):.2f} runs={args.runs} mixes={len(MIXES)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
