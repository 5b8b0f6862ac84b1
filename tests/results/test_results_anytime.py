"""The anytime-valid intervals and the decision API the run-level stopping rule is built on, on known
inputs: what each returns, its edges, its errors, and that decisions are deterministic and sticky."""

from __future__ import annotations

import numpy as np
import pytest

from harness.results.anytime import (
    compare_decision,
    precision_decided,
    rate_interval,
    rate_log_evidence,
)
from harness.results.stats import Rate, paired_diff_interval, wilson


@pytest.mark.parametrize(("k", "n"), [(17, 20), (0, 10), (10, 10), (100, 200), (3, 500)])
def test_rate_interval_is_wider_than_wilson_and_its_edges_are_where_the_evidence_reaches_20(
    k: int, n: int
) -> None:
    lo, hi = rate_interval(k, n)
    w_lo, w_hi = wilson(k, n)
    assert lo <= w_lo <= k / n <= w_hi <= hi
    for edge, bound in ((lo, 0.0), (hi, 1.0)):
        if edge != bound:
            assert rate_log_evidence(k, n, edge) == pytest.approx(np.log(20), abs=1e-6)


def test_rate_interval_refuses_bad_counts_naming_them() -> None:
    with pytest.raises(ValueError, match="n > 0"):
        rate_interval(0, 0)
    with pytest.raises(ValueError, match="k=5 n=3"):
        rate_interval(5, 3)


def test_rate_labels_the_interval_it_carries() -> None:
    fixed, anytime = Rate(17, 20), Rate(17, 20, anytime=True)
    assert fixed.label == "Wilson 95%" and anytime.label == "anytime-valid 95%"
    assert anytime.interval == pytest.approx(rate_interval(17, 20))
    assert anytime.text() == " 85.0% [52.5– 98.7] 17/20"
    assert anytime.as_dict()["interval"] == "anytime-valid 95%"
    assert fixed.as_dict()["interval"] == "Wilson 95%"
    assert Rate(0, 0, anytime=True).interval is None


def test_precision_decided() -> None:
    assert not precision_decided(0, 0, 0.05)
    assert not precision_decided(50, 100, 0.05)
    assert precision_decided(1000, 2000, 0.05)
    assert precision_decided(0, 100, 0.05)  # 0/100: [0, 3.6%], half-width 1.8%
    with pytest.raises(ValueError, match="half_width"):
        precision_decided(5, 10, 0.0)


def test_clear_wins_are_decided_in_both_directions() -> None:
    assert compare_decision([], 0.1) is None
    b_wins = [(False, True)] * 30
    assert compare_decision(b_wins, 0.1) == "better"
    assert compare_decision([(b, a) for a, b in b_wins], 0.1) == "worse"
    assert compare_decision(b_wins[:3], 0.1) is None


def test_equivalence_needs_a_margin_and_enough_agreeing_pairs() -> None:
    agree = [(True, True), (False, False)] * 1500
    assert compare_decision(agree, 0.1) == "equivalent"
    assert compare_decision(agree, 0.0) is None
    assert compare_decision(agree[:20], 0.1) is None
    with pytest.raises(ValueError, match="margin"):
        compare_decision(agree, 1.0)


def test_decisions_are_deterministic_and_stick_as_pairs_are_added() -> None:
    rng = np.random.default_rng(3)
    pairs = [(bool(a), bool(b)) for a, b in zip(rng.random(400) < 0.5, rng.random(400) < 0.75, strict=True)]
    decisions = [compare_decision(pairs[:n], 0.1) for n in range(1, len(pairs) + 1)]
    first = next(i for i, d in enumerate(decisions) if d is not None)
    assert decisions[first] == "better" and set(decisions[first:]) == {"better"}
    assert compare_decision(pairs, 0.1) == compare_decision(list(pairs), 0.1)
    assert compare_decision(pairs[::-1], 0.1) == "better"  # another order may decide at another n


def test_newcombe_paired_interval_known_value() -> None:
    """Fagerland, Lydersen & Laake's worked example (Cavo et al. 2012: 59 both, 6 and 16 discordant, 80
    neither): the square-and-add interval of the first rate minus the second is -0.1186 to -0.0046."""
    assert paired_diff_interval(both=59, b_only=6, a_only=16, neither=80) == pytest.approx(
        (-0.1186, -0.0046), abs=1e-4
    )
    lo, hi = paired_diff_interval(both=59, b_only=16, a_only=6, neither=80)  # type: ignore[misc]
    assert (lo, hi) == pytest.approx((0.0046, 0.1186), abs=1e-4)
    assert paired_diff_interval(0, 0, 0, 0) is None
    # 10/10 against 0/10, margins without variance (no correlation term): 1 - sqrt(2) * (1 - 0.7225)
    assert paired_diff_interval(0, 10, 0, 0) == pytest.approx((1 - np.sqrt(2) * (1 - wilson(10, 10)[0]), 1.0))
    with pytest.raises(ValueError, match="b_only=-1"):
        paired_diff_interval(1, -1, 0, 0)
