"""Launch a node pool on a run with submitit: one task per node, each running slurm/eval_node.sh.

The submitit equivalent of the README's `srun` block, for Python drivers: it submits one Slurm job
(N nodes x 1 task), shows the run's progress until the job ends, and returns the run's summary
(episodes done of planned, pooled SR / HSR, each node's exit status). The eval knobs come from the
environment, as for every launch. The run dir must exist (scripts/new_run.py), or pass --queue to
create it. Resume = run the same command again.

    STUDY_RUN=my_run POLICY=... python orchestrators/submit.py --nodes 3 --gres gpu:1

`orchestrators/submit.py` is its command line; `submit()` is the Python API.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import submitit

from harness.config import knobs
from harness.config.manifest import Manifest, load_manifest
from harness.config.paths import CODE_ROOT, run_dir
from harness.config.rundir import RunDir
from harness.episode.records import read_tree
from harness.launch.newrun import new_run
from harness.launch.pools import PASSED, final_state, node_results, node_task
from harness.launch.progress import progress
from harness.process.failures import run_command
from harness.results.aggregate import summarize


@dataclass
class RunSummary:
    run: str
    job_id: str
    state: str
    planned: int
    done: int
    errored: int
    sr: float | None
    hsr: float | None
    nodes: list[dict[str, object]] = field(default_factory=list)


def submit(
    run: RunDir,
    nodes: int,
    *,
    gres: str = "",
    partition: str = "",
    timeout_min: int = 60,
    cpus_per_task: int = 1,
    poll_s: float = 2.0,
    show=print,
) -> RunSummary:
    """Submit the pool, show progress until it ends, and return the run's summary."""
    env = {k: v for k, v in os.environ.items() if k in knobs.KNOBS or k in PASSED}
    env["STUDY_RUN"] = run.name
    env["RUNS_ROOT"] = str(run.root.parent)
    executor = submitit.AutoExecutor(folder=run.logs / "submitit", cluster="slurm")
    params: dict[str, object] = {
        "nodes": nodes,
        "tasks_per_node": 1,
        "cpus_per_task": cpus_per_task,
        "timeout_min": timeout_min,
        "name": f"eval-{run.name}",
        "slurm_srun_args": ["--kill-on-bad-exit=0"],
    }
    if gres:
        params["slurm_gres"] = gres
    if partition:
        params["slurm_partition"] = partition
    executor.update_parameters(**params)
    job = executor.submit(node_task, env, str(CODE_ROOT / "slurm" / "eval_node.sh"))
    show(f"[submit] job {job.job_id}: {nodes} node(s) on run {run.root}")
    frozen = load_manifest(run.root)
    last = ""
    while not job.done():
        line = f"[submit] job {job.job_id} {job.state}: {progress(run, frozen).line()}"
        if line != last:
            show(line)
            last = line
        time.sleep(poll_s)
    return summarize_run(run, frozen, str(job.job_id), final_state(job), node_results(job))


def summarize_run(run: RunDir, frozen: Manifest, job_id: str, state: str, nodes: list) -> RunSummary:
    """The run's summary: planned vs done episodes, pooled SR and HSR over every recorded trial."""
    prog = progress(run, frozen)
    records = list(read_tree(run.results).records.values())
    total = summarize(records, "").total if records else None
    return RunSummary(
        run=run.name,
        job_id=job_id,
        state=state,
        planned=prog.planned,
        done=prog.done,
        errored=prog.errored,
        sr=total.pooled_sr.value if total else None,
        hsr=total.pooled_hsr.value if total else None,
        nodes=nodes,
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--run", default=os.environ.get("STUDY_RUN", ""), help="run name or path (default $STUDY_RUN)"
    )
    parser.add_argument("--nodes", type=int, required=True, help="nodes in the pool (one task each)")
    parser.add_argument("--gres", default="", help="per-node gres, e.g. gpu:1")
    parser.add_argument("--partition", default="", help="Slurm partition (default: the cluster's default)")
    parser.add_argument("--time", type=int, default=60, dest="timeout_min", help="time limit in minutes")
    parser.add_argument("--cpus-per-task", type=int, default=1)
    parser.add_argument("--queue", type=Path, help="create the run dir from this queue file first")
    args = parser.parse_args()
    if not args.run:
        parser.error("no run: pass --run or set STUDY_RUN")
    if args.nodes < 1:
        parser.error(f"--nodes {args.nodes}: expected at least 1")
    run = RunDir(run_dir(args.run).resolve())
    if args.queue is not None:
        new_run(run.root, args.queue)
    if not run.manifest.exists():
        parser.error(
            f"{run.root} is not a run dir (no run.yaml): create it with scripts/new_run.py or --queue"
        )
    summary = submit(
        run,
        args.nodes,
        gres=args.gres,
        partition=args.partition,
        timeout_min=args.timeout_min,
        cpus_per_task=args.cpus_per_task,
    )
    print(json.dumps(asdict(summary), indent=1))
    return 0 if summary.done == summary.planned else 1


if __name__ == "__main__":
    sys.exit(run_command("submit", main))
