"""One worker end to end on this machine: model server + sim client over a queue, then SR/HSR.

No Slurm and no lease queue: units run one after another in this process's worker. Knobs come from
the environment (POLICY, BENCH_CONFIG, EVAL_TEST_NUM, SEEDS_ROOT, ...); a rerun into the same run dir
skips the seeds already recorded.

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

from harness import knobs
from harness.oneworker import results_table, run_queue
from harness.rundir import QueueFileError, RunDir
from harness.seedbank import SeedBankError


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
    run_path = Path(args.run) if "/" in args.run else Path(os.environ.get("RUNS_ROOT", "runs")) / args.run
    run = RunDir(run_path.resolve())
    print(f"run dir {run.root}: POLICY={knobs.get('POLICY')} BENCH_CONFIG={knobs.get('BENCH_CONFIG')} "
          f"EVAL_TEST_NUM={knobs.get('EVAL_TEST_NUM')}", flush=True)  # fmt: skip
    try:
        failed = run_queue(run, args.queue, report=lambda line: print(line, flush=True))
    except (QueueFileError, SeedBankError, ValueError) as exc:
        print(f"eval_one_worker: {exc}", file=sys.stderr)
        return 2
    print(results_table(run))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
