"""Rates with intervals and the paired test, from statistics libraries rather than hand-rolled formulas.

A success rate without its n and interval overstates what a small eval knows (17/20 is 64%–95%, not
85%), so every rate the tools print is a `Rate`.
"""

from __future__ import annotations

from dataclasses import dataclass

from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Rate:
    """k successes of n trials, with its Wilson 95% interval (None when there are no trials)."""

    k: int
    n: int

    @property
    def value(self) -> float | None:
        return self.k / self.n if self.n else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson(self.k, self.n) if self.n else None

    def text(self) -> str:
        """`85.0% [64.0–94.8] 17/20`; `—  0/0` when there are no trials, never a fake 0%."""
        if not self.n:
            return "—  0/0"
        lo, hi = self.interval  # type: ignore[misc]
        return f"{100 * self.value:5.1f}% [{100 * lo:4.1f}–{100 * hi:5.1f}] {self.k}/{self.n}"

    def as_dict(self) -> dict[str, float | int | None]:
        lo, hi = self.interval or (None, None)
        return {"k": self.k, "n": self.n, "rate": self.value, "lo": lo, "hi": hi}


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
