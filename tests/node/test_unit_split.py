"""Issue 24: units that keep every slot busy to the end. UNIT_SEEDS=auto is resolved once when the
run is created and frozen as the number (a later `auto` launch matches it, an explicit other number
does not), and the longest units are claimed first: priced from records where they exist, else from
the tasks' step limits; a worker's first claim takes the shortest."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

from harness.config.contract import verify_environment
from harness.config.create import create_run
from harness.config.manifest import ContractMismatch, ManifestError, load_manifest
from harness.config.plan import UNITS_PER_SLOT, auto_unit_seeds
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.bench.maniskill_config import load_table
from harness.launch.newrun import new_run
from harness.queue.units import Unit
from harness.runqueue import open_queue, run_units
from harness.worker.episode_costs import PRIOR_STEP_S, seed_costs

ROOT = Path(__file__).resolve().parents[2]
TASKS = ["PickCube", "PushCube", "PullCube", "StackCube", "LiftPegUpright", "PlaceSphere", "PullCubeTool"]


@pytest.fixture
def knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped clean bank, 10 seeds a cell, a pool of one node; UNIT_SEEDS left at its default."""
    for name, value in {
        "USE_EVAL_SEEDS": "1", "SEEDS_ROOT": "seeds/maniskill", "BUNDLE": str(ROOT), "EVAL_TEST_NUM": "10",
        "BENCH_CONFIG": "clean", "SLURM_JOB_NUM_NODES": "1", "CKPT_NAME": "",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("UNIT_SEEDS", raising=False)


def _make(root: Path, tasks: list[str] = TASKS) -> RunDir:
    run = RunDir(root)
    root.mkdir(parents=True)
    run.queue.write_text("".join(f"table {task}\n" for task in tasks))
    create_run(run.root, run.queue)
    return run


def test_auto_rule_gives_every_expected_slot_its_units() -> None:
    assert auto_unit_seeds(7, 10, 2)[0] == 4  # 70 seeds / (8 x 2 slots)
    assert auto_unit_seeds(7, 10, 16)[0] == 1  # never below one seed
    assert auto_unit_seeds(2, 500, 1)[0] == 125
    assert auto_unit_seeds(1, 10, 1)[0] == 1
    size, why = auto_unit_seeds(100, 50, 64)
    assert size == 9 and "100 cells x 50 seeds, 64 expected slots" in why and "600 units" in why


def test_auto_is_resolved_at_creation_and_frozen_as_the_number(
    tmp_path: Path, knobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _make(tmp_path / "run")
    cores = len(os.sched_getaffinity(0))
    want = max(1, min(10, 70 // (UNITS_PER_SLOT * cores)))
    manifest = load_manifest(run.root)
    assert manifest.knobs["UNIT_SEEDS"] == str(want)
    assert manifest.info["unit_split"].startswith(
        f"UNIT_SEEDS=auto: {want} (7 cells x 10 seeds, {cores} expected"
    )
    assert "SLURM_JOB_NUM_NODES 1" in manifest.info["unit_split"]
    assert all(len(u.seeds) <= want for u in run_units(run)) and len(run_units(run)) == 7 * -(-10 // want)
    # a worker or a re-launch left at `auto` matches the frozen number, on any machine ...
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "50")
    assert verify_environment(run.root, check_installed=False)
    create_run(run.root, run.queue)
    # ... an explicit different one is another contract
    other = "3" if want != 3 else "2"
    monkeypatch.setenv("UNIT_SEEDS", other)
    with pytest.raises(
        ContractMismatch, match=f"knob UNIT_SEEDS: run.yaml has '{want}', the environment has '{other}'"
    ):
        verify_environment(run.root, check_installed=False)


def test_explicit_unit_seeds_wins_and_a_bad_one_is_refused_naming_it(
    tmp_path: Path, knobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNIT_SEEDS", "0")
    run = _make(tmp_path / "whole")
    assert load_manifest(run.root).knobs["UNIT_SEEDS"] == "0" and len(run_units(run)) == 7
    monkeypatch.setenv("UNIT_SEEDS", "two")
    with pytest.raises(ManifestError, match="knob UNIT_SEEDS='two': expected auto, 0"):
        _make(tmp_path / "bad")


def _record(task: str, seed: int, wall_s: float) -> dict:
    return {
        "task": task, "scene": "table", "task_config": "table_clean", "seed": seed, "success": True,
        "hard_success": True, "error": None, "steps": 10, "wall_s": wall_s, "sim_s": wall_s, "model_s": 0.0,
        "policy": "replay", "ckpt": "", "host": "h", "worker": "w", "sim_version": "x", "contract": "c",
        "video": None, "finished_at": "2025-01-01T00:00:00+00:00",
    }  # fmt: skip


def _write_records(run: RunDir, walls: dict[str, float]) -> None:
    out = run.results / "any" / "replay" / "table_clean" / "-"
    out.mkdir(parents=True)
    lines = [json.dumps(_record(task, seed, wall)) for task, wall in walls.items() for seed in (900, 901)]
    (out / "_metrics.w0.jsonl").write_text("\n".join(lines) + "\n")


def test_the_longest_units_are_claimed_first_from_an_earlier_run_of_the_bank(
    tmp_path: Path, knobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Costs of an earlier run of the same bank (and the run's own records, which win) put the
    longest units first in every worker's claims, whatever its random order; before issue 24 each
    worker claimed in its own shuffle."""
    monkeypatch.setenv("UNIT_SEEDS", "5")
    walls = {task: 2.0**i for i, task in enumerate(TASKS)}  # 1 s .. 64 s an episode: 7 cost tiers
    earlier = _make(tmp_path / "runs" / "earlier")
    _write_records(earlier, walls)
    run = _make(tmp_path / "runs" / "now")
    _write_records(run, {"PickCube": 1000.0})  # this run's own record: PickCube is the longest now
    costs = seed_costs(run)
    assert costs[("PickCube", "table_clean")] == 1000.0 and costs[("PullCubeTool", "table_clean")] == 64.0
    want = ["PickCube", *reversed(TASKS[1:])]
    for seed in range(5):
        queue = open_queue(
            run, f"w{seed}", Settings.from_env(os.environ), run_units(run, costs), random.Random(seed)
        )
        order = []
        while (lease := queue.claim()) is not None:
            order.append(lease.unit.task)
            assert queue.mark(lease, done=True)
        assert order[::2] == want and order[1::2] == want, order  # two units a cell, longest first
        shutil.rmtree(run.leases)  # a clean re-lease for the next worker's order


def test_units_of_about_the_same_cost_tie_so_workers_do_not_race_for_one_key() -> None:
    def unit(cost: float) -> Unit:
        return Unit("s", "t", "c", 0, 1, (0,), cost)

    assert unit(0).rank == unit(0.5).rank == 0
    assert unit(10).rank == unit(15).rank < unit(16).rank < unit(40).rank


def test_a_first_run_is_priced_from_its_step_limits_and_each_worker_starts_with_the_shortest(
    tmp_path: Path, knobs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run nobody has run before: run creation records each task's step limit from the benchmark,
    the units are priced from it (PRIOR_STEP_S a step, then the seconds a step took in the records),
    a worker's first claim takes the shortest unit (its first result soonest) and every later claim
    the longest. Before, a first run's claims were in each worker's random order."""
    monkeypatch.setenv("UNIT_SEEDS", "5")
    monkeypatch.setenv("POLICY", "replay")
    run = RunDir(tmp_path / "runs" / "first")
    run.root.mkdir(parents=True)
    run.queue.write_text("".join(f"table {task}\n" for task in TASKS))
    new_run(run.root, run.queue)
    table = load_table()
    limits = {task: table.task(task).step_limit for task in TASKS}
    assert load_manifest(run.root).info["step_limits"] == limits
    costs = seed_costs(run)
    assert costs == {(task, "table_clean"): limit * PRIOR_STEP_S for task, limit in limits.items()}
    for seed in range(3):
        queue = open_queue(
            run, f"w{seed}", Settings.from_env(os.environ), run_units(run, costs), random.Random(seed)
        )
        first = queue.claim(shortest=True)
        assert first is not None and first.unit.lo == 0
        assert limits[first.unit.task] == min(limits.values()), first.unit.task
        assert queue.mark(first, done=True)
        rest = []
        while (lease := queue.claim()) is not None:
            rest.append(lease.unit.task)
            assert queue.mark(lease, done=True)
        longest = {task for task in TASKS if limits[task] >= 400}  # the top cost tier (2x the rest)
        assert set(rest[: 2 * len(longest)]) == longest, rest
        shutil.rmtree(run.leases)
    _write_records(run, {"PickCube": 10.0})  # 10 steps in 10 s: 1 s a step prices the cells unseen
    costs = seed_costs(run)
    assert costs[("PickCube", "table_clean")] == 10.0
    assert costs[("PullCubeTool", "table_clean")] == limits["PullCubeTool"] * 1.0
