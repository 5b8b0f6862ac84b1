"""One checkpoint's eval as a background process: create the run, complete it with one pool, organize it.

The process `harness.evaluate()` starts (`python -m harness.launch.evaljob RUN --queue Q --out DIR`),
with the caller's knobs in its environment. It is the watcher's step for a single checkpoint: the
run is created as new_run creates it (the same refusals, exit 2 with one line), completed on a pool
(LAUNCHER local, srun or submitit, POOL_NODES), its tables written to --out (results.csv, results.json,
report.html), the curve of its series rewritten beside them when the run belongs to one, and the
dashboards asked for told. Exit 0 when the run is complete, 1 when a pool failed, 2 when refused.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.config.paths import run_dir
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.launch import orchestrator, pools
from harness.launch.dashboards import dashboards_from_args
from harness.launch.drive import PoolLaunch, complete_run
from harness.launch.newrun import new_run
from harness.launch.seriesout import point_dict, write_curve
from harness.launch.watch import REFUSALS, _refusal, one_line
from harness.process.failures import FAILED, REFUSED, run_command
from harness.results import ResultsError
from harness.results.organize import Options, organize


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="run name under $RUNS_ROOT, or a path")
    p.add_argument("--queue", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="where the tables go (not a run dir)")
    p.add_argument("--series", help="the run's series prefix: rewrite its learning curve under --out/..")
    p.add_argument("--tensorboard", type=Path)
    p.add_argument("--wandb-project")
    p.add_argument("--wandb-run-id")
    p.add_argument("--wandb-mode", choices=("offline", "online"), default="offline")
    p.add_argument("--wandb-dir", type=Path)
    args = p.parse_args(argv)
    run = RunDir(run_dir(args.run).resolve())
    pools.stop_on_signals()
    try:
        manifest = new_run(run.root, args.queue)
        launch = PoolLaunch.of(Settings.from_env(os.environ), os.environ, None, 30.0)
        final = complete_run(run, manifest, launch, "evaluate", orchestrator.say)
    except REFUSALS as exc:
        print(f"evaluate: {one_line(exc)}", file=sys.stderr)
        return REFUSED
    finally:
        pools.terminate_all()
    if not final.complete:
        if why := _refusal(run.logs):
            print(f"evaluate: checkpoint {manifest.knobs['CKPT_NAME']}: {why}", file=sys.stderr)
            return REFUSED
        print(f"evaluate: {run.name}: {final.line()}: incomplete (see {run.logs})", file=sys.stderr)
        return FAILED
    boards = dashboards_from_args(args, args.out, orchestrator.say)
    try:
        organize(Options(str(run.root), run.name, out=args.out), orchestrator.say)
        point = None
        if args.series:
            points = write_curve(args.series, args.out.parent)
            point = next((point_dict(x) for x in points if x.run == run.name), None)
        for board in boards:
            board.log(point)
    except ResultsError as exc:
        print(f"evaluate: {run.name}: {exc}", file=sys.stderr)
        return FAILED
    finally:
        for board in boards:
            board.close()
    return 0


if __name__ == "__main__":
    sys.exit(run_command("evaluate", main))
