"""Collect the reference policy's training data: expert demos on seeds disjoint from the eval bank.

Two phases, both resumable (rerun the same command after an interruption):
 1. expert-validated training seed banks, built by the precollect code that builds the eval bank
    (expert solves the seed, its ee6d trace replays to success), under <out>/seeds/;
 2. each accepted seed's trace replayed once more with rendering, writing per step the primary camera
    image (area-downsampled to the policy's resolution), proprio, goal feature and the trace, as
    <out>/episodes/<task>/seed<N>.npz; the next-30 action chunk of step t is trace[t:t+30].
The seed range [start, start + max-candidates) is checked against the eval bank before anything runs.
Renders at the eval's settings (IMAGE_SIZE, RENDER_SHADER, PRIMARY_CAM knobs), so training images are
the eval's images. Writes <out>/data_card.json (seed range, tasks, demos, samples).

Example (the shipped checkpoint's data):
  $SIM_PY scripts/collect_training_data.py --out data/reference --num 64 --max-candidates 150 --jobs 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import knobs
from harness.launch.precollect import Pair, run_pairs
from harness.process.failures import run_command
from policy.reference.features import IMAGE_RES, downsample, goal_of
from training.datacard import CARD_NAME, check_disjoint, write_card

SHIPPED_TASKS = [
    "PickCube", "PushCube", "PullCube", "StackCube", "LiftPegUpright", "PlaceSphere", "PullCubeTool",
]  # fmt: skip
_BENCH: Any = None


def render_demo(task: str, bench_config: str, seed: int, trace: np.ndarray, path: Path) -> dict[str, Any]:
    """Replay `trace` with rendering and write the per-step samples; runs in a worker process."""
    global _BENCH
    if _BENCH is None:
        from harness.config.settings import Settings
        from harness.episode.bench import load_benchmark

        _BENCH = load_benchmark("maniskill", Settings.from_env(os.environ))  # this pool process's own
    episode = _BENCH.make_episode(task, bench_config, seed, render=True)
    images, proprio, goal = [], [], []
    success = False
    try:
        for action in trace:
            obs = episode.observe()
            images.append(downsample(obs["images"][episode.cameras[0]]))
            proprio.append(np.asarray(obs["proprio"], np.float32))
            goal.append(goal_of(obs["state"]))
            episode.apply(action)
            if episode.success():
                success = True
                break
    finally:
        episode.close()
    if not success:
        return {"task": task, "seed": seed, "ok": False}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(
        tmp, images=np.stack(images), proprio=np.stack(proprio), goal=np.stack(goal),
        trace=trace.astype(np.float32),
    )  # fmt: skip
    tmp.replace(path)
    return {"task": task, "seed": seed, "ok": True, "steps": len(images)}


def _banks(out: Path, tasks: list[str], num: int, start: int, stop: int, jobs: int) -> dict[str, list[int]]:
    pairs = [Pair(task, "clean", "table", out / "seeds", num, start, stop) for task in tasks]
    banks = run_pairs(pairs, "maniskill", jobs, report=lambda line: print(line, flush=True))
    return {task: banks[(task, "table_clean")] for task in tasks}


def _traces(out: Path, task: str) -> dict[int, np.ndarray]:
    with np.load(out / "seeds" / task / "table_clean.traces.npz") as npz:
        return {int(k.removeprefix("seed")): npz[k] for k in npz.files}


def _render_all(out: Path, banks: dict[str, list[int]], jobs: int, deadline: float) -> None:
    """Round-robin over tasks so a deadline leaves every task with about the same number of demos."""
    todo = []
    depth = max((len(s) for s in banks.values()), default=0)
    traces = {task: _traces(out, task) for task in banks}
    for index in range(depth):
        for task, seeds in banks.items():
            if index < len(seeds):
                path = out / "episodes" / task / f"seed{seeds[index]}.npz"
                if not path.exists():
                    todo.append((task, seeds[index], traces[task][seeds[index]], path))
    began, total = time.monotonic(), len(todo)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        running = set()
        while todo or running:
            while todo and len(running) < jobs and time.time() < deadline:
                task, seed, trace, path = todo.pop(0)
                running.add(pool.submit(render_demo, task, "clean", seed, trace, path))
            if not running:
                print(f"deadline reached: {len(todo)} demos not rendered", flush=True)
                break
            done, running = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                r = future.result()
                finished = total - len(todo) - len(running)
                eta = (time.monotonic() - began) / max(finished, 1) * (len(todo) + len(running))
                state = f"{r['steps']} steps" if r["ok"] else "rendered replay did not succeed: dropped"
                print(
                    f"[{finished}/{total}] {r['task']} seed {r['seed']}: {state} (ETA {eta:.0f} s)",
                    flush=True,
                )


def _card(out: Path, tasks: list[str], seed_range: tuple[int, int]) -> dict[str, Any]:
    demos, samples = {}, {}
    for task in tasks:
        files = sorted((out / "episodes" / task).glob("seed*.npz"))
        demos[task] = sorted(int(f.name[4:-4]) for f in files)
        samples[task] = int(sum(np.load(f)["proprio"].shape[0] for f in files))
    return {
        "seed_range": list(seed_range), "tasks": tasks, "bench_config": "clean", "scene": "table",
        "demos": demos, "num_demos": sum(len(v) for v in demos.values()), "samples": samples,
        "image_res": IMAGE_RES, "camera": knobs.get("PRIMARY_CAM"),
        "render_size": knobs.get_int("IMAGE_SIZE"), "shader": knobs.get("RENDER_SHADER"),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=Path("data/reference"), help="data dir (default: data/reference)"
    )
    parser.add_argument("--tasks", nargs="+", default=SHIPPED_TASKS, help="tasks (default: the shipped list)")
    parser.add_argument("--num", type=int, default=40, help="demos per task (default: 40)")
    parser.add_argument("--start", type=int, default=100000, help="first candidate seed (default: 100000)")
    parser.add_argument(
        "--max-candidates", type=int, default=100, help="candidate seeds per task (default: 100)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default: 2)")
    parser.add_argument(
        "--minutes", type=float, default=0, help="stop rendering new demos after this (0: no limit)"
    )
    parser.add_argument(
        "--eval-bank", type=Path, default=Path("seeds/maniskill"), help="eval bank to stay clear of"
    )
    args = parser.parse_args(argv)
    if args.num < 1 or args.max_candidates < args.num or args.jobs < 1 or args.start < 0:
        parser.error("need --num >= 1, --max-candidates >= --num, --jobs >= 1, --start >= 0")
    seed_range = (args.start, args.start + args.max_candidates)
    check_disjoint(seed_range, args.eval_bank)
    began = time.time()
    deadline = began + args.minutes * 60 if args.minutes > 0 else float("inf")
    banks = _banks(args.out, args.tasks, args.num, *seed_range, args.jobs)
    _render_all(args.out, banks, args.jobs, deadline)
    card = _card(args.out, args.tasks, seed_range)
    write_card(args.out / CARD_NAME, card)
    samples = sum(card["samples"].values())
    took = time.time() - began
    print(f"wrote {args.out / CARD_NAME}: {card['num_demos']} demos, {samples} samples; {took:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(run_command("collect_training_data", main))
