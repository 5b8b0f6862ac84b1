"""Sweep one model over several BENCH_CONFIGs: one run per config, one blocking pool each.

  orchestrators/sweep.sh --run-prefix k320 --queue seeds/maniskill/queue.txt --configs clean clutter3

Run `<prefix>_<config>` is created from the current knobs with BENCH_CONFIG=<config> (every run is
created and checked first, so a changed knob is refused before anything runs). A config whose run is
complete is skipped; re-running the same command resumes. `--queue` may contain `{config}` for a
queue file per config. Ends with a table of SR/HSR per config. Exit 0 when every run is complete.
"""

from __future__ import annotations

import os
import sys

from harness.config.paths import run_dir
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.launch import orchestrator
from harness.launch.drive import PoolLaunch, complete_run
from harness.launch.newrun import new_run
from harness.launch.progress import results_table
from harness.process.failures import run_command


def main(argv: list[str] | None = None) -> int:
    p = orchestrator.parser(__doc__)
    p.add_argument("--run-prefix", required=True, help="runs are named <prefix>_<config> under $RUNS_ROOT")
    p.add_argument("--queue", required=True, help="queue file; `{config}` is replaced by each config")
    p.add_argument("--configs", nargs="+", required=True, help="BENCH_CONFIG values, in order")
    args = p.parse_args(argv)

    def body() -> int:
        launch = PoolLaunch.of(Settings.from_env(os.environ), os.environ, args.nodes, args.progress_every)
        plan = []
        for config in args.configs:
            env = {**os.environ, "BENCH_CONFIG": config}
            run = RunDir(run_dir(f"{args.run_prefix}_{config}"))
            plan.append((config, run, new_run(run.root, args.queue.replace("{config}", config), env)))
        complete = True
        for config, run, manifest in plan:
            final = complete_run(run, manifest, launch, f"sweep-{config}", orchestrator.say)
            complete &= final.complete
        orchestrator.say("\n" + results_table(plan, "config"))
        return 0 if complete else 1

    return orchestrator.main_wrapper(body, "sweep")


if __name__ == "__main__":
    sys.exit(run_command("sweep", main))
