"""How many episodes an evaluation needs before it runs: from a baseline SR, the smallest ΔSR worth
seeing, alpha and power, the episodes per task and in total, for the tests the results tools run.

- Unpaired (two runs on different seeds, compared by their rates): the two-sided two-proportion z-test
  with the pooled variance under H0, closed form (Fleiss, Levin & Paik 2003, eq. 4.14 without the
  continuity correction; the same n as statsmodels' `samplesize_proportions_2indep_onetail`).
- Paired (two runs on the same seeds, as compare_runs pairs them): the exact McNemar test compare_runs
  prints, its power computed exactly (the discordant pairs D ~ Binomial(n, discordance), B's share of
  them Binomial(D, 1/2 + ΔSR / (2 discordance))), and n the smallest with that power. The normal
  approximation (Connor 1987) asks for 5–10% fewer pairs and falls short of the power it promises.
- The mean over tasks: the pooled test over T tasks needs the one-task n in total, so n / T a task
  (equal tasks assumed; tasks that differ make the pooled variance smaller). Each task: a verdict per
  task, Holm over the T tasks (`harness.results.verdicts`), whose first step is alpha / T: the n that
  finds one changed task among T.
- Adaptive (EVAL_STOP=compare:<baseline>:<margin>): the anytime-valid rule
  (`harness.results.anytime.decision_path`, alpha 0.05 a cell) stops a cell at its first decision or
  at the cap; its expected spend is estimated by a seeded Monte Carlo of paired seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom, norm

from harness.results.anytime import ALPHA as ADAPTIVE_ALPHA
from harness.results.anytime import decision_path

MAX_N = 200_000  # a search that passes this is not a plan


@dataclass(frozen=True)
class Design:
    """What a run should be able to see: B's SR = baseline + delta against the baseline's."""

    baseline: float  # SR of the baseline (A)
    delta: float  # the smallest ΔSR = SR(B) - SR(A) worth seeing (its sign does not matter)
    alpha: float = 0.05  # two-sided
    power: float = 0.8
    tasks: int = 1
    discordance: float | None = None  # paired: the share of seeds whose outcome differs between runs

    def __post_init__(self) -> None:
        checks = [
            (0 <= self.baseline <= 1, f"baseline SR must be in [0, 1], got {self.baseline}"),
            (self.delta != 0, "ΔSR must not be 0"),
            (0 <= self.baseline + self.delta <= 1, f"baseline + ΔSR must be in [0, 1], got {self.target}"),
            (0 < self.alpha < 1, f"alpha must be in (0, 1), got {self.alpha}"),
            (0 < self.power < 1, f"power must be in (0, 1), got {self.power}"),
            (self.tasks >= 1, f"tasks must be >= 1, got {self.tasks}"),
        ]
        if self.discordance is not None:
            d, p0 = self.discordance, self.baseline
            only_b, only_a = (d + self.delta) / 2, (d - self.delta) / 2
            checks.append((
                abs(self.delta) < d <= 1 and only_b <= 1 - p0 + 1e-12 and only_a <= p0 + 1e-12,
                f"discordance {d} is impossible with baseline {p0} and ΔSR {self.delta}: it must exceed "
                f"|ΔSR|, and B-only seeds ({only_b:.3f}) fit in A's failures, A-only ({only_a:.3f}) in A's "
                "successes",
            ))  # fmt: skip
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def target(self) -> float:
        return self.baseline + self.delta


def _z(q: float) -> float:
    return float(norm.ppf(q))


def unpaired_n(design: Design, alpha: float | None = None) -> int:
    """Episodes per run (per task) for the two-sided two-proportion z-test at alpha (default: the
    design's) to reach the design's power."""
    alpha = design.alpha if alpha is None else alpha
    p0, p1 = design.baseline, design.target
    mean = (p0 + p1) / 2
    spread = _z(1 - alpha / 2) * math.sqrt(2 * mean * (1 - mean)) + _z(design.power) * math.sqrt(
        p0 * (1 - p0) + p1 * (1 - p1)
    )
    return math.ceil(spread**2 / design.delta**2 - 1e-9)


def unpaired_power(design: Design, n: int, alpha: float | None = None) -> float:
    """The z-test's power with n episodes per run (normal approximation, the far tail ignored)."""
    alpha = design.alpha if alpha is None else alpha
    p0, p1 = design.baseline, design.target
    mean = (p0 + p1) / 2
    shift = abs(design.delta) * math.sqrt(n) - _z(1 - alpha / 2) * math.sqrt(2 * mean * (1 - mean))
    return float(norm.cdf(shift / math.sqrt(p0 * (1 - p0) + p1 * (1 - p1))))


def mcnemar_rejection(discordant: np.ndarray, alpha: float) -> np.ndarray:
    """Per number of discordant pairs D: the largest k with exact two-sided McNemar p = 2 P(X <= k)
    <= alpha (X ~ Binomial(D, 1/2)), -1 where none: the test rejects when min(b, c) <= k."""
    k = binom.ppf(alpha / 2, discordant, 0.5)
    k = np.where(binom.cdf(k, discordant, 0.5) <= alpha / 2, k, k - 1)
    return np.where(discordant > 0, k, -1).astype(int)


def paired_power(design: Design, n: int, alpha: float | None = None) -> float:
    """The exact power of exact McNemar on n paired seeds, for the design's discordance."""
    if design.discordance is None:
        raise ValueError("a paired design needs an assumed discordance")
    alpha = design.alpha if alpha is None else alpha
    d = np.arange(n + 1)
    k = mcnemar_rejection(d, alpha)
    share_b = (design.discordance + design.delta) / (2 * design.discordance)  # P(B only | discordant)
    reject = np.where(k >= 0, binom.cdf(k, d, share_b) + binom.sf(d - k - 1, d, share_b), 0.0)
    return float((binom.pmf(d, n, design.discordance) * reject).sum())


def paired_n(design: Design, alpha: float | None = None) -> int:
    """The fewest paired seeds (per task) at which exact McNemar reaches the design's power."""
    if design.discordance is None:
        raise ValueError("a paired design needs an assumed discordance")
    alpha = design.alpha if alpha is None else alpha
    d, delta = design.discordance, abs(design.delta)
    connor = (_z(1 - alpha / 2) * math.sqrt(d) + _z(design.power) * math.sqrt(d - delta**2)) ** 2 / delta**2
    n = max(1, int(0.9 * connor))
    while paired_power(design, n, alpha) < design.power:
        n += 1
        if n > MAX_N:
            raise ValueError(f"more than {MAX_N} paired seeds a task: not a plan")
    return n


@dataclass(frozen=True)
class Spend:
    """An adaptive cell's simulated spend at one true ΔSR."""

    delta: float
    mean_episodes: float
    decided: float  # share of cells decided before or at the cap
    wrong: float  # share decided wrongly: better at ΔSR <= 0, worse at >= 0, equivalent at |ΔSR| >= margin


def adaptive_spend(
    design: Design, cap: int, margin: float, delta: float, runs: int = 2000, seed: int = 0
) -> Spend:
    """Episodes an EVAL_STOP=compare cell runs on average when the true ΔSR is `delta`: a seeded Monte
    Carlo of `runs` cells of up to `cap` paired seeds with the design's discordance."""
    if design.discordance is None or abs(delta) >= design.discordance:
        raise ValueError("an adaptive spend needs a discordance above |ΔSR|")
    if cap < 1 or runs < 1:
        raise ValueError(f"cap and runs must be >= 1, got {cap} and {runs}")
    only_b, only_a = (design.discordance + delta) / 2, (design.discordance - delta) / 2
    u = np.random.default_rng(seed).random((runs, cap))
    diffs = np.where(u < only_b, 1.0, np.where(u < only_b + only_a, -1.0, 0.0))
    path = decision_path(diffs, margin)
    fired = (path != 0).any(axis=-1)
    episodes = np.where(fired, np.argmax(path != 0, axis=-1) + 1, cap)
    code = path[:, -1]
    wrong = (
        ((code == 1) & (delta <= 0)) | ((code == -1) & (delta >= 0)) | ((code == 2) & (abs(delta) >= margin))
    )
    return Spend(delta, float(episodes.mean()), float(fired.mean()), float(wrong.mean()))


@dataclass(frozen=True)
class Row:
    design: str
    test: str
    per_task: int
    runs: int  # how many runs need the episodes: 2 unpaired, 2 paired (the same seeds)

    def total(self, tasks: int) -> int:
        return self.per_task * tasks


@dataclass(frozen=True)
class Plan:
    design: Design
    rows: list[Row]
    cap: int | None = None
    margin: float | None = None
    spends: tuple[Spend, ...] = ()
    cap_note: str = ""


def plan(
    design: Design, cap: int | None = None, margin: float = 0.05, runs: int = 2000, seed: int = 0
) -> Plan:
    """Every row of the plan; with a discordance, the paired rows and the adaptive spend (cap: the
    paired one-task n unless given)."""
    tasks, alpha = design.tasks, design.alpha
    one = unpaired_n(design)
    each = f"α {alpha:g}/{tasks} (Holm)" if tasks > 1 else f"α {alpha:g}"
    rows = [
        Row("unpaired, mean over tasks", f"two-proportion z, α {alpha:g}", math.ceil(one / tasks), 2),
        Row("unpaired, each task", f"two-proportion z, {each}", unpaired_n(design, alpha / tasks), 2),
    ]
    if design.discordance is None:
        return Plan(design, rows)
    paired_one = paired_n(design)
    rows += [
        Row("paired, mean over tasks", f"exact McNemar, α {alpha:g}", math.ceil(paired_one / tasks), 2),
        Row("paired, each task", f"exact McNemar, {each}", paired_n(design, alpha / tasks), 2),
    ]
    note = "the cap as given" if cap is not None else f"the cap: the paired n of one task at α {alpha:g}"
    cap = paired_one if cap is None else cap
    spends = tuple(adaptive_spend(design, cap, margin, d, runs, seed) for d in (design.delta, 0.0))
    return Plan(design, rows, cap, margin, spends, note)


def plan_text(p: Plan) -> str:
    """The plan as a table and a few lines, each number with what it assumes."""
    d = p.design
    lines = [
        f"baseline SR {100 * d.baseline:.1f}%, smallest ΔSR worth seeing {100 * d.delta:+.1f} points, "
        f"α {d.alpha:g} (two-sided), power {100 * d.power:.0f}%, {d.tasks} task(s)"
        + ("" if d.discordance is None else f", discordance {100 * d.discordance:.1f}% of paired seeds"),
        "",
    ]
    head = ["design", "test", "episodes/task/run", f"total/run ({d.tasks} tasks)", "total (both runs)"]
    table = [head] + [
        [r.design, r.test, str(r.per_task), str(r.total(d.tasks)), str(r.runs * r.total(d.tasks))]
        for r in p.rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table]
    lines += [
        "",
        "mean over tasks: the pooled test over all tasks (equal tasks assumed); each task: a verdict per",
        "task as compare_runs gives it, able to find one changed task among them. Paired: both runs on the",
        "same seeds (a baseline run that exists already needs no new episodes).",
    ]
    if p.spends:
        at_delta, at_zero = p.spends
        lines += [
            "",
            f"adaptive, each task: EVAL_STOP=compare:<baseline>:{p.margin:g}, EVAL_TEST_NUM={p.cap},",
            f"  anytime-valid α {ADAPTIVE_ALPHA:g} a cell ({p.cap_note}):",
            f"  at ΔSR {100 * at_delta.delta:+.1f}: {at_delta.mean_episodes:.1f} episodes/task expected "
            f"({at_delta.mean_episodes * d.tasks:.0f} for {d.tasks} tasks), "
            f"{100 * at_delta.decided:.1f}% of cells decided by the cap",
            f"  at ΔSR 0: {at_zero.mean_episodes:.1f} episodes/task expected "
            f"({at_zero.mean_episodes * d.tasks:.0f} for {d.tasks} tasks), "
            f"{100 * at_zero.decided:.1f}% decided ({100 * at_zero.wrong:.1f}% wrongly)",
        ]
    return "\n".join(lines) + "\n"
