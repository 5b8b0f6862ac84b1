"""Rates with intervals, the paired test and the paired difference's interval, from statistics libraries
where they have them.

A success rate without its n and interval overstates what a small eval knows (17/20 is 64%–95%, not
85%), so every rate the tools print is a `Rate`, labelled with the interval it carries: Wilson 95% for a
run of a size fixed in advance, anytime-valid 95% (`harness.results.anytime`) for one that may have
stopped early on what it saw. The mean over tasks, the number papers report, gets its own interval
(`mean_interval`: a stratified score interval, why that one in `stratified_score`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

from harness.results.anytime import rate_interval

CONFIDENCE = 0.95
MEAN_INTERVAL = "stratified score 95%"  # the label of the mean over tasks' interval


@dataclass(frozen=True)
class Rate:
    """k successes of n trials, with its 95% interval (None when there are no trials): Wilson, or the
    anytime-valid one when `anytime` (a cell that may have been stopped early)."""

    k: int
    n: int
    anytime: bool = False

    @property
    def label(self) -> str:
        """Which interval this rate carries, for reports: "Wilson 95%" or "anytime-valid 95%"."""
        return "anytime-valid 95%" if self.anytime else "Wilson 95%"

    @property
    def value(self) -> float | None:
        return self.k / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float] | None:
        if not self.n:
            return None
        return rate_interval(self.k, self.n, 1 - CONFIDENCE) if self.anytime else wilson(self.k, self.n)

    def text(self) -> str:
        """`85.0% [64.0–94.8] 17/20`; `—  0/0` when there are no trials, never a fake 0%."""
        if not self.n:
            return "—  0/0"
        lo, hi = self.interval  # type: ignore[misc]
        return f"{100 * self.value:5.1f}% [{100 * lo:4.1f}–{100 * hi:5.1f}] {self.k}/{self.n}"

    def as_dict(self) -> dict[str, float | int | str | None]:
        lo, hi = self.interval or (None, None)
        return {"k": self.k, "n": self.n, "rate": self.value, "lo": lo, "hi": hi, "interval": self.label}


def wilson(k: int, n: int) -> tuple[float, float]:
    """The Wilson score 95% interval of k/n (statsmodels), made to contain k/n: statsmodels' float
    arithmetic gives 0/3 a lower bound of 5.6e-17 and 10/10 an upper one of 0.9999999999999999."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"Wilson interval needs 0 <= k <= n and n > 0, got {k}/{n}")
    lo, hi = proportion_confint(k, n, alpha=1 - CONFIDENCE, method="wilson")
    return min(float(lo), k / n), max(float(hi), k / n)


def mean_rate(rates: list[Rate]) -> float | None:
    """Mean over tasks, each weighted equally (the reference's total); tasks without trials are left out."""
    values = [r.value for r in rates if r.value is not None]
    return sum(values) / len(values) if values else None


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
    """The 95% interval of the mean over tasks of k/n along the last axis (tasks), vectorised over the
    leading axes (simulated runs); every n must be > 0. The mean over tasks is the number papers report;
    its interval is a stratified score (Wilson-type) interval whose variance at each candidate mean is
    the largest any per-task rates with that mean could give.

    It is the set of means M with (m - M)^2 <= z^2 V(M), m the mean of the task rates and
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


@dataclass(frozen=True)
class PairedTest:
    """Exact McNemar on paired outcomes: b = A succeeded and B failed, c = the reverse."""

    b: int
    c: int

    @property
    def p_value(self) -> float:
        if self.b + self.c == 0:
            return 1.0
        result = mcnemar([[0, self.b], [self.c, 0]], exact=True)
        return float(result.pvalue)


def paired_diff_interval(both: int, b_only: int, a_only: int, neither: int) -> tuple[float, float] | None:
    """Newcombe's 95% interval for dSR = SR(B) - SR(A) on paired trials (Newcombe 1998, Stat Med 17:2635,
    method 10; the square-and-add form recommended by Fagerland, Lydersen & Laake 2014, Stat Med 33:2850),
    from the Wilson intervals of both rates and their estimated correlation. statsmodels has only the
    independent-samples version. For a run of a size fixed in advance; None when there are no pairs.

    both / neither: seeds both runs succeeded / failed on; b_only: B succeeded and A failed; a_only: the
    reverse."""
    cells = (both, b_only, a_only, neither)
    if min(cells) < 0:
        raise ValueError(
            f"paired counts must be >= 0, got both={both} b_only={b_only} a_only={a_only} neither={neither}"
        )
    n = sum(cells)
    if not n:
        return None
    k_b, k_a = both + b_only, both + a_only
    p_b, p_a = k_b / n, k_a / n
    lo_b, hi_b = wilson(k_b, n)
    lo_a, hi_a = wilson(k_a, n)
    margins = k_b * (n - k_b) * k_a * (n - k_a)
    cross = both * neither - b_only * a_only
    if not margins or 0 <= cross <= n / 2:
        phi = 0.0
    else:  # Newcombe's continuity-corrected correlation: shrink a positive cross product by n/2
        phi = ((cross - n / 2) if cross > 0 else cross) / math.sqrt(margins)
    diff = p_b - p_a
    down = math.sqrt(max((p_b - lo_b) ** 2 + (hi_a - p_a) ** 2 - 2 * phi * (p_b - lo_b) * (hi_a - p_a), 0.0))
    up = math.sqrt(max((hi_b - p_b) ** 2 + (p_a - lo_a) ** 2 - 2 * phi * (hi_b - p_b) * (p_a - lo_a), 0.0))
    return max(diff - down, -1.0), min(diff + up, 1.0)
