"""What an episode of each cell is expected to cost, from records already written, so that the
longest units are claimed first (`harness.queue.units.Unit.rank`) and the run does not end with
one slot grinding through a long unit while the others idle.

The run's own records come first (a resumed run, a fill-in, a second pool); a cell they do not
cover takes its cost from the newest earlier runs of the same seed bank and benchmark under the
same RUNS_ROOT. A cell nobody has run is priced from its task's step limit (recorded in run.yaml
when the run was created, where the benchmark tells it) at the seconds a step took in the records
read, or PRIOR_STEP_S when there are none: an upper bound, as an episode that succeeds stops early,
but one that orders a first run's tasks by how long they may take. Without a step limit the cost
is 0 (unknown): such a cell keeps the queue's random order.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from harness.config.manifest import ManifestError, load_manifest
from harness.config.rundir import RunDir, read_queue, task_config_name
from harness.episode.records import is_trial, read_tree

EARLIER_RUNS = 3  # earlier runs of the same bank read for costs, newest first
CANDIDATE_RUNS = 32  # run dirs looked at (newest run.yaml first) to find them: bounded NFS traffic
PRIOR_STEP_S = 0.05  # seconds an env step is priced at before any record tells (ManiSkill on a CPU)

Cell = tuple[str, str]  # (task, task_config)


def median_wall_s(records: Iterable[dict]) -> dict[Cell, float]:
    """The median wall seconds of a trial episode per (task, task_config)."""
    walls: dict[Cell, list[float]] = defaultdict(list)
    for record in records:
        if is_trial(record) and isinstance(record.get("wall_s"), int | float):
            walls[(record["task"], record["task_config"])].append(float(record["wall_s"]))
    return {cell: statistics.median(values) for cell, values in walls.items()}


def _same_bank_runs(run: RunDir) -> list[RunDir]:
    """The newest earlier runs beside `run` whose seed bank and benchmark are `run`'s."""
    mine = load_manifest(run.root)
    if mine.contract["seeds"] is None:
        return []
    key = (mine.contract["seeds"]["sha256"], mine.knobs["BENCHMARK"], mine.knobs["BENCH_CONFIG"])
    dated = []
    for path in run.root.parent.glob("*/run.yaml"):
        if path.parent != run.root:
            try:
                dated.append((path.stat().st_mtime, path.parent))
            except OSError:
                continue
    found = []
    for _, root in sorted(dated, reverse=True)[:CANDIDATE_RUNS]:
        try:
            other = load_manifest(root)
        except ManifestError:
            continue
        seeds = other.contract.get("seeds")
        if seeds and (seeds["sha256"], other.knobs["BENCHMARK"], other.knobs["BENCH_CONFIG"]) == key:
            found.append(RunDir(Path(root)))
        if len(found) == EARLIER_RUNS:
            break
    return found


def seconds_per_step(records: Iterable[dict]) -> float | None:
    """The median wall seconds per step of the trial episodes that took a step; None without one."""
    rates = [
        float(r["wall_s"]) / r["steps"]
        for r in records
        if is_trial(r) and isinstance(r.get("wall_s"), int | float) and isinstance(r.get("steps"), int)
        and r["steps"] > 0
    ]  # fmt: skip
    return statistics.median(rates) if rates else None


def seed_costs(run: RunDir) -> dict[Cell, float]:
    """Expected seconds of one episode per (task, task_config) of `run`: from records where they
    tell, else from the task's step limit."""
    records = list(read_tree(run.results).records.values())
    costs = median_wall_s(records)
    for earlier in _same_bank_runs(run):
        more = list(read_tree(earlier.results).records.values())
        for cell, cost in median_wall_s(more).items():
            costs.setdefault(cell, cost)
        records += more
    manifest = load_manifest(run.root)
    limits = manifest.info.get("step_limits") or {}
    rate = seconds_per_step(records) or PRIOR_STEP_S
    for cell in read_queue(run.queue):
        task_config = task_config_name(cell.scene, manifest.knobs["BENCH_CONFIG"])
        if isinstance(limits.get(cell.task), int):
            costs.setdefault((cell.task, task_config), limits[cell.task] * rate)
    return costs
