"""Episodes per hour on LIBERO, ours against vla-eval's own runner, on the same cores, same oracle,
same episodes of `libero_object`.

Theirs: `vla-eval run --no-docker` in `--shards` shards (default 2: one simulator per core here;
its shards take episodes from one shared queue in its recording database, as its
`scripts/run_sharded.sh` runs them), against our model server speaking vla-eval's protocol
(MODEL_SERVER_PROTOCOL=vlaeval) serving policy/libero_oracle, its `LIBEROBenchmark` with our
privileged-state field (`harness.episode.bench.libero_vlaeval`). Timed from starting the policy
server to the last shard's exit. Ours: `scripts/new_run.py` then `scripts/run_local.sh 1`, one
local node at our default sizing (CPU_WORKERS=auto: one worker per core, each with its own model
server), BENCHMARK=libero, RECORD_VIDEO=0; timed from the pool's start to its exit. Both sides
render on the CPU with software EGL and use LIBERO's step limit (280). vla-eval renders the wrist
camera too (it always does), so ours renders the same two cameras (`wrist_image: true`: the
like-for-like figure); `--agentview-too` runs ours again with agentview only (our default, what a
one-camera policy pays).

`--episodes` E are the init states 0..k-1 of the first E/k tasks, k = ceil(E/10) (20: all ten tasks,
init states 0 and 1). Prints each side's figures; last line:
`libero_vs_vlaeval=<ours with both cameras / theirs> theirs_eph=<n> ours_eph=<n>`, with
`--agentview-too` also `libero_vs_vlaeval_agentview=<r> ours_agentview_eph=<n>`.

Example (the shared machine: a short run):
  $SIM_PY benchmarks/libero_vs_vlaeval.py --episodes 4
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.vlaeval_libero import (  # noqa: E402
    POLICY,
    SUITE,
    export_vlaeval,
    pool_outcomes,
    render_env,
    start_vlaeval_run,
    start_vlaeval_server,
    vlaeval_config,
    vlaeval_outcomes,
)
from support.wirekit import stop_process  # noqa: E402

STEP_LIMIT = 280  # libero_object's, on both sides


def episode_plan(episodes: int, tasks: list[str]) -> tuple[list[str], int]:
    """(tasks, init states per task) for `episodes` episodes; a count that does not split evenly is
    a clear error."""
    per_task = math.ceil(episodes / len(tasks))
    if episodes < 1 or episodes % per_task or episodes // per_task > len(tasks):
        raise SystemExit(
            f"--episodes {episodes}: expected n x k with n <= {len(tasks)} tasks, k = ceil(n/10)"
        )
    return tasks[: episodes // per_task], per_task


def run_theirs(work: Path, tasks: list[str], init_states: int, shards: int) -> tuple[float, int]:
    """(wall seconds, successes) of vla-eval's runner in `shards` shards."""
    work.mkdir(parents=True)
    started = time.monotonic()
    server, url = start_vlaeval_server(work, "")
    try:
        config = vlaeval_config(url, tasks, init_states, STEP_LIMIT, work / "theirs")
        eval_id = str(uuid.uuid4())
        procs = [
            start_vlaeval_run(config, work / f"shard{i}.log", (i, shards), eval_id) for i in range(shards)
        ]
        codes = [proc.wait() for proc in procs]
        wall = time.monotonic() - started
    finally:
        stop_process(server)
    if any(codes):
        raise SystemExit(f"vla-eval shards exited {codes}: see {work}/shard*.log")
    export_vlaeval(work / "theirs", eval_id)
    outcomes = vlaeval_outcomes(work / "theirs")
    return wall, sum(success for success, _ in outcomes.values())


def run_ours(work: Path, tasks: list[str], init_states: int, wrist: bool) -> tuple[float, int]:
    """(wall seconds, successes) of our local pool, one node at the default sizing; `wrist`: render
    the wrist camera as well as agentview."""
    work.mkdir(parents=True)
    queue = work / "queue.txt"
    queue.write_text("".join(f"libero {task}\n" for task in tasks))
    env = {**os.environ, **render_env(), "PYTHONPATH": str(ROOT), "EVAL_ROOT": str(ROOT), "BUNDLE": str(ROOT)}
    env.update(RUNS_ROOT=str(work), STUDY_RUN="ours", BENCHMARK="libero", BENCH_CONFIG=SUITE, POLICY=POLICY)
    params = {"privileged_state": True, "wrist_image": wrist}
    env.update(BENCH_PARAMS=json.dumps(params), USE_EVAL_SEEDS="0", RECORD_VIDEO="0")
    env.update(EVAL_TEST_NUM=str(init_states))
    env.pop("ACTION_CONVENTION", None)
    created = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "new_run.py"), "ours", "--queue", str(queue)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    if created.returncode:
        raise SystemExit(f"new_run.py failed: {created.stderr[-2000:]}")
    started = time.monotonic()
    with (work / "pool.log").open("w") as log:
        code = subprocess.call(["bash", str(ROOT / "scripts" / "run_local.sh"), "1"], env=env, stdout=log,
                               stderr=subprocess.STDOUT)  # fmt: skip
    wall = time.monotonic() - started
    if code:
        raise SystemExit(f"run_local.sh exited {code}: see {work}/pool.log")
    outcomes = pool_outcomes(work / "ours")
    return wall, sum(success for success, _ in outcomes.values())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=20, help="episodes a side (default 20)")
    parser.add_argument("--shards", type=int, default=2, help="vla-eval shards (default 2)")
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (logs, results)")
    parser.add_argument(
        "--agentview-too", action="store_true", help="run ours again with agentview only (our default)"
    )
    args = parser.parse_args()
    from harness.episode.bench.libero_suite import suite_tasks

    tasks, init_states = episode_plan(args.episodes, list(suite_tasks(SUITE)))
    work = args.keep or Path(tempfile.mkdtemp(prefix="libero_vs_vlaeval."))
    work.mkdir(parents=True, exist_ok=True)
    print(f"{len(tasks)} {SUITE} tasks x init states 0..{init_states - 1}, cores {os.cpu_count()}, in {work}")
    theirs_s, theirs_ok = run_theirs(work / "theirs", tasks, init_states, args.shards)
    print(
        f"theirs: vla-eval run, {args.shards} shards: {theirs_ok}/{args.episodes} solved in {theirs_s:.1f} s"
    )
    eph = {"theirs": args.episodes * 3600 / theirs_s}
    sides = [("ours", True)] + ([("ours_agentview", False)] if args.agentview_too else [])
    for name, wrist in sides:
        wall, solved = run_ours(work / name, tasks, init_states, wrist)
        cameras = "agentview + wrist" if wrist else "agentview"
        print(f"{name}: run_local.sh 1 ({cameras}): {solved}/{args.episodes} solved in {wall:.1f} s")
        eph[name] = args.episodes * 3600 / wall
    ratios = {f"libero_vs_vlaeval{name[4:]}": eph[name] / eph["theirs"] for name, _ in sides}
    print(
        " ".join(f"{name}={value:.2f}" for name, value in ratios.items()) + " "
        + " ".join(f"{name}_eph={value:.0f}" for name, value in eph.items())
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
