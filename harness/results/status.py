"""Live status of a run: the lease queue's units, episodes done of planned, success so far, throughput,
ETA, live leases and recent errors. Safe while the pool runs: it reads the run dir and changes nothing
(the lease snapshot only touches a clock probe of its own, see `harness.queue.listing.snapshot`).
In an adaptive run (EVAL_STOP) it adds every cell's state (`harness.results.adaptive`), rates carry
the anytime-valid interval, and the unclaimed units of decided cells show as `skipped`.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.records import is_invalid, is_trial, read_tree
from harness.queue.listing import UnitState
from harness.queue.units import Unit
from harness.results import ResultsError
from harness.results.adaptive import Adaptive, load_adaptive
from harness.results.aggregate import Latency, latency_of
from harness.results.cell_decision import DECIDED
from harness.results.load import NodeGroup, node_groups
from harness.results.stats import Rate
from harness.runqueue import queue_states, run_units

THROUGHPUT_WINDOW_S = 600.0
RECENT_ERRORS = 5
STATES = ("done", "leased", "pending", "quarantined")
SKIPPED = "skipped"  # adaptive runs: a unit of a decided cell, never to be claimed


@dataclass
class Status:
    """One look at a run."""

    run: RunDir
    units: list[UnitState]
    plan_source: str  # where the unit plan came from: run.yaml, or the current knobs
    planned: int = 0  # episodes planned
    done: int = 0  # planned episodes whose latest record is a trial
    errored: int = 0  # planned episodes whose latest record errored (they will be re-run)
    invalid: int = 0  # planned episodes whose success held before the policy acted (not trials, not re-run)
    sr: Rate = field(default_factory=lambda: Rate(0, 0))
    hsr: Rate = field(default_factory=lambda: Rate(0, 0))
    per_hour: float | None = None  # episodes finished per hour, over the last THROUGHPUT_WINDOW_S
    eta_s: float | None = None
    recent_errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    adaptive: Adaptive | None = None  # an adaptive run's cell verdicts
    skipped: int = 0  # planned episodes of units left unclaimed because their cell was decided
    latency: dict[tuple[str, str], Latency] = field(default_factory=dict)  # (scene, task): round trips
    node_groups: list[NodeGroup] = field(default_factory=list)  # the records' node fingerprints

    @property
    def counts(self) -> dict[str, int]:
        counts = Counter(u.state for u in self.units)
        states = (*STATES, SKIPPED) if self.adaptive else STATES
        return {state: counts.get(state, 0) for state in states}

    @property
    def leases(self) -> list[UnitState]:
        return [u for u in self.units if u.state == "leased"]


def planned_units(run: RunDir) -> tuple[list[Unit], str]:
    """The run's units as its run.yaml plans them; a run without run.yaml is planned from the
    current knobs."""
    source = "run.yaml" if run.manifest.exists() else "current knobs (no run.yaml)"
    try:
        return run_units(run), source
    except ValueError as exc:  # a bad manifest, queue file, seed bank or knob: each names itself
        raise ResultsError(f"cannot plan the units of {run.root}: {exc}") from None


def finished_time(record: dict[str, Any]) -> float | None:
    """A record's finished_at (ISO 8601 or epoch seconds) as epoch seconds; None if unreadable."""
    value = record.get("finished_at")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        pass
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None


def collect(run: RunDir, settings: Settings, now: float | None = None) -> Status:
    """Everything the status display shows, from one pass over the lease dir and the records
    (`settings`: the queue's timing knobs judge the leases)."""
    if not run.queue.exists():
        raise ResultsError(f"{run.root} is not a run dir: it has no queue.txt")
    now = time.time() if now is None else now
    units, source = planned_units(run)
    status = Status(run, queue_states(run, settings, units), source)
    found = read_tree(run.results)
    status.warnings += found.warnings()  # torn lines, and each malformed record by file:line
    planned = [found.records.get((u.task, u.task_config, s)) for u in units for s in u.seeds]
    status.planned = len(planned)
    records = [r for r in planned if r is not None]
    trials = [r for r in records if is_trial(r)]
    status.invalid = sum(1 for r in records if is_invalid(r))
    status.done, status.errored = len(trials), len(records) - len(trials) - status.invalid
    try:
        status.adaptive = load_adaptive(run, found.records)
    except ValueError as exc:  # a bad manifest or seed bank: planned_units above names it first
        raise ResultsError(f"cannot read the stopping rule of {run.root}: {exc}") from None
    if status.adaptive is not None:
        _mark_skipped(status, status.adaptive)
        trials = [r for r in trials if status.adaptive.counted(r)]
    anytime = status.adaptive is not None
    status.sr = Rate(sum(bool(r.get("success")) for r in trials), len(trials), anytime)
    status.hsr = Rate(sum(bool(r.get("hard_success")) for r in trials), len(trials), anytime)
    _throughput(status, [t for r in records if (t := finished_time(r)) is not None], now)
    status.latency = _latency(records)
    status.node_groups = node_groups(run, records)
    status.warnings += [
        f"node group {g.ident} ({g.nodes}): {g.canary_text()}; organize_results will refuse to pool it"
        for g in status.node_groups
        if g.differs
    ]
    errored = [r for r in records if not is_trial(r) and not is_invalid(r)]
    status.recent_errors = _recent_errors(status.units, errored)
    return status


def _latency(records: list[dict[str, Any]]) -> dict[tuple[str, str], Latency]:
    """Each task's policy round trips so far (tasks none of whose records carry them are left out)."""
    by_task: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in records:
        scene = str(record.get("scene") or record["task_config"])
        by_task.setdefault((scene, record["task"]), []).append(record)
    found = {key: latency_of(rs) for key, rs in sorted(by_task.items())}
    return {key: lat for key, lat in found.items() if lat.episodes}


def _mark_skipped(status: Status, adaptive: Adaptive) -> None:
    """Pending units of decided cells will never be claimed: show them as skipped, not as work left."""
    for unit in status.units:
        verdict = adaptive.verdicts.get((unit.unit.scene, unit.unit.task))
        decided = verdict is not None and verdict.state == DECIDED and unit.unit.lo >= (verdict.stop or 0)
        if unit.state == "pending" and decided:
            unit.state = SKIPPED
            status.skipped += len(unit.unit.seeds)


def _throughput(status: Status, times: list[float], now: float) -> None:
    """Episodes per hour over the recent window (shorter while the run is young), and the ETA."""
    if not times:
        return
    window = min(THROUGHPUT_WINDOW_S, max(now - min(times), 1.0))
    recent = sum(1 for t in times if t >= now - window)
    status.per_hour = 3600.0 * recent / window
    remaining = status.planned - status.done - status.skipped - status.invalid
    if status.per_hour > 0:
        status.eta_s = 3600.0 * remaining / status.per_hour


def _recent_errors(units: list[UnitState], errored: list[dict[str, Any]]) -> list[str]:
    lines = []
    for unit in [u for u in units if u.last_error][:RECENT_ERRORS]:
        tag = "quarantined" if unit.state == "quarantined" else f"{unit.errored_attempts} errored attempt(s)"
        lines.append(f"unit {unit.key} ({tag}): {str(unit.last_error).strip()[:200]}")
    errored.sort(key=lambda r: finished_time(r) or 0.0, reverse=True)
    lines += [
        f"{r.get('finished_at')} {r['task']} seed {r['seed']} on {r.get('host')}: {str(r['error'])[:200]}"
        for r in errored[:RECENT_ERRORS]
    ]
    return lines
