"""plan_eval: its sample sizes against statsmodels' power functions (within one episode per task), its
powers against a seeded Monte Carlo of the same design (within ±3 points), the adaptive spend, and the
CLI."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom, norm
from statsmodels.stats.power import NormalIndPower
from statsmodels.stats.proportion import (
    binom_test_reject_interval,
    proportion_effectsize,
    samplesize_proportions_2indep_onetail,
)

from harness.results.planning import (
    Design,
    adaptive_spend,
    paired_n,
    paired_power,
    plan,
    unpaired_n,
    unpaired_power,
)
from harness.results.stats import PairedTest

REPO = Path(__file__).resolve().parents[2]
UNPAIRED = [(0.5, 0.1), (0.5, 0.05), (0.8, 0.1), (0.9, 0.05), (0.2, 0.1), (0.1, 0.1), (0.3, 0.2), (0.9, 0.08),
            (0.6, -0.1), (0.05, 0.05)]  # fmt: skip
SETTINGS = [(0.05, 0.8), (0.01, 0.9)]


@pytest.mark.parametrize(("alpha", "power"), SETTINGS)
@pytest.mark.parametrize(("baseline", "delta"), UNPAIRED)
def test_unpaired_n_is_statsmodels_two_proportion_sample_size(
    baseline: float, delta: float, alpha: float, power: float
) -> None:
    ours = unpaired_n(Design(baseline, delta, alpha, power))
    theirs = samplesize_proportions_2indep_onetail(
        delta, baseline, power, ratio=1, alpha=alpha, alternative="two-sided"
    )
    assert abs(ours - math.ceil(theirs)) <= 1


@pytest.mark.parametrize(("alpha", "power"), SETTINGS)
@pytest.mark.parametrize(("baseline", "delta"), [(0.45, 0.1), (0.4, 0.2), (0.475, 0.05), (0.3, 0.4)])
def test_unpaired_n_matches_normal_ind_power_where_arcsine_and_z_agree(
    baseline: float, delta: float, alpha: float, power: float
) -> None:
    """Cohen's arcsine effect size is another test; around SR 0.5 it asks for the same n (at SR 0.9 it
    asks for 16 fewer episodes: 122 against 138 at +8 points)."""
    h = proportion_effectsize(baseline + delta, baseline)
    theirs = NormalIndPower().solve_power(effect_size=h, alpha=alpha, power=power, ratio=1)
    assert abs(unpaired_n(Design(baseline, delta, alpha, power)) - math.ceil(theirs)) <= 1


def _paired_power_statsmodels(n: int, discordance: float, delta: float, alpha: float) -> float:
    """Exact McNemar's power from statsmodels' rejection bounds of the binomial test on the discordant."""
    share_b = (discordance + delta) / (2 * discordance)
    total = 0.0
    for d in range(n + 1):
        low, high = binom_test_reject_interval(0.5, d, alpha=alpha, alternative="two-sided")
        reject = binom.cdf(low, d, share_b) + binom.sf(high - 1, d, share_b) if d else 0.0
        total += binom.pmf(d, n, discordance) * reject
    return total


@pytest.mark.parametrize(
    ("baseline", "delta", "discordance", "alpha"),
    [(0.5, 0.1, 0.2, 0.05), (0.5, 0.2, 0.3, 0.05), (0.8, 0.1, 0.15, 0.01), (0.3, -0.1, 0.4, 0.05)],
)
def test_paired_n_from_statsmodels_exact_binomial_rejection_bounds(
    baseline: float, delta: float, discordance: float, alpha: float
) -> None:
    design = Design(baseline, delta, alpha, 0.8, discordance=discordance)
    n = paired_n(design)
    assert paired_power(design, n) == pytest.approx(_paired_power_statsmodels(n, discordance, delta, alpha))
    assert _paired_power_statsmodels(n, discordance, delta, alpha) >= 0.8
    assert _paired_power_statsmodels(n - 1, discordance, delta, alpha) < 0.8  # the fewest
    # the normal approximation (Connor 1987) asks for fewer and falls short of the power
    z = norm.ppf(1 - alpha / 2) * math.sqrt(discordance) + norm.ppf(0.8) * math.sqrt(discordance - delta**2)
    assert math.ceil(z**2 / delta**2) < n


def test_unpaired_power_against_a_monte_carlo_of_the_z_test() -> None:
    design = Design(0.5, 0.2, 0.05, 0.8)
    n = unpaired_n(design)
    rng = np.random.default_rng(59)
    k0, k1 = rng.binomial(n, 0.5, 4000), rng.binomial(n, 0.7, 4000)
    pooled = (k0 + k1) / (2 * n)
    z = (k1 - k0) / n / np.sqrt(pooled * (1 - pooled) * 2 / n)
    simulated = (np.abs(z) > norm.ppf(0.975)).mean()
    assert abs(simulated - unpaired_power(design, n)) <= 0.03, (simulated, n)


def test_paired_power_against_a_monte_carlo_of_compare_runs_mcnemar() -> None:
    design = Design(0.5, 0.2, 0.05, 0.8, discordance=0.3)
    n = paired_n(design)
    u = np.random.default_rng(59).random((1500, n))
    b_only, a_only = (u < 0.25).sum(axis=1), ((u >= 0.25) & (u < 0.3)).sum(axis=1)
    simulated = np.mean(
        [PairedTest(int(a), int(b)).p_value <= 0.05 for a, b in zip(a_only, b_only, strict=True)]
    )
    assert abs(simulated - paired_power(design, n)) <= 0.03, (simulated, n)


def test_adaptive_spend_is_seeded_saves_at_a_large_difference_and_errs_rarely_at_none() -> None:
    design = Design(0.5, 0.3, discordance=0.4)
    big = adaptive_spend(design, cap=100, margin=0.05, delta=0.3, runs=400)
    assert big == adaptive_spend(design, cap=100, margin=0.05, delta=0.3, runs=400)
    assert big.mean_episodes < 60 and big.decided > 0.9 and big.wrong == 0
    none = adaptive_spend(design, cap=100, margin=0.05, delta=0.0, runs=400)
    assert none.mean_episodes > 90 and none.wrong <= 0.05


def test_the_mean_over_tasks_needs_the_one_task_n_in_total() -> None:
    p = plan(Design(0.5, 0.1, tasks=10, discordance=0.2), runs=200)
    rows = {r.design: r for r in p.rows}
    assert rows["unpaired, mean over tasks"].per_task == math.ceil(unpaired_n(Design(0.5, 0.1)) / 10)
    assert rows["unpaired, each task"].per_task == unpaired_n(Design(0.5, 0.1, alpha=0.005))
    assert rows["paired, each task"].per_task == paired_n(Design(0.5, 0.1, alpha=0.005, discordance=0.2))
    assert p.cap == paired_n(Design(0.5, 0.1, discordance=0.2))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baseline", "0.9", "--delta", "0.2"], "baseline + ΔSR"),
        (["--baseline", "0.5", "--delta", "0.1", "--discordance", "0.05"], "discordance 0.05 is impossible"),
        (["--baseline", "0.5", "--delta", "0"], "must not be 0"),
    ],
)
def test_cli_refuses_impossible_designs(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts/plan_eval.py"), *args], capture_output=True, text=True
    )
    assert done.returncode == 2 and message in done.stderr


def test_cli_prints_the_plan() -> None:
    cmd = [sys.executable, str(REPO / "scripts/plan_eval.py"), "--baseline", "0.5", "--delta", "0.2",
           "--tasks", "4", "--discordance", "0.3", "--runs", "200"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    n = unpaired_n(Design(0.5, 0.2))
    assert f"two-proportion z, α 0.05           {math.ceil(n / 4)}" in done.stdout
    assert "EVAL_STOP=compare:<baseline>:0.05" in done.stdout
    helped = subprocess.run(
        [sys.executable, str(REPO / "scripts/plan_eval.py"), "--help"], capture_output=True, text=True
    )
    assert helped.returncode == 0 and "--discordance" in helped.stdout
