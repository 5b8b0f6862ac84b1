"""The 95% interval of the mean over tasks, the number papers report (the unweighted mean of the
per-task success rates): a stratified score (Wilson-type) interval whose variance at each candidate
mean is the largest any per-task rates with that mean could give.

The interval is the set of means M with (m - M)^2 <= z^2 V(M), m the mean of the task rates and
V(M) = max over rates p_t in [0, 1] with mean M of sum_t p_t (1 - p_t) / n_t / T^2. With the same n in
every task the maximum puts every task at M, and this is the stratified Wilson interval (Yan & Su 2010,
"Stratified Wilson and Newcombe confidence intervals for multiple binomial proportions", Stat.
Biopharm. Res. 2:329, equal weights), which is then the Wilson interval of the pooled count; with
unequal n (errored episodes, other caps) the maximum leans on the tasks with few episodes, so one task
of 5 episodes among tasks of 100 is not hidden behind them (Yan & Su's variance there covers 63%).

Why this one. Tasks at 0 or 1 and tasks that differ need no special case: the true variance is never
above V(M), so the interval errs wide, never narrow, up to the normal approximation itself. Measured
by simulation (benchmarks/mean_interval_coverage.py, 20,000 runs a mix, 20 mixes: tasks at 0 and 1,
40 near-zero tasks of 10 episodes, unequal n): 94.4-100% coverage, except where one or two tasks of
3-10 episodes carry the mean (92.6-94.3%, as MOVER's: a Wilson interval's own dips at such n). The
alternatives looked at: Wilson limits per task added in quadrature (MOVER, Zou & Donner 2008; Newcombe's
square-and-add for a sum) is a third narrower on mixed tasks but covers 85% with 40 near-zero tasks
of 10 episodes, because a task seen at 0/n adds nothing to the lower width; a bootstrap over tasks and
episodes is random, slow, and degenerate at 0/n and n/n (a resample of 0/n is always 0/n). The cost:
on a very mixed set of tasks it is up to 1.7x wider than MOVER (its coverage there is above 99%).
Deterministic; closed form with equal n, nested bisections otherwise (vectorised over runs).

A fixed-n interval: it does not hold for an adaptive run (EVAL_STOP), whose cells stopped on what
they saw, and is not given for one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import norm

from harness.results.stats import CONFIDENCE, Rate

METHOD = "stratified score 95%"
LAMBDA_STEPS = 45  # bisections of the maximiser's multiplier (its range is at most [-1, 1])
BOUND_STEPS = 32  # bisections of each end (to 2^-32)


def _worst_variance(mean: np.ndarray, n: np.ndarray) -> np.ndarray:
    """V(M): the largest variance of the mean over tasks for rates with mean M (shape `mean`), n along
    the last axis. The maximiser is p_t = clip((1 - lam n_t) / 2, 0, 1) (KKT), lam found by bisection."""
    scale = 1 / n.min(axis=-1)
    lo, hi = -scale, scale.copy()  # all rates 1 at lo, all 0 at hi
    for _ in range(LAMBDA_STEPS):
        lam = (lo + hi) / 2
        above = np.clip((1 - lam[..., None] * n) / 2, 0, 1).mean(axis=-1) > mean
        lo, hi = np.where(above, lam, lo), np.where(above, hi, lam)
    p = np.clip((1 - ((lo + hi) / 2)[..., None] * n) / 2, 0, 1)
    return (p * (1 - p) / n).sum(axis=-1) / n.shape[-1] ** 2


def _bound(mean: np.ndarray, n: np.ndarray, z2: float, end: float) -> np.ndarray:
    """The interval's end between `mean` and `end` (0 or 1), to 2^-BOUND_STEPS, rounded outwards."""
    inside, outside = mean.copy(), np.full_like(mean, end)
    for _ in range(BOUND_STEPS):
        mid = (inside + outside) / 2
        ok = (mean - mid) ** 2 <= z2 * _worst_variance(mid, n)
        inside, outside = np.where(ok, mid, inside), np.where(ok, outside, mid)
    whole = (mean - end) ** 2 <= z2 * _worst_variance(np.full_like(mean, end), n)
    return np.where(whole, end, outside)


def stratified_score(
    k: np.ndarray, n: np.ndarray, confidence: float = CONFIDENCE
) -> tuple[np.ndarray, np.ndarray]:
    """The interval of the mean over tasks of k/n along the last axis (tasks), vectorised over the
    leading axes (simulated runs). Every n must be > 0."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    if np.any(n <= 0) or np.any(k < 0) or np.any(k > n):
        raise ValueError("a mean-over-tasks interval needs 0 <= k <= n and n > 0 for every task")
    z2 = norm.ppf(1 - (1 - confidence) / 2) ** 2
    mean = (k / n).mean(axis=-1)
    if np.all(n == n[..., :1]):  # the same n everywhere: the stratified Wilson interval, closed form
        n_eff = n.shape[-1] * n[..., 0]
        centre = (mean + z2 / (2 * n_eff)) / (1 + z2 / n_eff)
        half = np.sqrt(z2) / (1 + z2 / n_eff) * np.sqrt(mean * (1 - mean) / n_eff + z2 / (4 * n_eff**2))
        lo, hi = centre - half, centre + half
    else:
        lo, hi = _bound(mean, n, z2, 0.0), _bound(mean, n, z2, 1.0)
    # made to contain the mean (float error at 0 and 1, as `stats.wilson`)
    return np.minimum(np.maximum(lo, 0.0), mean), np.maximum(np.minimum(hi, 1.0), mean)


def mean_interval(rates: Sequence[Rate]) -> tuple[float, float] | None:
    """The interval of the mean over the tasks with trials; None without any, or when a rate carries
    the anytime-valid interval (an adaptive run: a fixed-n interval does not hold there)."""
    counted = [r for r in rates if r.n]
    if not counted or any(r.anytime for r in counted):
        return None
    lo, hi = stratified_score(np.array([r.k for r in counted]), np.array([r.n for r in counted]))
    return float(lo), float(hi)
