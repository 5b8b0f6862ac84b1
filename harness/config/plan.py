"""A run's plan: the seeds each cell should have a record for, the units they are cut into, and
the lease queue over those units.

Seeds come from the manifest: the first EVAL_TEST_NUM of the original bank and of each fill-in
bank, in the order the history added them (append-only, so unit slices stay stable across
fill-ins). A run dir without a readable run.yaml is an error (ManifestError naming the file), never
a plan from the current knobs: a hand-made queue, or a stale NFS lookup of run.yaml, must not let
units be planned outside the run's contract.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from pathlib import Path

from harness.config import knobs
from harness.config.manifest import Manifest, load_manifest, seed_banks
from harness.config.paths import bundle_root
from harness.config.rundir import Cell, RunDir, read_queue, task_config_name
from harness.config.seedbank import read_bank, resolve_root
from harness.queue.leases import LeaseQueue, QueueSettings
from harness.queue.listing import UnitState, snapshot
from harness.queue.units import Unit, split


def _additions(manifest: Manifest) -> list[tuple[str, int, int]]:
    """(SEEDS_ROOT, lo, hi) of the bank seeds each recorded step added, in the order they were added."""
    original = manifest.knobs["SEEDS_ROOT"]
    steps = []
    for event in manifest.history:
        if event["kind"] == "create":
            steps.append((original, 0, int(event["eval_test_num"])))
        elif event["kind"] == "seed_bank":
            steps.append((event["seeds_root"], 0, int(event["eval_test_num"])))
        elif event["kind"] == "eval_test_num":
            steps.append((event.get("seeds_root", original), int(event["from"]), int(event["to"])))
    return steps


def planned_seeds(
    run_dir: Path | str,
    manifest: Manifest | None = None,
    env: Mapping[str, str] = os.environ,
) -> dict[Cell, list[int]]:
    """Each unit's seeds over every bank of the run, in the order the run's history added them.

    Append-only order matters: a unit slice covers an index range of this list, so seeds added by a
    fill-in must never shift the seeds already planned (a finished slice would then stand for others).
    """
    run = RunDir(Path(run_dir))
    manifest = manifest or load_manifest(run.root)
    cells = read_queue(run.queue)
    if manifest.contract["seeds"] is None:
        return {cell: list(range(manifest.eval_test_num)) for cell in cells}
    config, bundle = manifest.knobs["BENCH_CONFIG"], str(bundle_root(env))
    banks = {root: read_bank(resolve_root(root, bundle), cells, config) for root, _ in seed_banks(manifest)}
    steps = _additions(manifest)
    return {cell: [s for root, lo, hi in steps for s in banks[root][cell][lo:hi]] for cell in cells}


def run_units(run: RunDir) -> list[Unit]:
    """Every unit of a run, in queue order, planned from its run.yaml (ManifestError without one)."""
    manifest = load_manifest(run.root)
    bench_config, unit_seeds = manifest.knobs["BENCH_CONFIG"], int(manifest.knobs["UNIT_SEEDS"])
    plan = planned_seeds(run.root, manifest)
    units: list[Unit] = []
    for cell, seeds in plan.items():
        units += split(cell.scene, cell.task, task_config_name(cell.scene, bench_config), seeds, unit_seeds)
    return units


def queue_settings() -> QueueSettings:
    """The queue's timing and retry knobs, read once."""
    return QueueSettings(
        ttl_s=knobs.get_float("LEASE_TTL"),
        heartbeat_s=knobs.get_float("HEARTBEAT_S"),
        skew_s=knobs.get_float("LEASE_SKEW_S"),
        crash_limit=knobs.get_int("CRASH_LIMIT"),
    )


def open_queue(
    run: RunDir, worker_id: str, units: list[Unit] | None = None, rng: random.Random | None = None
) -> LeaseQueue:
    """This worker's lease queue over the run's units (default: the run's plan)."""
    units = run_units(run) if units is None else units
    return LeaseQueue(run.leases, units, worker_id, queue_settings(), rng)


def queue_states(run: RunDir, units: list[Unit] | None = None) -> list[UnitState]:
    """Every unit's queue state (read-only), for status displays and the lease CLI."""
    settings = queue_settings()
    units = run_units(run) if units is None else units
    return snapshot(run.leases, units, settings.ttl_s, settings.skew_s, settings.crash_limit)
