"""A run's plan: the seeds each cell should have a record for, and how many seeds a unit takes
(UNIT_SEEDS). Cutting them into the queue's units, and opening the lease queue over those, is
`harness.runqueue`'s (this package imports no queue).

Seeds come from the manifest: the first EVAL_TEST_NUM of the original bank and of each fill-in
bank, in the order the history added them (append-only, so unit slices stay stable across
fill-ins). A run dir without a readable run.yaml is an error (ManifestError naming the file), never
a plan from the current knobs: a hand-made queue, or a stale NFS lookup of run.yaml, must not let
units be planned outside the run's contract.

UNIT_SEEDS=auto is resolved here once, when the run is created (`resolve_unit_seeds`), from the
cells, their seeds and the slots the run expects (the pool's nodes x this machine's cores), and
frozen in run.yaml as the number: every worker then cuts the same unit keys. `auto` is the largest
slice that still gives each expected slot UNITS_PER_SLOT units, so the run's tail (the last units,
run while other slots idle) is a small part of each slot's work.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

from harness.config import knobs
from harness.config.manifest import Manifest, load_manifest, seed_banks
from harness.config.paths import bundle_root
from harness.config.rundir import Cell, RunDir, read_queue
from harness.config.seedbank import read_bank, resolve_root

AUTO = "auto"
UNITS_PER_SLOT = 8  # auto: units per expected slot; the tail is about one unit of a slot's 8 or more


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


def parse_unit_seeds(value: str) -> int | None:
    """UNIT_SEEDS's value: None for `auto`, else the count (0: whole cells); a clear error otherwise."""
    text = value.strip().lower()
    if text == AUTO:
        return None
    if not text.isdigit():
        raise ValueError(f"knob UNIT_SEEDS={value!r}: expected auto, 0 (whole cells) or a positive count")
    return int(text)


def auto_unit_seeds(cells: int, seeds_per_cell: int, slots: int) -> tuple[int, str]:
    """UNIT_SEEDS=auto for `cells` cells of `seeds_per_cell` seeds over `slots` expected sim slots:
    the slice size, and a line saying why."""
    total = cells * seeds_per_cell
    size = max(1, min(seeds_per_cell, total // (UNITS_PER_SLOT * max(slots, 1))))
    units = cells * math.ceil(seeds_per_cell / size) if seeds_per_cell else 0
    return size, (
        f"UNIT_SEEDS=auto: {size} ({cells} cells x {seeds_per_cell} seeds, {slots} expected slots, "
        f"at least {UNITS_PER_SLOT} units a slot where seeds allow: {units} units)"
    )
