"""A run's plan: the seeds each cell should have a record for, the units they are cut into, and
the lease queue over those units.

Seeds come from the manifest: the first EVAL_TEST_NUM of the original bank and of each fill-in
bank, in the order the history added them (append-only, so unit slices stay stable across
fill-ins). A run dir without a readable run.yaml is an error (ManifestError naming the file), never
a plan from the current knobs: a hand-made queue, or a stale NFS lookup of run.yaml, must not let
units be planned outside the run's contract.

UNIT_SEEDS=auto is resolved here once, when the run is created (`resolve_unit_seeds`), from the
cells, their seeds and the slots the run expects (the pool's nodes x this machine's cores), and
frozen in run.yaml as the number: every worker then cuts the same unit keys. Units carry the
expected seconds of their episodes when the caller knows them (earlier records), so the longest
go first.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from pathlib import Path

from harness.config import knobs
from harness.config.manifest import Manifest, ManifestError, load_manifest, seed_banks
from harness.config.paths import bundle_root
from harness.config.rundir import Cell, RunDir, read_queue, task_config_name
from harness.config.seedbank import read_bank, resolve_root
from harness.queue.leases import LeaseQueue, QueueSettings
from harness.queue.listing import UnitState, snapshot
from harness.queue.units import AUTO, Unit, auto_unit_seeds, parse_unit_seeds, split


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


def expected_slots(env: Mapping[str, str] = os.environ) -> tuple[int, str]:
    """The sim slots a new run expects, and where that came from: the nodes of this Slurm job, else
    POOL_NODES, times this machine's cores (a node fills its cores: `harness.node.sizing`)."""
    job_nodes = env.get("SLURM_JOB_NUM_NODES", "").strip()
    nodes, source = (int(job_nodes), "SLURM_JOB_NUM_NODES") if job_nodes.isdigit() else (
        knobs.get_int("POOL_NODES", env, minimum=1), "POOL_NODES")  # fmt: skip
    cores = len(os.sched_getaffinity(0))
    return nodes * cores, f"{source} {nodes} x {cores} cores"


def resolve_unit_seeds(
    value: str, cells: int, seeds_per_cell: int, env: Mapping[str, str] = os.environ
) -> tuple[str, str]:
    """The UNIT_SEEDS a new run freezes for `value` (`auto` sized, a count checked), and why."""
    count = parse_unit_seeds(value)
    if count is not None:
        return str(count), f"UNIT_SEEDS={count} (set)"
    slots, source = expected_slots(env)
    size, why = auto_unit_seeds(cells, seeds_per_cell, slots)
    return str(size), f"{why}; slots from {source}"


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
        config = task_config_name(cell.scene, bench_config)
        units += split(cell.scene, cell.task, config, seeds, unit_seeds, costs.get((cell.task, config), 0.0))
    return units


def queue_settings() -> QueueSettings:
    """The queue's timing and retry knobs, read once."""
    return QueueSettings(
        ttl_s=knobs.get_float("LEASE_TTL"),
        heartbeat_s=knobs.get_float("HEARTBEAT_S"),
        skew_s=knobs.get_float("LEASE_SKEW_S"),
        crash_limit=knobs.get_int("CRASH_LIMIT"),
        prefix_first=knobs.get("EVAL_STOP") != "fixed",  # the worker verified it against run.yaml
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
