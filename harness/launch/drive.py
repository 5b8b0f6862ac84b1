"""Bring one run to completion with one pool: the step every orchestrator is made of.

If the run has episodes left, start a pool whose environment is the run's frozen knobs and wait for
it, reporting progress. What is done is read from the records, so calling this again resumes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.config.manifest import ContractMismatch, Manifest
from harness.config.paths import CODE_ROOT
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.launch import pools
from harness.launch.progress import Progress, progress

Say = Callable[[str], None]


@dataclass(frozen=True)
class PoolLaunch:
    """How pools are started, from the knobs LAUNCHER, POOL_NODES, SRUN_ARGS (CLI flags override)."""

    launcher: str
    nodes: int
    srun_args: str
    eval_root: Path
    progress_s: float

    @classmethod
    def of(
        cls, settings: Settings, env: Mapping[str, str], nodes: int | None, progress_s: float
    ) -> PoolLaunch:
        """The orchestrator's `settings`, with `--nodes` (when given) over POOL_NODES; the node
        scripts run from `env`'s EVAL_ROOT (else this code's root)."""
        root = Path(env.get("EVAL_ROOT") or CODE_ROOT)
        return cls(settings.launcher, nodes or settings.pool_nodes, settings.srun_args, root, progress_s)


def check_caller_env(manifest: Manifest, env: Mapping[str, str], run: RunDir) -> None:
    """A contract knob the caller set explicitly must agree with the run: never silently overridden."""
    differences = [
        f"knob {name}: run.yaml has {value!r}, this launch has {env[name]!r}"
        for name, value in manifest.knobs.items()
        if name in env and env[name] != value and name != "SEEDS_ROOT"
    ]
    if differences:
        raise ContractMismatch(f"refusing to launch into run {run.root} with different knobs:", differences)


def launch_env(run: RunDir, manifest: Manifest, base: Mapping[str, str]) -> dict[str, str]:
    """The node scripts' environment: the caller's, with the run's frozen knobs and EVAL_TEST_NUM.

    Workers plan their seeds from run.yaml (every bank, fill-ins included), so one pool runs them all.
    """
    env = dict(base)
    env.update(manifest.knobs)
    env.update(STUDY_RUN=run.name, RUNS_ROOT=str(run.root.parent), EVAL_TEST_NUM=str(manifest.eval_test_num))
    env.pop("RUN_DIR", None)
    return env


def complete_run(
    run: RunDir,
    manifest: Manifest,
    launch: PoolLaunch,
    label: str,
    say: Say,
    nodes: int | None = None,
    report: Callable[[], str] | None = None,
) -> Progress:
    """Run what `run` has left with one blocking pool (none if nothing is left); the final progress."""
    left = progress(run, manifest)
    if not left.complete:
        pool = pools.Pool(run, nodes or launch.nodes, launch_env(run, manifest, os.environ), label)
        say(f"[{label}] {launch.launcher} pool of {pool.nodes} node(s) on {run.name}: {left.line()}")
        proc = pools.start(pool, launch.launcher, launch.eval_root, launch.srun_args)
        last = time.monotonic()
        while (code := pools.finished(proc)) is None:
            time.sleep(min(1.0, launch.progress_s))
            if time.monotonic() - last >= launch.progress_s:
                last = time.monotonic()
                say(report() if report else f"[{label}] {run.name}: {progress(run, manifest).line()}")
        if code != 0:
            say(f"[{label}] pool on {run.name} exited with status {code}: see {run.logs}")
    final = progress(run, manifest)
    state = "complete" if final.complete else "INCOMPLETE"
    say(f"[{label}] {run.name}: {final.line()}: {state}{', nothing to run' if left.complete else ''}")
    return final
