"""Build pre-validated seed banks: <root>/<task>/<scene>_<config>.txt (+ .traces.npz) and a queue file.

For each (task, config) it judges candidate seeds start, start+1, ... over --jobs processes and keeps
the first --num that the expert solves (and whose ee6d trace replays to success; a seed that succeeds
with no action is rejected). Resumable: rerun the same command after an interruption. Deterministic:
the same arguments regenerate the same files byte for byte.

Example (the shipped bank):
  $SIM_PY scripts/precollect_eval_seeds.py --root seeds/maniskill --configs clean clutter3 --jobs 2
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.config import knobs
from harness.launch.precollect import Pair, run_pairs, write_queue
from harness.process.failures import run_command

SHIPPED_TASKS = [
    "PickCube",
    "PushCube",
    "PullCube",
    "StackCube",
    "LiftPegUpright",
    "PlaceSphere",
    "PullCubeTool",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", type=Path, default=Path("seeds/maniskill"), help="seed bank root")
    parser.add_argument("--tasks", nargs="+", default=SHIPPED_TASKS, help="tasks (default: the shipped list)")
    parser.add_argument(
        "--configs", nargs="+", default=["clean"], help="BENCH_CONFIG levels (default: clean)"
    )
    parser.add_argument(
        "--scene", default="table", help="scene name in task_config and the queue (default: table)"
    )
    parser.add_argument("--num", type=int, default=10, help="seeds per bank (default: 10)")
    parser.add_argument("--start", type=int, default=0, help="first candidate seed (default: 0)")
    parser.add_argument(
        "--max-candidates", type=int, default=40, help="candidate seeds per bank (default: 40)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default: 2)")
    parser.add_argument(
        "--benchmark", default=knobs.get("BENCHMARK"), help="benchmark spec (default: $BENCHMARK)"
    )
    parser.add_argument(
        "--queue-file",
        type=Path,
        help="queue file to write (default: <root>_queue.txt, e.g. seeds/maniskill_queue.txt)",
    )
    args = parser.parse_args(argv)
    if args.num < 1 or args.max_candidates < args.num or args.jobs < 1 or args.start < 0:
        parser.error("need --num >= 1, --max-candidates >= --num, --jobs >= 1, --start >= 0")
    _check_names(parser, args)
    pairs = [
        Pair(task, config, args.scene, args.root, args.num, args.start, args.start + args.max_candidates)
        for task in args.tasks
        for config in args.configs
    ]
    began = time.monotonic()
    banks = run_pairs(pairs, args.benchmark, args.jobs, report=lambda line: print(line, flush=True))
    full = [
        t for t in args.tasks if all(len(banks[(t, p.task_config)]) >= args.num for p in pairs if p.task == t)
    ]
    queue = args.queue_file or args.root.with_name(args.root.name + "_queue.txt")
    write_queue(queue, args.scene, full)
    print(f"wrote {queue}: {len(full)} units; {time.monotonic() - began:.0f} s")
    short = sorted(set(args.tasks) - set(full))
    if short:
        print(f"tasks left out of the queue (bank short): {' '.join(short)}", file=sys.stderr)
    return 0 if not short else 1


def _check_names(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Unknown task/config names fail here, before any process starts."""
    if args.benchmark != "maniskill":
        return
    if knobs.get("ACTION_CONVENTION").strip() not in ("", "ee6d"):
        parser.error(
            f"ACTION_CONVENTION={knobs.get('ACTION_CONVENTION')!r}: seed banks hold ee6d traces "
            "(what replay plays); precollect with ACTION_CONVENTION empty or ee6d"
        )
    from harness.episode.bench.maniskill_config import load_table

    table = load_table()
    try:
        for task in args.tasks:
            table.task(task)
        for config in args.configs:
            table.level(config)
    except KeyError as exc:
        parser.error(str(exc.args[0]))


if __name__ == "__main__":
    sys.exit(run_command("precollect_eval_seeds", main))
