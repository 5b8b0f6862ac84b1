"""Sim process: run units of a run against a model server, one record per seed, as a worker runs it.

One process for many units (harness/episode/simserver.py): it loads the benchmark and warms its
renderer up once, then reads one JSON assignment line per unit on stdin
(`{"run_dir", "scene", "task", "seeds", "writer_id", "progress_file"}`) and answers each, when the
unit ends, with a `UNIT_END {"returncode": N, "pid": P}` line on stdout; every other stdout line is
the unit's log. Stdin closed: the process exits 0.

Knobs (BENCHMARK, BENCH_CONFIG, IMAGE_SIZE, EXEC_ACTIONS, ACTION_SMOOTH, RECORD_VIDEO, ...) come from
the environment. Records go to each assignment's writer's own record file in the run dir, videos next to
it. A unit's returncode: 0 when every seed has a record (errored episodes included); 2 when it
cannot run at all (no model server, spec mismatch, a malformed assignment line); 3 when the connection to
the server is lost mid-unit; 5 (no episode run) when the code it runs is not the code the run's
contract hashed; 6 when it stopped because process --worker-pid was stopped (SIGSTOP: its lease may
be reaped), the seed running then and those after it left without a record. A worker reads 2 and 3
as the model server's fault, never as the unit's; after 6 it runs the seeds left again. The process
itself exits 2 when its knobs are refused and 4 when the benchmark or its renderer cannot start on
this node (it cannot be loaded, or its warm-up fails), before any assignment.

Example (one unit):
  echo '{"run_dir": "runs/demo", "scene": "table", "task": "PickCube", "seeds": [0, 1], "writer_id": "w0"}' \\
      | $SIM_PY scripts/eval_policy_client.py --ready-file /tmp/server.ready
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.config.settings import Settings
from harness.episode.bench import load_benchmark
from harness.episode.simserver import CANNOT_START, NO_BENCHMARK, serve
from harness.process.failures import run_command
from harness.wire.errors import WireError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--ready-file", type=Path, required=True, help="model server's ready file (ours with SIM_AS_SERVER=1)"
    )
    p.add_argument("--worker-pid", type=int, help="start no new episode while this process is stopped")
    p.add_argument(
        "--connect-timeout", type=float, default=300.0, help="seconds to wait for the server (300)"
    )
    p.add_argument("--canary-run", type=Path, help="run this run's canary in the warm-up, before any unit")
    p.add_argument("--progress-file", type=Path, help="the progress file the warm-up's canary replaces")
    return p.parse_args(argv)


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
    return serve(
        settings, bench, args.ready_file, args.connect_timeout, args.worker_pid,
        canary_run=args.canary_run, progress_file=args.progress_file,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(run_command("eval_policy_client", main, failures=(WireError,)))
