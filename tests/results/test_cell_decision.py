"""Cell decisions under EVAL_STOP: taken at the first prefix of the bank's seed order at which the rule
fires, only on a complete prefix, so the order in which units finish (the pool's size) never matters."""

from __future__ import annotations

import random

import pytest

from harness.config.stoprule import StopRule
from harness.queue.units import split
from harness.results.anytime import compare_decision, precision_decided
from harness.results.cell_decision import CAPPED, DECIDED, RUNNING, cell_plans, first_decision, verdict

PRECISION = StopRule("precision", half_width=0.3)
SEEDS = [7 * i + 3 for i in range(40)]  # a bank's order, not sorted by value
PLAN = cell_plans(split("s", "t", "s_clean", SEEDS, 2))[("s", "t")]


def outcome(seed: int) -> bool:
    return seed % 4 != 0


def test_the_plan_keeps_the_banks_order() -> None:
    shuffled = split("s", "t", "s_clean", SEEDS, 3)
    random.Random(1).shuffle(shuffled)
    assert cell_plans(shuffled)[("s", "t")].seeds == tuple(SEEDS)


def test_precision_fires_at_the_first_prefix_whose_interval_is_narrow_enough() -> None:
    outcomes = [outcome(s) for s in SEEDS]
    decision, n = first_decision(PRECISION, outcomes, None)  # type: ignore[misc]
    assert decision == "precise"
    assert precision_decided(sum(outcomes[:n]), n, 0.3)
    assert not any(precision_decided(sum(outcomes[:i]), i, 0.3) for i in range(1, n))


def test_compare_decisions_match_the_statistics() -> None:
    always, never = [True] * 40, [False] * 40
    assert first_decision(StopRule("compare", baseline="b", margin=0.0), always, never)[0] == "better"  # type: ignore[index]
    assert first_decision(StopRule("compare", baseline="b", margin=0.0), never, always)[0] == "worse"  # type: ignore[index]
    same = [outcome(s) for s in SEEDS]
    decision, n = first_decision(StopRule("compare", baseline="b", margin=0.3), same, same)  # type: ignore[misc]
    pairs = list(zip(same, same, strict=True))
    assert decision == "equivalent" == compare_decision(pairs[:n], 0.3)
    assert compare_decision(pairs[: n - 1], 0.3) is None


def test_a_gap_in_the_prefix_holds_the_decision_back() -> None:
    trials = {("t", "s_clean", s): outcome(s) for s in SEEDS}
    full = verdict(PRECISION, PLAN, trials, None)
    assert full.state == DECIDED and full.stop is not None
    gap = dict(trials)
    del gap[("t", "s_clean", SEEDS[1])]  # seed index 1 errored (or is still running)
    held = verdict(PRECISION, PLAN, gap, None)
    assert held.state == RUNNING and held.decision is None


def test_a_cell_that_never_decides_is_capped() -> None:
    coin = {("t", "s_clean", s): i % 2 == 0 for i, s in enumerate(SEEDS)}
    assert verdict(StopRule("precision", half_width=0.05), PLAN, coin, None).state == CAPPED


@pytest.mark.parametrize("workers", [1, 2, 3, 5, 8])
def test_any_completion_order_reaches_the_same_decision_at_the_same_point(workers: int) -> None:
    """Simulate a pool of `workers`: units finish in a random interleaving (a worker checks after each
    of its units); whoever first sees a decision writes it. It is always the one-worker decision."""
    units = split("s", "t", "s_clean", SEEDS, 2)
    reference = verdict(PRECISION, PLAN, {("t", "s_clean", s): outcome(s) for s in SEEDS}, None)
    for trial in range(20):
        rng = random.Random(trial * 31 + workers)
        pending, running, trials = list(units), [], {}
        first = None
        while first is None and (pending or running):
            while pending and len(running) < workers:
                running.append(pending.pop(0))  # claims go lowest slice first
            done = running.pop(rng.randrange(len(running)))
            trials.update({("t", "s_clean", s): outcome(s) for s in done.seeds})
            seen = verdict(PRECISION, PLAN, trials, None)
            first = seen if seen.state == DECIDED else None
        assert first is not None
        assert (first.decision, first.stop) == (reference.decision, reference.stop)
