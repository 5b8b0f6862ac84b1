"""The worker's side of an adaptive run (EVAL_STOP other than `fixed`): after a unit's records are
written it asks whether the unit's cell is now decided and, if so, writes the cell's marker; before
each claim its queue asks `decided(unit)` and leaves the units of a decided cell unclaimed.

The decision itself is `harness.results.cell_decision`'s (a function of the cell's records in seed
order, so every worker reaches the same one); the markers are `harness.config.decided`'s. A unit
claimed just before its cell's marker appeared runs and its episodes stay recorded; the report lists
them as run after the decision.
"""

from __future__ import annotations

from harness.config.decided import read_marker, write_marker
from harness.config.manifest import load_manifest
from harness.config.rundir import RunDir
from harness.config.stoprule import run_rule
from harness.episode.records import RecordKey
from harness.queue.units import Unit
from harness.results.cell_decision import (
    DECIDED,
    CellName,
    baseline_successes,
    cell_plans,
    successes,
    verdict,
)
from harness.worker.worklog import WorkerLog


class CellStopper:
    """Decides the cells of one run as their records come in, and remembers which are decided."""

    def __init__(self, run: RunDir, units: list[Unit], log: WorkerLog) -> None:
        self.run, self.log = run, log
        manifest = load_manifest(run.root)
        self.spec, self.rule = manifest.knobs.get("EVAL_STOP", "fixed"), run_rule(manifest)
        self.plans = cell_plans(units)
        self.known: set[CellName] = set()  # cells seen decided: a decision never changes
        self.baseline: dict[RecordKey, bool] | None = None  # the baseline's trials, read when needed

    def decided(self, unit: Unit) -> bool:
        """True when `unit`'s cell has a decision marker: its remaining units are not to be claimed."""
        if not self.rule.adaptive:
            return False
        cell = (unit.scene, unit.task)
        if cell not in self.known and read_marker(self.run, *cell) is not None:
            self.known.add(cell)
        return cell in self.known

    def after_unit(self, unit: Unit, records: dict[RecordKey, dict]) -> None:
        """Decide `unit`'s cell on `records` (its result dir's, just read) and mark it if decided."""
        cell = (unit.scene, unit.task)
        if not self.rule.adaptive or self.decided(unit):
            return
        plan = self.plans[cell]
        if self.baseline is None or any(
            (plan.task, plan.task_config, s) not in self.baseline for s in plan.seeds
        ):
            self.baseline = baseline_successes(self.rule)  # read again only while it lacks seeds of ours
        found = verdict(self.rule, plan, successes(records), self.baseline)
        if found.state != DECIDED:
            return
        write_marker(self.run, *cell, {"rule": self.spec, "decision": found.decision, "n": found.stop})
        self.known.add(cell)
        self.log(f"cell decided: {found.decision} at n={found.stop} of {found.planned}; its other units "
                 "are not claimed", unit)  # fmt: skip
