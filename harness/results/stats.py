"""Rates with intervals, the paired test and the paired difference's interval, from statistics libraries
where they have them.

A success rate without its n and interval overstates what a small eval knows (17/20 is 64%–95%, not
85%), so every rate the tools print is a `Rate`, labelled with the interval it carries: Wilson 95% for a
run of a size fixed in advance, anytime-valid 95% (`harness.results.anytime`) for one that may have
stopped early on what it saw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

from harness.results.anytime import rate_interval

CONFIDENCE = 0.95


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
