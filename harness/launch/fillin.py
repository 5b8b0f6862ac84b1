"""Fill in a run: raise EVAL_TEST_NUM, or add a disjoint seed bank, and run only the missing seeds.

  orchestrators/fillin.sh RUN --test-num 10               first 10 seeds of the run's bank per unit
  orchestrators/fillin.sh RUN --seeds-root seeds/bank2    every seed of a disjoint bank (or --test-num)

The fill-in is recorded in RUN's run.yaml (history), under the same contract hash; the pool runs with
the run's frozen knobs, so the caller need not repeat them (a contract knob set differently in the
caller's environment is refused). Seeds with a record are never run again: re-running the same
command resumes, and it also completes any earlier bank of the run still missing episodes.
"""

from __future__ import annotations

import os
import sys

from harness.config.manifest import load_manifest
from harness.config.paths import run_dir
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.launch import orchestrator
from harness.launch.drive import PoolLaunch, check_caller_env, complete_run
from harness.launch.newrun import new_fillin
from harness.launch.progress import results_table
from harness.process.failures import run_command


def main(argv: list[str] | None = None) -> int:
    p = orchestrator.parser(__doc__)
    p.add_argument("run", help="run name under $RUNS_ROOT, or a path")
    p.add_argument(
        "--test-num", type=int, help="the new EVAL_TEST_NUM (of the run's bank, or of --seeds-root)"
    )
    p.add_argument("--seeds-root", help="a seed bank disjoint from the run's banks (SEEDS_ROOT form)")
    args = p.parse_args(argv)
    if args.test_num is None and args.seeds_root is None:
        p.error("give --test-num N, --seeds-root BANK, or both")

    def body() -> int:
        launch = PoolLaunch.of(Settings.from_env(os.environ), os.environ, args.nodes, args.progress_every)
        run = RunDir(run_dir(args.run))
        frozen = load_manifest(run.root)
        check_caller_env(frozen, os.environ, run)
        manifest = new_fillin(run.root, args.test_num, args.seeds_root)  # LIBERO: no seed past 49
        final = complete_run(run, manifest, launch, "fillin", orchestrator.say)
        orchestrator.say("\n" + results_table([(args.run, run, manifest)], "run"))
        return 0 if final.complete else 1

    return orchestrator.main_wrapper(body, "fillin")


if __name__ == "__main__":
    sys.exit(run_command("fillin", main))
