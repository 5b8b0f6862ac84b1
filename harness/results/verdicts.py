"""Per-task verdicts of a paired comparison, corrected for testing many tasks at once.

Each task gets the test the pooled total gets (exact McNemar on its discordant pairs); testing 10
tasks at 5% each calls at least one of them changed in ~40% of comparisons where none did, so the
p-values are Holm-adjusted (Holm 1979, statsmodels' `multipletests`) before a task is called better
or worse. Holm keeps the chance of any wrong call among the tasks (the family-wise error rate) at
alpha whatever the tasks' dependence, and never calls fewer tasks than Bonferroni. Not
Benjamini–Hochberg: it bounds the expected share of wrong calls instead, a weaker promise for the
claim "these tasks got better".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from statsmodels.stats.multitest import multipletests

from harness.results.stats import PairedTest

ALPHA = 0.05
CORRECTION = "holm"
BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no difference"


@dataclass(frozen=True)
class TaskVerdict:
    """One task's paired test, its Holm-adjusted p-value and what it says about B against A."""

    name: str
    test: PairedTest
    p_holm: float
    verdict: str  # better (B > A), worse, or no difference at alpha after Holm


def task_verdicts(tests: Sequence[tuple[str, PairedTest]], alpha: float = ALPHA) -> list[TaskVerdict]:
    """Holm over the tasks' exact McNemar p-values; a task whose adjusted p is <= alpha is better
    when B alone succeeded more often than A alone (test.c > test.b), else worse."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not tests:
        return []
    reject, adjusted, _, _ = multipletests([t.p_value for _, t in tests], alpha=alpha, method=CORRECTION)
    out = []
    for (name, test), rejected, p_holm in zip(tests, reject, adjusted, strict=True):
        verdict = (BETTER if test.c > test.b else WORSE) if rejected else NO_DIFFERENCE
        out.append(TaskVerdict(name, test, float(p_holm), verdict))
    return out
