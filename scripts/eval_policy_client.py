"""Sim client: run the seeds of one unit (scene, task) against a model server, one record per seed.

Knobs (BENCHMARK, BENCH_CONFIG, IMAGE_SIZE, EXEC_ACTIONS, ACTION_SMOOTH, RECORD_VIDEO, ...) come from
the environment. Records go to this writer's own metrics file in the run dir, videos next to it.
Exit 0 when every seed has a record (errored episodes included); 2 when it cannot run at all (bad
arguments, no model server, spec mismatch); 3 when the connection to the server is lost mid-unit;
4 when the benchmark or its renderer cannot start on this node (it cannot be loaded, or its
warm-up fails); 5 (no episode run) when the code it runs is not the code the run's contract hashed;
6 when it stopped because process --worker-pid was stopped (SIGSTOP: its lease may be reaped), the
seed running then and those after it left without a record. A worker reads 2 and 3 as the model
server's fault and 4 as the node's, never as the unit's; after 6 it runs the seeds left again.

--serve (how a worker runs it): one process for many units, one JSON job line per unit on stdin,
answered by a `UNIT_END {"returncode": <the exit status above>, "pid": ...}` line on stdout
(harness/episode/simserver.py); imports and the renderer start once per process, not per unit.

Example:
  $SIM_PY scripts/eval_policy_client.py --run-dir runs/demo --scene table --task PickCube \\
      --seeds 0 1 --ready-file /tmp/server.ready --writer-id w0
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.config.settings import Settings
from harness.episode.bench import load_benchmark
from harness.episode.simclient import SimJob
from harness.episode.simserver import CANNOT_START, NO_BENCHMARK, run_job, serve
from harness.process.failures import run_command
from harness.wire.errors import WireError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--serve", action="store_true", help="run the units given as job lines on stdin")
    p.add_argument("--run-dir", type=Path, help="the run directory (required without --serve)")
    p.add_argument("--scene", help="scene of the unit (ManiSkill: table)")
    p.add_argument("--task", help="task of the unit, e.g. PickCube")
    p.add_argument("--seeds", type=int, nargs="+", help="episode seeds to run, in order")
    p.add_argument(
        "--ready-file", type=Path, required=True, help="model server's ready file (ours with SIM_AS_SERVER=1)"
    )
    p.add_argument("--writer-id", help="this writer's id: names its own metrics file")
    p.add_argument("--progress-file", type=Path, help='replaced each step with {"seed": N, "step": K}')
    p.add_argument("--worker-pid", type=int, help="start no new episode while this process is stopped")
    p.add_argument(
        "--connect-timeout", type=float, default=300.0, help="seconds to wait for the server (300)"
    )
    args = p.parse_args(argv)
    if not args.serve:
        missing = [f"--{n.replace('_', '-')}" for n in ("run_dir", "scene", "task", "seeds", "writer_id")
                   if getattr(args, n) is None]  # fmt: skip
        if missing:
            p.error(f"the following arguments are required without --serve: {', '.join(missing)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = Settings.from_env(os.environ)  # the worker checked them: a bad one is a bad setup
    except ValueError as exc:
        print(f"eval_policy_client: cannot start: {exc}", file=sys.stderr)
        return CANNOT_START
    try:
        bench = load_benchmark(settings.benchmark, settings)
    except (ValueError, OSError, ImportError, RuntimeError) as exc:  # a bad spec, or a broken install
        print(f"eval_policy_client: cannot start the benchmark: {exc}", file=sys.stderr)
        return NO_BENCHMARK
    if args.serve:
        return serve(settings, bench, args.ready_file, args.connect_timeout, args.worker_pid)
    job = SimJob(
        args.run_dir, args.scene, args.task, args.seeds, args.writer_id, args.progress_file, args.worker_pid
    )
    return run_job(
        settings, bench, job, args.ready_file, args.connect_timeout,
        report=lambda line: print(line, flush=True),
        complain=lambda line: print(line, file=sys.stderr, flush=True),
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(run_command("eval_policy_client", main, failures=(WireError,)))
