"""An adaptive run as the results tools show it: each cell's verdict, the episodes each decided cell
counts (the seeds of its decided prefix), those that ran after its decision, and the episodes saved
against the cap.

A decided cell counts exactly the prefix of its seed order the decision used, never the episodes
that were already running when the cell was decided: how many of those there were depends on the
pool's size and timing, so counting them would make two runs on the same outcomes report different
numbers. They are listed apart ("ran after the decision"), and their records stay in the run dir.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.config.manifest import load_manifest
from harness.config.rundir import RunDir
from harness.config.stoprule import run_rule
from harness.episode.records import RecordKey
from harness.results.cell_decision import DECIDED, CellName, CellPlan, CellVerdict, cell_plans, run_verdicts
from harness.runqueue import run_units


@dataclass(frozen=True)
class Adaptive:
    """The stopping rule of a run and every cell's verdict under it."""

    rule: str  # EVAL_STOP as the contract froze it
    plans: dict[CellName, CellPlan]
    verdicts: dict[CellName, CellVerdict]

    @property
    def cap(self) -> int:
        return sum(v.planned for v in self.verdicts.values())

    @property
    def ran(self) -> int:
        return sum(v.ran for v in self.verdicts.values())

    @property
    def saved(self) -> int:
        return sum(v.saved for v in self.verdicts.values())

    @property
    def after(self) -> int:
        return sum(v.after for v in self.verdicts.values())

    def states(self) -> dict[str, int]:
        """How many cells are in each state, decisions spelled out: `decided: better` ..."""
        counts: dict[str, int] = {}
        for v in self.verdicts.values():
            name = f"{DECIDED}: {v.decision}" if v.state == DECIDED else v.state
            counts[name] = counts.get(name, 0) + 1
        return dict(sorted(counts.items()))

    def summary_line(self) -> str:
        states = ", ".join(f"{name} {n}" for name, n in self.states().items())
        return (
            f"adaptive run (EVAL_STOP={self.rule}): cells {states}; episodes ran {self.ran} of the cap "
            f"{self.cap}, saved {self.saved}; ran after a decision (not counted): {self.after}"
        )

    def counted(self, record: dict[str, Any]) -> bool:
        """False for an episode of a decided cell beyond its decided prefix."""
        cell = (str(record.get("scene") or record["task_config"]), record["task"])
        verdict, plan = self.verdicts.get(cell), self.plans.get(cell)
        if verdict is None or plan is None or verdict.state != DECIDED or verdict.stop is None:
            return True
        return int(record["seed"]) in plan.seeds[: verdict.stop]


def load_adaptive(
    run: RunDir, records: Mapping[RecordKey, dict[str, Any]], env: Mapping[str, str] = os.environ
) -> Adaptive | None:
    """The run's adaptive view, or None for a run with a fixed rule (or without run.yaml)."""
    if not run.manifest.exists():
        return None
    manifest = load_manifest(run.root)
    rule = run_rule(manifest)
    if not rule.adaptive:
        return None
    units = run_units(run)
    return Adaptive(manifest.knobs["EVAL_STOP"], cell_plans(units), run_verdicts(rule, units, records, env))
