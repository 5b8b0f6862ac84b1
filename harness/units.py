"""Units of work: a queue cell's planned seeds, whole or cut into slices of UNIT_SEEDS.

A unit is what one lease covers. Slices keep the last minutes of a run from being one worker
grinding through a whole cell while the others idle. A unit's key names its cell and its seed index
range in the bank (`<scene>__<task>__<lo>-<hi>`), so raising EVAL_TEST_NUM makes new keys for the new
seeds and never reuses a finished unit's key for a different seed set.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from harness import knobs, seedbank
from harness.manifest import load_manifest, planned_seeds
from harness.records import RecordSet, read_tree
from harness.rundir import Cell, RunDir, read_queue, safe_key, task_config_name


@dataclass(frozen=True)
class Unit:
    scene: str
    task: str
    task_config: str
    lo: int  # index range [lo, hi) into the cell's planned seeds
    hi: int
    seeds: tuple[int, ...]

    @cached_property
    def key(self) -> str:
        """The lease-dir name: readable, file-name-safe, unique even if sanitising collides."""
        raw = f"{self.scene}__{self.task}__{self.lo}-{self.hi}"
        key = safe_key(raw).lstrip(".") or "unit"
        if key != raw:
            key += "." + hashlib.sha1(raw.encode()).hexdigest()[:8]
        return key


def cell_seeds(cell: Cell) -> list[int]:
    """A cell's planned seeds: the first EVAL_TEST_NUM of its bank (USE_EVAL_SEEDS=1) or 0..N-1."""
    count = knobs.get_int("EVAL_TEST_NUM")
    if not knobs.get_bool("USE_EVAL_SEEDS"):
        return list(range(count))
    root = seedbank.resolve_root(knobs.get("SEEDS_ROOT"), os.environ.get("BUNDLE", "."))
    path = seedbank.bank_file(root, cell, knobs.get("BENCH_CONFIG"))
    seeds = seedbank.read_bank_file(path)
    if len(seeds) < count:
        raise seedbank.SeedBankError(f"seed bank file {path} has {len(seeds)} seeds, EVAL_TEST_NUM={count}")
    return seeds[:count]


def split(cell: Cell, seeds: list[int], unit_seeds: int, bench_config: str) -> list[Unit]:
    """One unit per slice of `unit_seeds` seeds (0: the whole cell)."""
    config = task_config_name(cell.scene, bench_config)
    size = unit_seeds if unit_seeds > 0 else max(len(seeds), 1)
    return [
        Unit(cell.scene, cell.task, config, lo, min(lo + size, len(seeds)), tuple(seeds[lo : lo + size]))
        for lo in range(0, len(seeds), size)
    ]


def run_units(run: RunDir) -> list[Unit]:
    """Every unit of a run, in queue order. A run with a manifest plans its seeds from it (its banks,
    fill-ins included, and its EVAL_TEST_NUM); one without, from the queue file and the knobs."""
    if run.manifest.exists():
        manifest = load_manifest(run.root)
        bench_config, unit_seeds = manifest.knobs["BENCH_CONFIG"], int(manifest.knobs["UNIT_SEEDS"])
        plan = planned_seeds(run.root, manifest)
    else:
        bench_config, unit_seeds = knobs.get("BENCH_CONFIG"), knobs.get_int("UNIT_SEEDS")
        plan = {cell: cell_seeds(cell) for cell in read_queue(run.queue)}
    if unit_seeds < 0:
        raise ValueError(f"knob UNIT_SEEDS={unit_seeds}: expected 0 (whole cells) or a positive count")
    units: list[Unit] = []
    for cell, seeds in plan.items():
        units += split(cell, seeds, unit_seeds, bench_config)
    return units


def finished_seeds(records: RecordSet, unit: Unit) -> set[int]:
    """Seeds of `unit` whose latest record is a result (a policy success or failure), not an error."""
    return {
        seed
        for seed in unit.seeds
        if (rec := records.records.get((unit.task, unit.task_config, seed))) is not None
        and rec.get("error") is None
    }


def missing_seeds(result_dir: Path, unit: Unit) -> list[int]:
    """The seeds still to run: never recorded, or whose latest record is an errored episode."""
    done = finished_seeds(read_tree(result_dir), unit)
    return [seed for seed in unit.seeds if seed not in done]
