"""One worker end to end on this machine, in this process: model server + sim client over a queue.

The debug launcher (harness.launch.debug): the same worker a node runs, without a pool or Slurm. It
creates the run from --queue (or checks this environment against the existing run), runs every unit,
then prints each scene's per-task SR/HSR with 95% intervals. Knobs come from the environment
(POLICY, BENCH_CONFIG, EVAL_TEST_NUM, SEEDS_ROOT, ...); a rerun resumes (recorded seeds are skipped).
Worker log lines (one per unit and seed) go to stderr as it runs.

--inprocess (harness.launch.debug_episode): ONE episode with the sim and the policy in this one
process, over a socketpair, no child process at all, so a debugger sees both sides. It runs the
first seed without a result of the first unit (or of --task/--scene), or --seed; its record goes
to the run's results (writer id `inprocess`).

Examples (from the repository root, after `source env.sh`):
  POLICY=replay $SIM_PY scripts/eval_one_worker.py --run demo_replay
  POLICY=hold EVAL_TEST_NUM=2 $SIM_PY scripts/eval_one_worker.py --run demo_hold \\
      --queue seeds/maniskill_queue.txt
  POLICY=hold $SIM_PY -m pdb scripts/eval_one_worker.py --run demo_hold --inprocess --task PushCube
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from harness.config.manifest import ContractMismatch, ManifestError
from harness.config.paths import run_dir
from harness.config.rundir import QueueFileError, RunDir
from harness.config.seedbank import SeedBankError
from harness.config.settings import Settings
from harness.launch.debug import results_text, run_debug
from harness.launch.debug_episode import run_inprocess
from harness.process.failures import run_command
from harness.wire.errors import WireError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="run name under $RUNS_ROOT, or a path to a run dir")
    p.add_argument(
        "--queue", type=Path, default=Path("seeds/maniskill_queue.txt"), help="queue file of units"
    )
    p.add_argument("--policy", help="policy under policy/ (default: $POLICY)")
    p.add_argument(
        "--inprocess", action="store_true", help="one episode, sim and policy in this process (no children)"
    )
    p.add_argument("--task", help="with --inprocess: the unit's task (default: the queue's first)")
    p.add_argument("--scene", help="with --inprocess: the unit's scene (default: any)")
    p.add_argument(
        "--seed", type=int, help="with --inprocess: the seed (default: the first without a result)"
    )
    args = p.parse_args(argv)
    given = [f"--{name}" for name in ("task", "scene", "seed") if getattr(args, name) is not None]
    if given and not args.inprocess:
        p.error(f"{', '.join(given)}: only with --inprocess (the worker runs every unit)")
    return args


def say(line: str) -> None:
    print(line, flush=True)


def complain(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.policy:
        os.environ["POLICY"] = args.policy
    run = RunDir(run_dir(args.run).resolve())
    try:
        settings = Settings.from_env(os.environ)
        if args.inprocess:
            logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
            return run_inprocess(
                settings,
                run,
                args.queue,
                args.task,
                args.scene,
                args.seed,
                say,
                complain,
            )
        code, manifest = run_debug(settings, run, args.queue)
    except (ContractMismatch, ManifestError, QueueFileError, SeedBankError, ValueError) as exc:
        print(f"eval_one_worker: {exc}", file=sys.stderr)
        return 2
    print(results_text(run, manifest))
    return code


if __name__ == "__main__":
    sys.exit(run_command("eval_one_worker", main, failures=(WireError,)))
