"""Creating a run from the launch side: refuse up front what no worker could run, then create it.

Apart from `harness.config.create` because the check loads the benchmark adapter and locates the
policy wrapper, which the config stage must not import.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from harness.config.create import create_run
from harness.config.knobs import QUEUE_MODES, contract_knobs, get_choice
from harness.config.manifest import Manifest, ManifestError
from harness.config.paths import bundle_root, resolve_checkpoint
from harness.config.rundir import read_queue
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
        for cell in read_queue(Path(queue_file)):
            bench.check(cell.task, knobs["BENCH_CONFIG"])
        applies = getattr(bench, "action_convention", None)  # the hello checks it again, per connection
        if applies is not None:
            emits = stated_conventions(knobs["POLICY"], knobs["POLICY_ARGS"].split())
            check_specs({"action": emits}, {"action": applies})
    except (PolicyError, ValueError, WireError) as exc:
        raise ManifestError(str(exc)) from None


def new_run(run_dir: Path | str, queue_file: Path | str, env: Mapping[str, str] = os.environ) -> Manifest:
    """`create_run` after `check_runnable`: the one way the launchers create a run."""
    check_runnable(queue_file, env)
    return create_run(run_dir, queue_file, env)
