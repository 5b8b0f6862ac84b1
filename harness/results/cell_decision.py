"""Each cell's state under the run's stopping rule (EVAL_STOP), decided on the records alone.

The decision looks only at the cell's seeds in the bank's order and only at the longest prefix of them
that has trials (an errored seed is retried, so the prefix waits for it): the cell is decided at the
first prefix length at which the rule fires. That makes it a function of the outcomes, never of which
worker finished first: a pool of any size reaches the same decision at the same stop point, and the
report counts exactly the seeds of that prefix (episodes that were already running when the cell was
decided are listed apart, as "ran after the decision"). Anytime-valid intervals
(`harness.results.anytime`) make stopping at the first firing sound.

States: `running` (not decided, not every planned seed has a trial yet), `decided` (better / worse /
equivalent for compare, precise for precision), `capped` (every planned seed has a trial and the rule
never fired: EVAL_TEST_NUM was the cap).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.config.rundir import RunDir
from harness.config.stoprule import StopRule
from harness.episode.records import RecordKey, is_trial, read_tree
from harness.queue.units import Unit
from harness.results.anytime import decision_path, precision_decided

CellName = tuple[str, str]  # (scene, task)
RUNNING, DECIDED, CAPPED = "running", "decided", "capped"


@dataclass(frozen=True)
class CellPlan:
    """One cell's planned seeds in the bank's order (the units' slices put back together)."""

    scene: str
    task: str
    task_config: str
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class CellVerdict:
    """Where a cell stands: its state, the decision and the prefix length it was taken at."""

    state: str  # running, decided, capped
    decision: str | None  # better, worse, equivalent, precise (None unless decided)
    stop: int | None  # seeds of the prefix the decision used (None unless decided)
    planned: int  # the cap: seeds planned for the cell
    ran: int  # seeds of the cell with a trial, in the prefix or not
    after: int  # trials of seeds beyond the stop point: ran after the decision, not counted

    @property
    def saved(self) -> int:
        """Planned episodes a decided cell never ran."""
        return self.planned - self.ran if self.state == DECIDED else 0

    @property
    def text(self) -> str:
        """`decided: better at n=14`, `capped`, `running`."""
        return f"{DECIDED}: {self.decision} at n={self.stop}" if self.state == DECIDED else self.state

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "decision": self.decision, "n": self.stop, "planned": self.planned,
                "ran": self.ran, "ran_after_decision": self.after, "saved": self.saved}  # fmt: skip


def cell_plans(units: list[Unit]) -> dict[CellName, CellPlan]:
    """Every cell's planned seeds from its units (which slice the plan in order)."""
    parts: dict[CellName, list[Unit]] = {}
    for unit in units:
        parts.setdefault((unit.scene, unit.task), []).append(unit)
    return {
        cell: CellPlan(
            *cell, us[0].task_config, tuple(s for u in sorted(us, key=lambda u: u.lo) for s in u.seeds)
        )
        for cell, us in parts.items()
    }


def successes(records: Mapping[RecordKey, dict[str, Any]]) -> dict[RecordKey, bool]:
    """The success of every seed whose latest record is a trial."""
    return {key: bool(r.get("success")) for key, r in records.items() if is_trial(r)}


def baseline_successes(rule: StopRule, env: Mapping[str, str] = os.environ) -> dict[RecordKey, bool] | None:
    """The baseline run's trials for a compare rule (None for other rules)."""
    if rule.kind != "compare":
        return None
    return successes(read_tree(RunDir(rule.baseline_dir(env)).results).records)


def _prefix(plan: CellPlan, trials: Mapping[RecordKey, bool]) -> list[bool]:
    out = []
    for seed in plan.seeds:
        key = (plan.task, plan.task_config, seed)
        if key not in trials:
            break
        out.append(trials[key])
    return out


def first_decision(
    rule: StopRule, outcomes: list[bool], baseline: list[bool] | None
) -> tuple[str, int] | None:
    """(decision, prefix length) at the first prefix of `outcomes` (this run's successes in seed order;
    `baseline`: the baseline's on the same seeds, for compare) at which the rule fires; None if none."""
    if rule.kind == "precision":
        assert rule.half_width is not None
        for n in range(1, len(outcomes) + 1):
            if precision_decided(sum(outcomes[:n]), n, rule.half_width):
                return "precise", n
        return None
    if rule.kind == "compare":
        assert baseline is not None and rule.margin is not None
        n = min(len(outcomes), len(baseline))
        if not n:
            return None
        diffs = np.array(outcomes[:n], dtype=float) - np.array(baseline[:n], dtype=float)
        path = decision_path(diffs, rule.margin)
        fired = np.flatnonzero(path)
        if not fired.size:
            return None
        return {1: "better", -1: "worse", 2: "equivalent"}[int(path[fired[0]])], int(fired[0]) + 1
    return None


def verdict(
    rule: StopRule,
    plan: CellPlan,
    trials: Mapping[RecordKey, bool],
    baseline: Mapping[RecordKey, bool] | None,
) -> CellVerdict:
    """The cell's state from this run's trials (and the baseline's, for compare)."""
    ran_seeds = [i for i, s in enumerate(plan.seeds) if (plan.task, plan.task_config, s) in trials]
    outcomes = _prefix(plan, trials)
    paired = None if baseline is None else _prefix(plan, baseline)
    found = first_decision(rule, outcomes, paired)
    planned = len(plan.seeds)
    if found is not None:
        decision, stop = found
        return CellVerdict(
            DECIDED, decision, stop, planned, len(ran_seeds), sum(i >= stop for i in ran_seeds)
        )
    state = CAPPED if len(ran_seeds) == planned else RUNNING
    return CellVerdict(state, None, None, planned, len(ran_seeds), 0)


def run_verdicts(
    rule: StopRule,
    units: list[Unit],
    records: Mapping[RecordKey, dict[str, Any]],
    env: Mapping[str, str] = os.environ,
) -> dict[CellName, CellVerdict]:
    """Every cell's verdict for a run with `units`, from its deduplicated records."""
    trials, baseline = successes(records), baseline_successes(rule, env)
    return {cell: verdict(rule, plan, trials, baseline) for cell, plan in cell_plans(units).items()}
