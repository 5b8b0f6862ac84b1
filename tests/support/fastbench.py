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
FASTBENCH_DRIFT_NODE=<node> is a node that simulates differently (issue 59's canary): on the node of
that name (SLURMD_NODENAME, else NODE_NAME, else the hostname) the physics drifts slightly from step 1
on and the simulator is another build (`version`; and since a node fingerprint reads the simulator's
build from its loaded module, `harness.episode.nodeprint.SIM_MODULES`, a stand-in `mani_skill` module of
that version is loaded there), so its fingerprint differs. Its episodes wait (up to 60 s) for the
run's canary reference before they start, so an identical node's canary is the reference.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import types
from typing import Any

import numpy as np

from harness.episode.bench import ExpertResult


def _listed(var: str) -> set[str]:
    return {item.strip() for item in os.environ.get(var, "").split(",") if item.strip()}


DRIFT = 1e-6  # the drifting node's physics: this much more per step


def drifting() -> bool:
    """This node is FASTBENCH_DRIFT_NODE."""
    node = os.environ.get("SLURMD_NODENAME") or os.environ.get("NODE_NAME") or socket.gethostname()
    return bool(os.environ.get("FASTBENCH_DRIFT_NODE")) and node == os.environ["FASTBENCH_DRIFT_NODE"]


def _another_build() -> None:
    """The drifting node's simulator build, as a node fingerprint sees one: a loaded module's version."""
    if "mani_skill" not in sys.modules:
        stand_in = types.ModuleType("mani_skill")
        stand_in.__version__ = "fastbench-drift"  # type: ignore[attr-defined]
        sys.modules["mani_skill"] = stand_in


def _after_the_reference(timeout_s: float = 60.0) -> None:
    """Wait until the run's canary reference exists (another node's canary), at most `timeout_s`."""
    run = os.environ.get("RUN_DIR") or os.path.join(
        os.environ.get("RUNS_ROOT", ""), os.environ.get("STUDY_RUN", "")
    )
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(os.path.join(run, "canary", "reference.npz")) and time.monotonic() < deadline:
        time.sleep(0.1)


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
        self.drift = DRIFT if drifting() else 0.0

    def physics_state(self) -> np.ndarray:
        """What the canary hashes: the step count and the seed (plus the drift on a drifting node)."""
        return np.array([self.steps * (0.01 + self.drift), float(self.seed)], np.float64)

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
    def __init__(self, *args: Any) -> None:
        self.version = "fastbench-1-drift" if drifting() else "fastbench-1"
        if drifting():
            _another_build()

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
        if drifting():
            _after_the_reference()
        return FastEpisode(task, bench_config, seed)

    def expert(self, task: str, bench_config: str, seed: int) -> ExpertResult:
        steps = int(os.environ.get("FASTBENCH_STEPS", "3"))
        return ExpertResult(True, "ok", np.zeros((steps, 10), np.float32), steps)
