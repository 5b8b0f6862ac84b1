"""Anytime-valid (time-uniform) statistics: intervals and decisions that stay valid however often a run
looks at them and whenever it stops.

A fixed-n interval (Wilson, Newcombe) covers the truth at the one n chosen in advance; looked at after
every episode and acted on at the first exclusion it is wrong far more often than 5% (the property tests
show Wilson so used missing in about half of the runs). The objects here are confidence *sequences*: with
probability >= 95% they cover the truth at every n at once, so a run may stop a cell the first time one
says "decided" (Ville's inequality: a nonnegative supermartingale starting at 1 ever reaches 1/alpha with
probability <= alpha).

- One success rate: the beta-binomial mixture martingale (Robbins 1970; Howard, Ramdas, McAuliffe &
  Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann. Statist. 49,
  sec. 3), Jeffreys Beta(1/2, 1/2) mixing prior: p is excluded once the Bayes-factor-like ratio
  B(a+k, b+n-k) / B(a, b) / (p^k (1-p)^(n-k)) reaches 1/alpha.
- A paired difference dSR = SR(B) - SR(A) on the same seeds: the per-seed d = b - a in {-1, 0, 1},
  rescaled to x = (d + 1) / 2 in [0, 1], and the hedged betting capital of Waudby-Smith & Ramdas 2023
  ("Estimating means of bounded random variables by betting", JRSS-B 86, Thm 3) with its predictable
  plug-in empirical-Bernstein bets (their eq. 26; trunc 1/2, as confseq's `hedged_cs`). A one-sided
  capital process bets at the null's edge, so it is a supermartingale under the whole composite null
  (e.g. dSR <= 0): decisions are one-sided tests at alpha/2 each, which is the hedged CS at alpha.

Libraries looked at first: `expectation` needs Python >= 3.12, `savvi` numpy >= 2, `sequential-analysis`
is AGPL, and `confseq` (Howard's) is an sdist only, built from C++ against Boost with CMake and pybind11
~2.6, pulling pytest and multiprocess in at run time; its betting CS is per-sequence, too slow for the
simulations. The formulas are short, so they live here, vectorised over leading axes for those tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy.optimize import brentq
from scipy.special import betaln, xlogy

ALPHA = 0.05
PRIOR = (0.5, 0.5)  # the beta-binomial mixture's Jeffreys prior
BET_CAP = 0.5  # bets truncated at BET_CAP / (room to the bound), as in WSR's hedged CS
Decision = Literal["better", "worse", "equivalent"]
_CODES: dict[int, Decision] = {1: "better", -1: "worse", 2: "equivalent"}


def _check_counts(k: object, n: object) -> None:
    k_arr, n_arr = np.asarray(k), np.asarray(n)
    if np.any(n_arr < 0) or np.any(k_arr < 0) or np.any(k_arr > n_arr):
        raise ValueError(f"a success count needs 0 <= k <= n, got k={k} n={n}")


def rate_log_evidence(k: np.ndarray | int, n: np.ndarray | int, p: np.ndarray | float) -> np.ndarray:
    """log of the mixture martingale against SR = p after k successes in n trials (elementwise)."""
    _check_counts(k, n)
    a, b = PRIOR
    k_arr, n_arr = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    log_mix = betaln(a + k_arr, b + n_arr - k_arr) - betaln(a, b)
    return log_mix - xlogy(k_arr, p) - xlogy(n_arr - k_arr, 1 - np.asarray(p, dtype=float))


def rate_interval(k: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """The anytime-valid interval of SR after k successes in n trials: the p not yet excluded."""
    if n <= 0:
        raise ValueError(f"an anytime-valid interval needs n > 0 trials, got {k}/{n}")
    _check_counts(k, n)

    def inside(p: float) -> float:
        return float(np.log(1 / alpha) - rate_log_evidence(k, n, p))

    centre = k / n
    lo = 0.0 if inside(0.0) > 0 else brentq(inside, 0.0, centre)
    hi = 1.0 if inside(1.0) > 0 else brentq(inside, centre, 1.0)
    return float(lo), float(hi)


def precision_decided(k: int, n: int, half_width: float, alpha: float = ALPHA) -> bool:
    """The precision stopping rule: the anytime-valid interval of k/n is no wider than ±half_width."""
    if not 0 < half_width < 1:
        raise ValueError(f"half_width must be in (0, 1), got {half_width}")
    if n <= 0:
        return False
    lo, hi = rate_interval(k, n, alpha)
    return (hi - lo) / 2 <= half_width


def _bets(x: np.ndarray, alpha: float) -> np.ndarray:
    """WSR's predictable plug-in bets: lambda_t from the data before t only (a regularised running
    variance, one fake observation of mean 1/2 and variance 1/4), sized for a two-sided alpha."""
    t = np.arange(1, x.shape[-1] + 1, dtype=float)
    mean = (0.5 + np.cumsum(x, axis=-1)) / (t + 1)
    var = (0.25 + np.cumsum((x - mean) ** 2, axis=-1)) / (t + 1)
    var_before = np.concatenate([np.full((*x.shape[:-1], 1), 0.25), var[..., :-1]], axis=-1)
    return np.sqrt(2 * np.log(2 / alpha) / (var_before * t * np.log1p(t)))


def _log_capital(x: np.ndarray, m: np.ndarray | float, lam: np.ndarray, up: bool) -> np.ndarray:
    """Running log capital of betting that the mean of x is above m (up) or below it, per time."""
    m = np.asarray(m, dtype=float)
    room = m if up else 1 - m
    bet = np.minimum(lam, BET_CAP / np.maximum(room, 1e-12))
    step = (x - m) if up else (m - x)
    return np.cumsum(np.log1p(bet * step), axis=-1)


def _as_x(diffs: np.ndarray) -> np.ndarray:
    d = np.asarray(diffs, dtype=float)
    if d.size and (d.min() < -1 or d.max() > 1):
        raise ValueError("paired differences must lie in [-1, 1] (B - A per seed)")
    return (d + 1) / 2


def decision_path(diffs: np.ndarray, margin: float, alpha: float = ALPHA) -> np.ndarray:
    """Along the last axis, the decision reached by each time (0 none, 1 better, -1 worse,
    2 equivalent); the first one sticks. diffs are B - A per seed in [-1, 1], in seed order.

    better: dSR <= 0 rejected; worse: dSR >= 0 rejected; equivalent (only with margin > 0): both
    dSR <= -margin and dSR >= +margin rejected. Each rejection is a one-sided betting test at alpha/2,
    so a wrong decision is made at any time with probability <= alpha."""
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    x = _as_x(diffs)
    lam = _bets(x, alpha)
    level = np.log(2 / alpha)
    centre = 0.5
    better = _log_capital(x, centre, lam, up=True) >= level
    worse = _log_capital(x, centre, lam, up=False) >= level
    codes = np.where(better, 1, np.where(worse, -1, 0))
    if margin > 0:
        above_low = _log_capital(x, centre - margin / 2, lam, up=True) >= level
        below_high = _log_capital(x, centre + margin / 2, lam, up=False) >= level
        above_low = np.maximum.accumulate(above_low, axis=-1)
        below_high = np.maximum.accumulate(below_high, axis=-1)
        codes = np.where(codes == 0, np.where(above_low & below_high, 2, 0), codes)
    first = np.argmax(codes != 0, axis=-1)[..., None]  # 0 where never decided, and codes there are 0
    return np.where(np.arange(codes.shape[-1]) >= first, np.take_along_axis(codes, first, axis=-1), 0)


def _diffs(pairs: Sequence[tuple[bool, bool]]) -> np.ndarray:
    return np.array([int(bool(b)) - int(bool(a)) for a, b in pairs], dtype=float)


def compare_decision(
    pairs: Sequence[tuple[bool, bool]], margin: float, alpha: float = ALPHA
) -> Decision | None:
    """The stopping rule for a paired comparison: (A success, B success) per seed in the bank's seed
    order → "better" (B > A), "worse", "equivalent" (|dSR| < margin) or None (keep going). Deterministic
    in the order given; once reached along the sequence a decision never changes as pairs are added."""
    if not pairs:
        return None
    return _CODES.get(int(decision_path(_diffs(pairs), margin, alpha)[-1]))
