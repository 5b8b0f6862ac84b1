"""The anytime-valid guarantees, checked by simulation (no simulator): over 2000 simulated runs per
setting, the confidence sequences miss the truth at *any* n in <= 5% of runs, and paired decisions at
dSR = 0 declare a difference in <= 5% of runs. The same checks applied to a plain Wilson interval looked
at after every episode fail, so these tests are known to be able to fail.

Seeded generators: every run of this file sees the same draws.
"""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint

from harness.results.anytime import ALPHA, decision_path, rate_log_evidence

RUNS, HORIZON = 2000, 300
TRUE_SRS = (0.05, 0.3, 0.5, 0.9)


def _successes(sr: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Running success counts k[run, n-1] and the matching n, for RUNS runs of HORIZON episodes."""
    outcomes = np.random.default_rng(seed).random((RUNS, HORIZON)) < sr
    return np.cumsum(outcomes, axis=1), np.broadcast_to(np.arange(1, HORIZON + 1), (RUNS, HORIZON))


def _paired_diffs(sr_a: float, sr_b: float, rho: float, seed: int) -> np.ndarray:
    """B - A per seed, (RUNS, HORIZON), from the 2x2 table with margins sr_a, sr_b and phi = rho."""
    both = sr_a * sr_b + rho * np.sqrt(sr_a * (1 - sr_a) * sr_b * (1 - sr_b))
    both = min(max(both, sr_a + sr_b - 1, 0.0), sr_a, sr_b)
    cells = np.array([both, sr_b - both, sr_a - both, 1 - sr_a - sr_b + both])
    drawn = np.random.default_rng(seed).choice(4, size=(RUNS, HORIZON), p=cells / cells.sum())
    return np.select([drawn == 1, drawn == 2], [1.0, -1.0], 0.0)


def _wilson_excludes(k: np.ndarray, n: np.ndarray, p: float) -> np.ndarray:
    lo, hi = proportion_confint(k, n, alpha=ALPHA, method="wilson")
    return (p < lo) | (p > hi)


@pytest.mark.parametrize("sr", TRUE_SRS)
def test_rate_sequence_covers_the_true_sr_at_every_n(sr: float) -> None:
    k, n = _successes(sr, seed=int(100 * sr))
    ever_missed = (rate_log_evidence(k, n, sr) >= np.log(1 / ALPHA)).any(axis=1)  # as rate_interval excludes
    assert ever_missed.mean() <= ALPHA, f"SR {sr}: missed in {ever_missed.mean():.1%} of runs"


@pytest.mark.parametrize("sr", TRUE_SRS)
def test_wilson_looked_at_every_n_misses_in_more_than_5pct(sr: float) -> None:
    """The control: the same check on a fixed-n interval fails, so the one above can fail."""
    k, n = _successes(sr, seed=int(100 * sr))
    ever_missed = _wilson_excludes(k, n, sr).any(axis=1)
    assert ever_missed.mean() > 2 * ALPHA, f"SR {sr}: Wilson peeking missed only {ever_missed.mean():.1%}"


CORRELATED_OR_SHIFTED = [(0.5, 0.5, 0.6), (0.3, 0.5, 0.0), (0.5, 0.8, 0.4), (0.9, 0.6, 0.0)]
PAIRED = [(sr, sr, 0.0) for sr in TRUE_SRS] + CORRELATED_OR_SHIFTED


@pytest.mark.parametrize(("sr_a", "sr_b", "rho"), PAIRED)
def test_paired_decisions_against_the_true_dsr_are_rare(sr_a: float, sr_b: float, rho: float) -> None:
    """`better` where dSR <= 0, or `worse` where dSR >= 0, at any n: in <= 5% of runs."""
    diffs = _paired_diffs(sr_a, sr_b, rho, seed=int(1000 * sr_a + 100 * sr_b))
    path = decision_path(diffs, margin=0.0)
    wrong = (((path == 1) & (sr_b - sr_a <= 0)) | ((path == -1) & (sr_b - sr_a >= 0))).any(axis=1)
    assert wrong.mean() <= ALPHA, f"{sr_a}->{sr_b}: wrong in {wrong.mean():.1%} of runs"


@pytest.mark.parametrize("sr", TRUE_SRS)
@pytest.mark.parametrize("rho", [0.0, 0.5])
def test_paired_decisions_at_zero_difference_rarely_declare_one(sr: float, rho: float) -> None:
    diffs = _paired_diffs(sr, sr, rho, seed=int(100 * sr) + int(10 * rho))
    declared = (decision_path(diffs, margin=0.0) != 0).any(axis=1)
    assert declared.mean() <= ALPHA, f"SR {sr} rho {rho}: declared a difference in {declared.mean():.1%}"


@pytest.mark.parametrize("sr", TRUE_SRS)
def test_wilson_on_the_discordant_pairs_looked_at_every_n_declares_too_often(sr: float) -> None:
    """The control: deciding when a Wilson interval of P(B wins | the pair differs) excludes 1/2, looked
    at after every pair (a peeked McNemar), declares a difference at dSR = 0 in more than 5% of runs."""
    diffs = _paired_diffs(sr, sr, 0.0, seed=int(100 * sr))
    b_wins, discordant = np.cumsum(diffs > 0, axis=1), np.cumsum(diffs != 0, axis=1)
    excludes = _wilson_excludes(b_wins, np.maximum(discordant, 1), 0.5) & (discordant > 0)
    assert excludes.any(axis=1).mean() > 2 * ALPHA


@pytest.mark.parametrize(("sr_a", "sr_b", "expected"), [(0.5, 0.8, 1), (0.7, 0.4, -1)])
def test_paired_decisions_find_a_large_difference(sr_a: float, sr_b: float, expected: int) -> None:
    """Power: a rule that never decided would pass the null test; this one finds a 0.3 gap in 200 pairs."""
    diffs = _paired_diffs(sr_a, sr_b, 0.0, seed=7)[:, :200]
    final = decision_path(diffs, margin=0.1)[:, -1]
    assert (final == expected).mean() >= 0.95
