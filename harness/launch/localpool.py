"""The local pool: N "nodes" on this machine, no Slurm (`scripts/run_local.sh N`).

Each node is `slurm/eval_node.sh` with its own NODE_NAME, exactly as `srun` would start it on N
nodes, so workers steal from the run's lease queue as they would across a cluster. Progress is the
queue's state every PROGRESS_S seconds; Ctrl-C or SIGTERM stops every node cleanly (workers release
their leases). With --results MODEL the run's records are organized at the end and the results
table is printed. Exit status: 0 when the nodes finished, 2 when the input was refused (before any
node starts, or by a worker), 1 for any other failure (the first worker failure is named).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.config import knobs
from harness.config.paths import CODE_ROOT, run_dir
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.launch import pools
from harness.launch.preflight import causes, check_run, first_failure, first_refusal
from harness.process.failures import FAILED, REFUSED, run_command
from harness.results.organize import default_out
from harness.results.status import collect

PROGRESS_S = 10.0


def progress_line(run: RunDir, settings: Settings) -> str:
    """Units and episodes done, success so far and the ETA (`scripts/status.py RUN` shows more)."""
    status = collect(run, settings)
    counts = status.counts
    eta = f"{status.eta_s / 60:.1f} min" if status.eta_s is not None else "unknown"
    return (
        f"[pool] {time.strftime('%H:%M:%S')} units {counts['done']}/{len(status.units)} done, "
        f"{counts['leased']} leased, {counts['quarantined']} quarantined | episodes "
        f"{status.done}/{status.planned}, {status.errored} errored | SR so far {status.sr.text()} | ETA {eta}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("nodes", type=int, help="local nodes to start (each runs CPU_WORKERS workers)")
    parser.add_argument(
        "--results", metavar="MODEL", help="then organize results as MODEL and print the table"
    )
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error(f"nodes={args.nodes}: expected at least 1")
    study = knobs.get("STUDY_RUN")
    if not study:
        parser.error("set STUDY_RUN to the run dir name under $RUNS_ROOT (create it with scripts/new_run.py)")
    run = RunDir(run_dir(study))
    settings = Settings.from_env(os.environ)
    eval_root = Path(os.environ.get("EVAL_ROOT") or CODE_ROOT)
    refused = check_run(run)
    if refused:
        print(f"[pool] refusing to start on {run.root}: {refused}", file=sys.stderr)
        return REFUSED
    pools.stop_on_signals()
    try:
        started = pools.start(pools.Pool(run, args.nodes, dict(os.environ), "local"), "local", eval_root)
        print(
            f"[pool] {args.nodes} local nodes x {knobs.get('CPU_WORKERS')} workers on {run.root}", flush=True
        )
        next_report = time.monotonic() + PROGRESS_S
        while (code := pools.finished(started)) is None:
            time.sleep(0.5)
            if time.monotonic() >= next_report:
                print(progress_line(run, settings), flush=True)
                next_report += PROGRESS_S
    finally:
        pools.terminate_all()
    print(progress_line(run, settings), flush=True)
    for warning in collect(run, settings).warnings:  # malformed record lines: named once, at the end
        print(f"[pool] warning: {warning}", flush=True)
    print(f"[pool] nodes finished with status {code}; logs in {run.logs}", flush=True)
    if code != 0 and (refusal := first_refusal(run.logs)):
        print(f"[pool] a worker refused: {refusal}", flush=True)
        print(f"run_local: refused: {refusal.splitlines()[0]}", file=sys.stderr)
        return REFUSED
    if code != 0:
        failure = first_failure(run.logs)
        if failure:
            print(f"[pool] a worker failed: {failure}", flush=True)
        found = causes(run.logs)
        for cause in found:
            print(f"[pool] cause: {cause}", flush=True)
        why = found[0] if found else f"nodes finished with status {code}"
        print(f"run_local: failed: {why}", file=sys.stderr)
        return FAILED
    if args.results:
        scripts = eval_root / "scripts"
        code = subprocess.call(
            [sys.executable, str(scripts / "organize_results.py"), str(run.root), args.results]
        )
        out = default_out(args.results)
        if code == 0:  # per-task tables of each scene, then the totals
            for table in [*sorted(out.glob("*/results.txt")), out / "results.txt"]:
                print(table.read_text())
    return code


if __name__ == "__main__":
    sys.exit(run_command("run_local", main))
