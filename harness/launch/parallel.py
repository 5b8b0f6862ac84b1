"""Evaluate several models at once: one dedicated pool per model, plus a shared pool that helps each.

  orchestrators/parallel_models.sh --run-prefix cmp --queue seeds/maniskill/queue.txt \
      --model policyA:ckpt1 --model policyB [--dedicated-nodes 1] [--nodes M]

Each `--model POLICY[:CKPT_NAME]` gets its run `<prefix>_<policy>[_<ckpt>]`, created from the current
knobs with that POLICY and CKPT_NAME (all runs are created and checked before anything starts). Each
incomplete model gets a dedicated pool of `--dedicated-nodes` node(s) for its whole run, and an
M-node shared pool sweeps the models in turn: every worker of a model's run, dedicated or shared,
steals units from that run's lease queue, so every model makes progress at once and the shared pool
moves on as soon as a model's queue is drained. Re-running the same command resumes. Ends with a
comparison table across models. Exit 0 when every run is complete.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from harness.config.manifest import Manifest
from harness.config.paths import run_dir
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.launch import orchestrator
from harness.launch.drive import PoolLaunch, complete_run
from harness.launch.newrun import new_run
from harness.launch.progress import progress, results_table
from harness.pathnames import safe_key
from harness.process.failures import run_command


def model_run_name(prefix: str, spec: str) -> tuple[str, str, str]:
    """(run name, POLICY, CKPT_NAME) of a `POLICY[:CKPT_NAME]` spec."""
    policy, _, ckpt = spec.partition(":")
    if not policy:
        raise ValueError(f"--model {spec!r}: expected POLICY or POLICY:CKPT_NAME")
    suffix = f"_{safe_key(Path(ckpt).name)}" if ckpt else ""
    return f"{prefix}_{safe_key(policy)}{suffix}", policy, ckpt


def main(argv: list[str] | None = None) -> int:
    p = orchestrator.parser(__doc__)
    p.add_argument("--run-prefix", required=True, help="runs are named <prefix>_<policy>[_<ckpt>]")
    p.add_argument("--queue", required=True, help="queue file shared by every model")
    p.add_argument(
        "--model", action="append", required=True, metavar="POLICY[:CKPT]", help="repeat per model"
    )
    p.add_argument(
        "--dedicated-nodes", type=int, default=1, help="nodes of each model's own pool (default 1)"
    )
    args = p.parse_args(argv)

    def body() -> int:
        launch = PoolLaunch.of(Settings.from_env(os.environ), os.environ, args.nodes, args.progress_every)
        if args.dedicated_nodes < 1:
            raise ValueError(f"--dedicated-nodes={args.dedicated_nodes}: expected a positive integer")
        models: list[tuple[str, RunDir, Manifest]] = []
        for spec in args.model:
            name, policy, ckpt = model_run_name(args.run_prefix, spec)
            if any(run.name == name for _, run, _ in models):
                raise ValueError(f"--model {spec!r} given twice")
            run = RunDir(run_dir(name))
            models.append(
                (
                    spec,
                    run,
                    new_run(run.root, args.queue, {**os.environ, "POLICY": policy, "CKPT_NAME": ckpt}),
                )
            )

        def report() -> str:
            return "[parallel] " + "; ".join(f"{spec}: {progress(run, m).line()}" for spec, run, m in models)

        dedicated = [
            threading.Thread(
                target=complete_run,
                args=(run, m, launch, f"dedicated-{i}", orchestrator.say),
                kwargs={"nodes": args.dedicated_nodes},
                daemon=True,
            )
            for i, (_, run, m) in enumerate(models)
            if not progress(run, m).complete
        ]
        for thread in dedicated:
            thread.start()
        for _, run, m in models:
            complete_run(run, m, launch, "shared", orchestrator.say, report=report)
        while any(thread.is_alive() for thread in dedicated):
            for thread in dedicated:
                thread.join(launch.progress_s)
                if thread.is_alive():
                    orchestrator.say(report())
        orchestrator.say("\n" + results_table(models, "model"))
        return 0 if all(progress(run, m).complete for _, run, m in models) else 1

    return orchestrator.main_wrapper(body, "parallel_models")


if __name__ == "__main__":
    sys.exit(run_command("parallel_models", main))
