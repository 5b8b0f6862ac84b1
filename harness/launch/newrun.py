"""Creating a run from the launch side: one validation pass over everything a run is made of, then
the run.

Apart from `harness.config.create` because the check loads the benchmark adapter and reads the
policy wrapper's settings, which the config stage must not import. The pass refuses, before
anything is written, what no worker could run: every knob set against its declared type and range,
the run dir's name, the policy (and the checkpoint it declares it needs, complete and readable), the
benchmark with BENCH_PARAMS against its constructor, each unit's task and config, the action
conventions, and the seed bank against the benchmark's seed space. Independent problems are all
reported, one line each (ManifestError, exit 2 from every command).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path

from harness.config.checkpoint import checkpoint_problems, needs_problem
from harness.config.create import create_run
from harness.config.knobs import contract_knobs
from harness.config.knobtypes import run_name_problem
from harness.config.manifest import Manifest, ManifestError, load_manifest
from harness.config.manifest_fillin import record_fillin
from harness.config.paths import CODE_ROOT, bundle_root, resolve_checkpoint
from harness.config.plan import planned_seeds
from harness.config.policymap import PolicyMapError, load_policy_map
from harness.config.rundir import Cell, read_queue
from harness.config.seedbank import (
    SeedBankError,
    bank_file,
    read_bank,
    resolve_root,
    seeds_outside,
    uses_bank,
)
from harness.config.settings import Settings
from harness.config.validate import knob_problems, problem_list, some_of
from harness.episode.bench import Benchmark, load_benchmark
from harness.episode.serverdial import probe
from harness.launch.benchparams import params_problems
from harness.launch.precollect import banked_not_trials
from harness.model.wrapper import (
    PolicyRefused,
    policy_dir,
    stated_checkpoint,
    stated_conventions,
    stated_problems,
)
from harness.wire.errors import WireError
from harness.wire.protocol import check_specs


def _policy_problems(knobs: Mapping[str, str], env: Mapping[str, str]) -> list[str]:
    """The policy wrapper exists, and CKPT_NAME is what it declares it loads."""
    policy, name = knobs["POLICY"], knobs["CKPT_NAME"]
    try:
        policy_dir(policy)
        yml, needs = stated_checkpoint(policy, knobs["POLICY_ARGS"].split())
    except PolicyRefused as exc:
        return [str(exc)]
    if needs is not None and (why := needs_problem(needs, str(yml))) is not None:
        return [why]
    path = resolve_checkpoint(name, env)
    if name and path is None:
        return [
            f"CKPT_NAME={name!r}: neither a path nor a directory under "
            f"{bundle_root(env) / 'checkpoints'} (models load from local directories only)"
        ]
    if needs is None:
        return []
    if path is None:
        return [f"POLICY={policy} needs a checkpoint: set CKPT_NAME to its directory (a path, or a name "
                f"under {bundle_root(env) / 'checkpoints'})"]  # fmt: skip
    return checkpoint_problems(f"CKPT_NAME={name!r} (POLICY={policy})", path, needs)


def _bench_problems(
    cells: list[Cell],
    knobs: Mapping[str, str],
    settings: Settings,
    env: Mapping[str, str],
    step_limits: dict[str, int],
) -> list[str]:
    """The benchmark loads with its BENCH_PARAMS, runs every unit, takes the policy's actions and the
    bank's seeds. Fills `step_limits` (task: limit) where the benchmark tells them."""
    problems = params_problems(knobs["BENCHMARK"], knobs["BENCH_PARAMS"])
    if problems:
        return problems
    try:
        bench = load_benchmark(knobs["BENCHMARK"], settings)  # the run's, not ours
        limit = getattr(bench, "step_limit_for", None)
        for cell in cells:
            bench.check(cell.task, knobs["BENCH_CONFIG"])
            if limit is not None:
                step_limits[cell.task] = int(limit(cell.task, knobs["BENCH_CONFIG"]))
    except ValueError as exc:
        return [str(exc)]
    return (
        _convention_problems(bench, knobs)
        + _wrapper_problems(bench, knobs, env)
        + _seed_problems(bench, cells, knobs, settings, env)
    )


def _convention_problems(bench: Benchmark, knobs: Mapping[str, str]) -> list[str]:
    applies = getattr(bench, "action_convention", None)  # the hello checks it again, per connection
    if applies is None:
        return []
    try:
        emits = stated_conventions(knobs["POLICY"], knobs["POLICY_ARGS"].split())
        check_specs({"action": emits}, {"action": applies})
    except (PolicyRefused, WireError) as exc:
        return [str(exc)]
    return []


def _wrapper_problems(bench: Benchmark, knobs: Mapping[str, str], env: Mapping[str, str]) -> list[str]:
    """The wrapper's own check of the checkpoint against the benchmark's cameras (policy/lerobot)."""
    path = resolve_checkpoint(knobs["CKPT_NAME"], env) if knobs["CKPT_NAME"] else None
    cameras = getattr(bench, "cameras", None)
    try:
        return stated_problems(knobs["POLICY"], knobs["POLICY_ARGS"].split(), path, cameras)
    except PolicyRefused as exc:
        return [str(exc)]


def _seed_problems(
    bench: Benchmark, cells: list[Cell], knobs: Mapping[str, str], settings: Settings, env: Mapping[str, str]
) -> list[str]:
    space = getattr(bench, "seed_space", None)  # e.g. LIBERO's init-state indices 0..49
    if not uses_bank(knobs["USE_EVAL_SEEDS"]):
        n = settings.eval_test_num
        outside = [seed for seed in range(n) if space is not None and seed not in space]
        return (
            [
                f"unit '{cell.scene} {cell.task}': seed(s) {some_of(outside)} from EVAL_TEST_NUM={n} "
                f"(USE_EVAL_SEEDS=0) are outside the seeds {knobs['BENCHMARK']} can build, "
                f"{space.start}..{space.stop - 1}"
                for cell in cells
            ]
            if outside and space is not None
            else []
        )
    root = resolve_root(knobs["SEEDS_ROOT"], str(bundle_root(env)))
    try:
        bank = read_bank(root, cells, knobs["BENCH_CONFIG"])
    except SeedBankError as exc:
        return [str(exc)]
    files = {bank_file(root, cell, knobs["BENCH_CONFIG"]): seeds for cell, seeds in bank.items()}
    for line in banked_not_trials(files):  # a run on it is still sound: those episodes count apart
        print(f"warning: {line}", file=sys.stderr)
    if space is None:
        return []
    return seeds_outside(root, bank, knobs["BENCH_CONFIG"], space, knobs["BENCHMARK"])


def fillin_seed_problems(run_dir: Path, manifest: Manifest, env: Mapping[str, str] = os.environ) -> list[str]:
    """What a fill-in would plan outside the benchmark's seed space (LIBERO's 50 init states): one
    line per unit, naming the seeds and the EVAL_TEST_NUM that planned them."""
    try:
        bench = load_benchmark(manifest.knobs["BENCHMARK"], Settings.from_env({**env, **manifest.knobs}))
    except ValueError as exc:
        return [str(exc)]
    space = getattr(bench, "seed_space", None)
    if space is None:
        return []
    lines = []
    for cell, seeds in planned_seeds(run_dir, manifest, env).items():
        if outside := [seed for seed in seeds if seed not in space]:
            lines.append(
                f"unit '{cell.scene} {cell.task}': seed(s) {some_of(outside)} (EVAL_TEST_NUM="
                f"{manifest.eval_test_num}) are outside the seeds {manifest.knobs['BENCHMARK']} can "
                f"build, {space.start}..{space.stop - 1}"
            )
    return lines


def _map_problems(settings: Settings) -> list[str]:
    problems = []
    for knob, path in (
        ("POLICY_SERVER_MAP", settings.policy_server_map),
        ("MODEL_SERVER_MAP", settings.model_server_map),
    ):
        if path:
            try:
                load_policy_map(path, knob)
            except PolicyMapError as exc:
                problems.append(str(exc))
    return problems


def check_runnable(
    queue_file: Path | str, env: Mapping[str, str] = os.environ, run: Path | None = None
) -> tuple[Settings, dict[str, int]]:
    """Refuse, naming each problem, a run that no worker could ever run (ManifestError); `run` is
    the run dir to be created, whose name is checked too. Returns the settings `env` gives and each
    task's step limit, where the benchmark tells it."""
    step_limits: dict[str, int] = {}
    problems = knob_problems(env)
    if run is not None and (why := run_name_problem(Path(run).name)) is not None:
        problems.append(f"run dir {run}: {why}")
    if not problems:  # the rest reads the knobs' values
        settings = Settings.from_env(env)  # every knob passed its check above
        knobs = contract_knobs(env)
        cells = read_queue(Path(queue_file))
        problems += _policy_problems(knobs, env) + _bench_problems(cells, knobs, settings, env, step_limits)
        problems += _map_problems(settings)
    if problems:
        raise ManifestError(problem_list(f"refusing to create run {run or ''}".rstrip() + ":", problems))
    return settings, step_limits


def git_version() -> dict[str, str]:
    """The code's git commit and description, for run.yaml's `info` (empty outside a git checkout)."""

    def git(*args: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(CODE_ROOT), *args], capture_output=True, text=True, timeout=20, check=False
        )
        return result.stdout.strip() if result.returncode == 0 else ""

    commit = git("rev-parse", "HEAD")
    return {"git_commit": commit, "git_describe": git("describe", "--always", "--dirty")} if commit else {}


def new_run(run_dir: Path | str, queue_file: Path | str, env: Mapping[str, str] = os.environ) -> Manifest:
    """`create_run` after `check_runnable`: the one way the launchers create a run."""
    settings, step_limits = check_runnable(queue_file, env, Path(run_dir))
    return create_run(run_dir, queue_file, env, step_limits, probe(settings), git_version)


def new_fillin(run_dir: Path | str, eval_test_num: int | None, seeds_root: str | None) -> Manifest:
    """`record_fillin` held to the benchmark's seed space, as `new_run` holds a creation: the one way
    the launchers record a fill-in (`new_run.py --fill-in`, `orchestrators/fillin.sh`). The benchmark
    is loaded under the run's frozen knobs, which this process takes on (as the fill-in's workers
    will: a LIBERO suite's BENCH_PARAMS, for one)."""
    os.environ.update(load_manifest(run_dir).knobs)
    check = partial(fillin_seed_problems, Path(run_dir))
    return record_fillin(run_dir, eval_test_num, seeds_root, check=check)
