"""Creating a run from the launch side: refuse up front what no worker could run, then create it.

Apart from `harness.config.create` because the check loads the benchmark adapter and locates the
policy wrapper, which the config stage must not import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from harness.config.create import create_run
from harness.config.knobs import QUEUE_MODES, contract_knobs, get_choice, get_int
from harness.config.manifest import Manifest, ManifestError
from harness.config.paths import bundle_root, resolve_checkpoint
from harness.config.rundir import Cell, read_queue
from harness.config.seedbank import read_bank, resolve_root
from harness.episode.bench import load_benchmark
from harness.model.wrapper import PolicyError, policy_dir, stated_conventions
from harness.wire.errors import WireError
from harness.wire.protocol import check_specs


def check_runnable(queue_file: Path | str, env: Mapping[str, str] = os.environ) -> None:
    """Refuse a policy, task, config or action convention that no worker could ever run (ManifestError
    names it)."""
    knobs = contract_knobs(env)
    try:
        get_choice("QUEUE_MODE", QUEUE_MODES, env)
        policy_dir(knobs["POLICY"])
        if knobs["CKPT_NAME"] and resolve_checkpoint(knobs["CKPT_NAME"], env) is None:
            raise ValueError(
                f"CKPT_NAME={knobs['CKPT_NAME']!r}: neither a path nor a directory under "
                f"{bundle_root(env) / 'checkpoints'} (models load from local directories only)"
            )
        bench = load_benchmark(knobs["BENCHMARK"])
        cells = read_queue(Path(queue_file))
        for cell in cells:
            bench.check(cell.task, knobs["BENCH_CONFIG"])
        seed_space = getattr(bench, "seed_space", None)  # LIBERO: its init-state indices
        if seed_space is not None:
            check_seed_space(seed_space, cells, knobs, env)
        applies = getattr(bench, "action_convention", None)  # the hello checks it again, per connection
        if applies is not None:
            emits = stated_conventions(knobs["POLICY"], knobs["POLICY_ARGS"].split())
            check_specs({"action": emits}, {"action": applies})
    except (PolicyError, ValueError, WireError) as exc:
        raise ManifestError(str(exc)) from None


def check_seed_space(space: range, cells: list[Cell], knobs: dict[str, str], env: Mapping[str, str]) -> None:
    """Every seed the run plans (0..EVAL_TEST_NUM-1, or the first EVAL_TEST_NUM of each bank file)
    must be one the benchmark can build; else a ValueError naming the cell, the seeds and the space."""
    n = get_int("EVAL_TEST_NUM", env, minimum=1)
    from_bank = knobs["USE_EVAL_SEEDS"].strip().lower() not in ("0", "false", "no", "off", "")
    if from_bank:
        root = resolve_root(knobs["SEEDS_ROOT"], str(bundle_root(env)))
        planned = {cell: seeds[:n] for cell, seeds in read_bank(root, cells, knobs["BENCH_CONFIG"]).items()}
    else:
        planned = {cell: list(range(n)) for cell in cells}
    source = f"the seed bank {knobs['SEEDS_ROOT']}" if from_bank else f"EVAL_TEST_NUM={n} (USE_EVAL_SEEDS=0)"
    for cell, seeds in planned.items():
        outside = [seed for seed in seeds if seed not in space]
        if outside:
            raise ValueError(
                f"unit '{cell.scene} {cell.task}': seed(s) {outside[:5]} from {source} are outside "
                f"the seeds {knobs['BENCHMARK']} can build, {space.start}..{space.stop - 1}"
            )


def new_run(run_dir: Path | str, queue_file: Path | str, env: Mapping[str, str] = os.environ) -> Manifest:
    """`create_run` after `check_runnable`: the one way the launchers create a run."""
    check_runnable(queue_file, env)
    return create_run(run_dir, queue_file, env)
