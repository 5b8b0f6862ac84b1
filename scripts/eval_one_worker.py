"""One worker end to end on this machine, in this process: model server + sim client over a queue.

The debug launcher (harness.launch.debug): the same worker a node runs, without a pool or Slurm. It
creates the run from --queue (or checks this environment against the existing run), runs every unit,
then prints each scene's per-task SR/HSR with 95% intervals. Knobs come from the environment
(POLICY, BENCH_CONFIG, EVAL_TEST_NUM, SEEDS_ROOT, ...); a rerun resumes (recorded seeds are skipped).
Worker log lines (one per unit and seed) go to stderr as it runs.

Examples (from the repository root, after `source env.sh`):
  POLICY=replay $SIM_PY scripts/eval_one_worker.py --run demo_replay
  POLICY=hold EVAL_TEST_NUM=2 $SIM_PY scripts/eval_one_worker.py --run demo_hold \\
      --queue seeds/maniskill_queue.txt
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.config.failures import run_command
from harness.config.manifest import ContractMismatch, ManifestError
from harness.config.paths import run_dir
from harness.config.rundir import QueueFileError, RunDir
from harness.config.seedbank import SeedBankError
from harness.launch.debug import results_text, run_debug


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="run name under $RUNS_ROOT, or a path to a run dir")
    p.add_argument(
        "--queue", type=Path, default=Path("seeds/maniskill_queue.txt"), help="queue file of units"
    )
    p.add_argument("--policy", help="policy under policy/ (default: $POLICY)")
    args = p.parse_args(argv)
    if args.policy:
        os.environ["POLICY"] = args.policy
    run = RunDir(run_dir(args.run).resolve())
    try:
        code, manifest = run_debug(run, args.queue)
    except (ContractMismatch, ManifestError, QueueFileError, SeedBankError, ValueError) as exc:
        print(f"eval_one_worker: {exc}", file=sys.stderr)
        return 2
    print(results_text(run, manifest))
    return code


if __name__ == "__main__":
    sys.exit(run_command("eval_one_worker", main))
