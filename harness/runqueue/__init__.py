"""A run's lease queue: the run's plan (`harness.config.plan`) cut into the queue's units
(`harness.queue`), and the queue opened over them with the run's settings.

The queue knows nothing of runs and the configuration imports no queue; this stage joins the two,
for the worker, the results' status and the launchers.

A run dir without a readable run.yaml is an error (ManifestError naming the file), never a plan
from the current knobs. Units carry the expected seconds of their episodes when the caller knows
them (earlier records), so the longest go first.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from harness.config.manifest import ManifestError, load_manifest
from harness.config.plan import AUTO, parse_unit_seeds, planned_seeds
from harness.config.rundir import RunDir, task_config_name
from harness.config.settings import Settings
from harness.queue.leases import LeaseQueue, QueueSettings
from harness.queue.listing import UnitState, snapshot
from harness.queue.units import Unit, split


def run_units(run: RunDir, seed_cost_s: Mapping[tuple[str, str], float] | None = None) -> list[Unit]:
    """Every unit of a run, in queue order, planned from its run.yaml (ManifestError without one);
    `seed_cost_s`: expected seconds of an episode per (task, task_config), where known."""
    manifest = load_manifest(run.root)
    bench_config = manifest.knobs["BENCH_CONFIG"]
    unit_seeds = parse_unit_seeds(manifest.knobs["UNIT_SEEDS"])
    if unit_seeds is None:
        raise ManifestError(f"{run.manifest}: UNIT_SEEDS={AUTO!r} was never resolved (edited by hand?)")
    plan = planned_seeds(run.root, manifest)
    costs = seed_cost_s or {}
    units: list[Unit] = []
    for cell, seeds in plan.items():
        task_config = task_config_name(cell.scene, bench_config)
        cost = costs.get((cell.task, task_config), 0.0)
        units += split(cell.scene, cell.task, task_config, seeds, unit_seeds, cost)
    return units


def queue_settings(settings: Settings) -> QueueSettings:
    """The queue's timing and retry knobs, from the process's settings."""
    return QueueSettings(
        ttl_s=settings.lease_ttl,
        heartbeat_s=settings.heartbeat_s,
        skew_s=settings.lease_skew_s,
        crash_limit=settings.crash_limit,
        prefix_first=settings.eval_stop != "fixed",  # the worker verified it against run.yaml
    )


def open_queue(
    run: RunDir,
    worker_id: str,
    settings: Settings,
    units: list[Unit] | None = None,
    rng: random.Random | None = None,
) -> LeaseQueue:
    """This worker's lease queue over the run's units (default: the run's plan)."""
    units = run_units(run) if units is None else units
    return LeaseQueue(run.leases, units, worker_id, queue_settings(settings), rng)


def queue_states(run: RunDir, settings: Settings, units: list[Unit] | None = None) -> list[UnitState]:
    """Every unit's queue state (read-only), for status displays and the lease CLI."""
    queue = queue_settings(settings)
    units = run_units(run) if units is None else units
    return snapshot(run.leases, units, queue.ttl_s, queue.skew_s, queue.crash_limit)
