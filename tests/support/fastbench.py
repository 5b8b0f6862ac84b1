"""A fast fake benchmark (BENCHMARK=tests.support.fastbench:FastBench) for queue and worker tests.

Same interface as `harness.episode.bench`, no simulator: an episode is FASTBENCH_STEPS steps of
FASTBENCH_STEP_MS each; success is decided by the seed (seed % 4 != 0). Chosen tasks misbehave:
FASTBENCH_CRASH="task,..." makes every episode of those tasks raise (their units must end up
quarantined); FASTBENCH_HANG="task/seed,..." makes that episode hang (a stall).
FASTBENCH_NO_RENDERER=1 is a node whose renderer is broken: the warm-up and every episode raise.
FASTBENCH_GATE="<dir>:<pool>" holds back every pool but <pool> (a pool label, seen as NODE_NAME
`<label>-...` locally, SLURM_JOB_NAME `eval-<label>` under srun): their episodes wait to start until
`<dir>/<STUDY_RUN>` exists, so a test can open a run to them once <pool> has worked on it, whatever
the machine's speed.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from harness.episode.bench import ExpertResult


def _listed(var: str) -> set[str]:
    return {item.strip() for item in os.environ.get(var, "").split(",") if item.strip()}


class FastEpisode:
    def __init__(self, task: str, bench_config: str, seed: int) -> None:
        self.instruction = f"do {task}"
        self.step_limit = int(os.environ.get("FASTBENCH_STEPS", "3"))
        self.action_dim = 10
        self.spec = {"benchmark": "fastbench", "task": task, "bench_config": bench_config, "action_dim": 10}
        self.spec.update({"cameras": [], "action": "ee6d", "arms": 1})
        self.seed = seed
        self.steps = 0
        self.delay = float(os.environ.get("FASTBENCH_STEP_MS", "5")) / 1000

    def observe(self) -> dict[str, Any]:
        return {"images": {}, "camera_params": {}, "proprio": np.zeros(10, np.float32), "state": {}}

    def apply(self, action: np.ndarray) -> None:
        time.sleep(self.delay)
        self.steps += 1

    def success(self) -> bool:
        return self.steps >= self.step_limit and self.seed % 4 != 0

    def collided(self) -> bool:
        return False

    def video_frame(self) -> np.ndarray:
        return np.zeros((8, 8, 3), np.uint8)

    def close(self) -> None:
        """Nothing to free."""


class HangingEpisode(FastEpisode):
    def apply(self, action: np.ndarray) -> None:
        time.sleep(3600)


def _wait_at_the_gate() -> None:
    gate, _, free = os.environ.get("FASTBENCH_GATE", "").rpartition(":")
    if not gate:
        return
    local, slurm = os.environ.get("NODE_NAME", ""), os.environ.get("SLURM_JOB_NAME", "")
    if local.startswith(f"{free}-") or slurm == f"eval-{free}":
        return
    while not os.path.exists(os.path.join(gate, os.environ["STUDY_RUN"])):
        time.sleep(0.1)


class FastBench:
    version = "fastbench-1"

    def tasks(self) -> list[str]:
        return []

    def check(self, task: str, bench_config: str) -> None:
        """Any task and config name builds a fast episode."""

    def warm_up(self) -> None:
        if os.environ.get("FASTBENCH_NO_RENDERER") == "1":
            raise RuntimeError("fastbench: no Vulkan device (FASTBENCH_NO_RENDERER=1)")

    def make_episode(self, task: str, bench_config: str, seed: int, *, render: bool = True) -> FastEpisode:
        self.warm_up()  # a broken renderer fails every episode too
        if task in _listed("FASTBENCH_CRASH"):
            raise RuntimeError(f"fastbench: task {task} is made to crash")
        if f"{task}/{seed}" in _listed("FASTBENCH_HANG"):
            return HangingEpisode(task, bench_config, seed)
        _wait_at_the_gate()
        return FastEpisode(task, bench_config, seed)

    def expert(self, task: str, bench_config: str, seed: int) -> ExpertResult:
        steps = int(os.environ.get("FASTBENCH_STEPS", "3"))
        return ExpertResult(True, "ok", np.zeros((steps, 10), np.float32), steps)
