"""The interval of the mean over tasks (`harness.results.stats.mean_interval`): its coverage by simulation on
mixes of per-task rates that include 0 and 1 (a property test; seeded, so every run sees the same
draws), and where it shows: results.txt, results.json and the report's total row.

The same coverage check applied to the normal interval with per-task variances (zero at 0/n and n/n)
fails, so the check can fail."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from harness.results.organize import Options, organize
from harness.results.stats import MEAN_INTERVAL, Rate, mean_interval, stratified_score, wilson
from support.results_fixtures import new_run, record, write_records

RUNS = 2000
MIXES = {  # true per-task rates, episodes per task
    "0_to_1_n20": ([0, 0, 0.05, 0.2, 0.5, 0.8, 0.95, 1, 1, 1], 20),
    "near_0_n20": ([0, 0, 0, 0.02, 0.05, 0.05, 0.1, 0.1, 0, 0.02], 20),
    "near_1_n10": ([1, 1, 1, 0.98, 0.98, 0.95, 0.95, 1, 1, 0.9], 10),
    "0_and_1_unequal_n": ([0, 0, 0.05, 0.2, 0.5, 0.8, 0.95, 1, 1, 1], [5, 40, 10, 20, 20, 50, 8, 20, 3, 30]),
    # one task of 10 episodes carries the mean: a variance as if every task sat at the mean covers ~89%
    "0_and_a_small_task": ([0.5, 0, 0, 0], [10, 50, 50, 50]),
}


def _draw(rates: list[float], episodes: list[int] | int, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    p = np.array(rates, dtype=float)
    n = np.broadcast_to(np.array(episodes, dtype=float), (RUNS, p.size))
    k = np.random.default_rng(seed).binomial(n.astype(int), p).astype(float)
    return k, n, float(p.mean())


@pytest.mark.parametrize("mix", MIXES, ids=list(MIXES))
def test_covers_the_true_mean_in_at_least_94_percent_of_2000_runs(mix: str) -> None:
    k, n, truth = _draw(*MIXES[mix], seed=59)
    lo, hi = stratified_score(k, n)
    coverage = ((lo <= truth) & (truth <= hi)).mean()
    assert coverage >= 0.94, f"{mix}: coverage {coverage:.4f}"


def test_the_check_can_fail_a_normal_interval_with_per_task_variances() -> None:
    k, n, truth = _draw(*MIXES["near_0_n20"], seed=59)
    p = k / n
    half = norm.ppf(0.975) * np.sqrt((p * (1 - p) / n).sum(axis=-1)) / p.shape[-1]
    coverage = ((p.mean(-1) - half <= truth) & (truth <= p.mean(-1) + half)).mean()
    assert coverage < 0.94


def test_unequal_n_leans_on_the_tasks_with_few_episodes() -> None:
    """Yan & Su's variance, M(1 - M) sum 1/n_t / T^2, would hide the 10-episode task behind the others."""
    lo, hi = stratified_score(np.array([5, 0, 0, 0]), np.array([10, 50, 50, 50]))
    z = norm.ppf(0.975)
    assert hi - lo > 2 * z * np.sqrt(0.125 * 0.875 * (1 / 10 + 3 / 50) / 16)
    assert lo <= 0.125 <= hi


def test_equal_n_is_the_pooled_wilson_and_unequal_n_centres_on_the_mean() -> None:
    k, n = np.array([3, 10, 0]), np.array([10, 10, 10])
    assert tuple(stratified_score(k, n)) == pytest.approx(wilson(13, 30))
    rates = [Rate(9, 10), Rate(1, 40)]
    lo, hi = mean_interval(rates)  # type: ignore[misc]
    assert lo < (0.9 + 0.025) / 2 < hi
    assert mean_interval([Rate(0, 5), Rate(0, 5)])[0] == 0.0  # type: ignore[index]
    assert mean_interval([Rate(5, 5), Rate(3, 3)])[1] == 1.0  # type: ignore[index]


def test_none_without_trials_or_in_an_adaptive_run() -> None:
    assert mean_interval([Rate(0, 0)]) is None
    assert mean_interval([Rate(3, 10, anytime=True), Rate(4, 10, anytime=True)]) is None
    assert mean_interval([Rate(3, 10), Rate(0, 0)]) == pytest.approx(wilson(3, 10))
    with pytest.raises(ValueError):
        stratified_score(np.array([3]), np.array([0]))


def test_shown_in_results_txt_json_and_report(tmp_path: Path) -> None:
    run = new_run(tmp_path)
    write_records(run, [record("table", "pick_cube", s, s < 17) for s in range(20)])
    write_records(run, [record("table", "push_cube", s, False) for s in range(10)])
    write_records(run, [record("shelf", "stack", s, True) for s in range(4)])
    [out] = organize(Options(str(run.root), "m1", tmp_path / "out", "none"), lambda _: None)
    lo, hi = stratified_score(np.array([0, 17, 4]), np.array([10, 20, 4]))
    bracket = f"[{100 * lo:.1f}–{100 * hi:.1f}]"
    total = next(line for line in (out / "results.txt").read_text().splitlines() if "TOTAL mean" in line)
    assert f"SR 61.7% {bracket}" in total and f"(brackets: {MEAN_INTERVAL})" in total
    mean = json.loads((out / "results.json").read_text())["totals"]["mean_over_tasks"]
    assert (mean["sr"], mean["sr_lo"], mean["sr_hi"]) == pytest.approx(((0.85 + 0 + 1) / 3, lo, hi))
    assert mean["interval"] == MEAN_INTERVAL and mean["hsr_lo"] is not None
    report = (out / "report.html").read_text()
    total_row = report[report.index("<tr class=total>") :].split("</tr>")[0]
    assert f"61.7% <span class=ci>{bracket}</span>" in total_row
