"""Any vla-eval `StepBenchmark` as one of our benchmarks, so its suites get our lease queue, resume,
Slurm and statistics: BENCHMARK=`vla-eval:<module.path:ClassName>`, its constructor parameters in
BENCH_PARAMS (a YAML/JSON mapping, part of the contract).

The episode is driven through the benchmark's own public async contract (start_episode,
get_observation, apply_action, is_done, get_result), exactly as vla-eval's sync runner drives it:
the result is read when the benchmark says done or at the step limit (its metadata's `max_steps`,
vla-eval's default 300). A benchmark that ends an episode early without success ends it here too
(the episode lowers its `step_limit` to the steps taken, which stops the sim client's loop).

The action convention is the benchmark's action spec (DimSpec components), declared in the hello
as `vla-eval:<key>=<format>/<dims>,...`; the policy's `action_convention` must name it, and its
`action_dim` must be the spec's total, or the hello refuses the pair before any episode.
ACTION_CONVENTION must be empty or that same string. The episode seed goes in as vla-eval's
`episode_idx` and seeds Python's, numpy's and torch's global RNGs before the reset; a benchmark that
resets its simulator unseeded regardless (MIKASA-Robo 1.0) is not reproducible per seed.
vla-eval has no collision signal (HSR = SR) and no expert (seed banks: USE_EVAL_SEEDS=0). A benchmark
whose metadata bounds its episodes (`max_episodes_per_task`: LIBERO's 50 init states) gets a seed
space, so a run planning seeds beyond it is refused when it is created.
"""

from __future__ import annotations

import asyncio
import random
import sys
from typing import Any

import numpy as np

from harness.config.knobtypes import parse_mapping
from harness.config.settings import Settings
from harness.config.simstack import VLA_EVAL_PREFIX, sim_stack, stack_text
from harness.episode.bench import ExpertResult
from harness.episode.bench.conventions import Convention

PREFIX = VLA_EVAL_PREFIX
DEFAULT_MAX_STEPS = 300  # vla-eval's orchestrator default when the metadata states none


class VlaEvalBenchmark:
    def __init__(self, import_string: str, settings: Settings) -> None:
        params_text = settings.bench_params
        from vla_eval.benchmarks.base import StepBenchmark
        from vla_eval.registry import resolve_import_string

        self.name = PREFIX + import_string
        try:
            cls = resolve_import_string(import_string)
        except Exception as exc:
            raise ValueError(f"BENCHMARK={self.name!r}: cannot import {import_string!r}: {exc}") from None
        if not (isinstance(cls, type) and issubclass(cls, StepBenchmark)):
            raise ValueError(
                f"BENCHMARK={self.name!r}: {import_string} is not a vla-eval StepBenchmark class"
            )
        params = parse_mapping("BENCH_PARAMS", params_text)
        cls.configure_render("cpu" if "cpu" in cls.render_backends else "gpu")
        try:
            self.bench = cls(**params)
        except Exception as exc:
            raise ValueError(
                f"BENCH_PARAMS={params_text!r}: {import_string} rejects it: {type(exc).__name__}: {exc}"
            ) from None
        try:
            specs = self.bench.get_action_spec()
        except NotImplementedError:
            raise ValueError(f"BENCHMARK={self.name!r}: the benchmark declares no action spec") from None
        self.layout = Convention(
            ",".join(f"{key}={spec.format}/{spec.dims}" for key, spec in specs.items()),
            "",
            tuple((key, int(spec.dims)) for key, spec in specs.items()),
        )
        self.action_convention = PREFIX + self.layout.name
        chosen = settings.action_convention.strip()
        if chosen not in ("", self.action_convention):
            raise ValueError(
                f"knob ACTION_CONVENTION={chosen!r}: {import_string} applies its own action spec "
                f"{self.action_convention!r}; leave ACTION_CONVENTION empty or set it to that"
            )
        self.action_spec = {key: spec.to_dict() for key, spec in specs.items()}
        metadata = self.bench.get_metadata()
        self.step_limit = int(metadata.get("max_steps", DEFAULT_MAX_STEPS))
        if "max_episodes_per_task" in metadata:  # LIBERO's 50 init states: seeds beyond are refused
            self.seed_space = range(int(metadata["max_episodes_per_task"]))
        self._tasks = {str(task.get("name", task)): dict(task) for task in self.bench.get_tasks()}
        self.version = stack_text(sim_stack(PREFIX + import_string))  # vla-eval and its simulators
        self.video_cam = settings.video_cam

    def tasks(self) -> list[str]:
        return list(self._tasks)

    def step_limit_for(self, task: str, bench_config: str) -> int:
        return self.step_limit  # the benchmark's max_steps, the same for every task

    def check(self, task: str, bench_config: str) -> None:
        if task not in self._tasks:
            raise ValueError(f"unknown task {task!r} of {self.name}; known: {', '.join(self._tasks)}")

    def make_episode(self, task: str, bench_config: str, seed: int, *, render: bool = True) -> VlaEvalEpisode:
        """The benchmark reset for `seed` (vla-eval's `episode_idx`); it always renders its own images."""
        self.check(task, bench_config)
        return VlaEvalEpisode(self, self._tasks[task], int(seed))

    def expert(self, task: str, bench_config: str, seed: int) -> ExpertResult:
        return ExpertResult(
            False, "vla-eval benchmarks have no expert", np.zeros((0, self.layout.arm_dim)), 0
        )


class VlaEvalEpisode:
    def __init__(self, owner: VlaEvalBenchmark, task: dict[str, Any], seed: int) -> None:
        self._owner, self.bench = owner, owner.bench
        self._task = {**task, "episode_idx": seed}
        self._loop = asyncio.new_event_loop()
        self.step_limit = owner.step_limit
        self.action_dim = owner.layout.arm_dim
        self._steps, self._done = 0, False
        try:
            _seed_global_rngs(seed)
            self._run(self.bench.start_episode(self._task))
            self._obs = self._run(self.bench.get_observation())
        except BaseException:
            self._loop.close()
            raise
        images = self._obs.get("images") or {}
        self.instruction = str(self._obs.get("task_description") or task.get("name", ""))
        first = next(iter(images.values()), None)
        self.spec = {
            "benchmark": owner.name, "task": task.get("name", ""), "action_dim": self.action_dim,
            "cameras": list(images), "action": owner.action_convention, "action_spec": owner.action_spec,
        }  # fmt: skip
        if first is not None:
            self.spec["image_size"] = list(np.asarray(first).shape[:2])

    def _run(self, coroutine: Any) -> Any:
        return self._loop.run_until_complete(coroutine)

    def observe(self) -> dict[str, Any]:
        obs = self._obs
        state = obs.get("state")
        extra = {k: np.asarray(v, dtype=np.float32) for k, v in obs.items() if _numeric(v) and k != "state"}
        return {
            "images": {
                cam: np.asarray(img, dtype=np.uint8) for cam, img in (obs.get("images") or {}).items()
            },
            "proprio": np.zeros(0, np.float32)
            if state is None
            else np.asarray(state, np.float32).reshape(-1),
            "state": extra,
        }

    def apply(self, action: np.ndarray) -> None:
        action = np.asarray(action, dtype=np.float32)
        if action.shape != (self.action_dim,) or not np.all(np.isfinite(action)):
            raise ValueError(f"action must be {self.action_dim} finite numbers, got shape {action.shape}")
        self._run(self.bench.apply_action({"actions": action}))
        self._steps += 1
        self._done = bool(self._run(self.bench.is_done()))
        if not self._done:
            self._obs = self._run(self.bench.get_observation())

    def success(self) -> bool:
        """The benchmark's result, read when it says done or at the step limit (as vla-eval does)."""
        if not (self._done or self._steps >= self.step_limit):
            return False
        success = bool(self._run(self.bench.get_result()).get("success", False))
        if self._done and not success:
            self.step_limit = self._steps  # the benchmark ended the episode: so does the sim client
        return success

    def smoothed_dims(self, smooth_rot: bool) -> np.ndarray:
        return self._owner.layout.smoothed_dims(1, smooth_rot)

    def collided(self) -> bool:
        return False  # vla-eval reports no collisions: HSR equals SR

    def video_frame(self) -> np.ndarray:
        frame = self.bench.render()
        if frame is None:
            images = self._obs.get("images") or {}
            if not images:
                raise ValueError(
                    f"{self._owner.name}: no image to record (no render(), no observation images)"
                )
            frame = images.get(self._owner.video_cam, next(iter(images.values())))
        return np.asarray(frame, dtype=np.uint8)

    def close(self) -> None:
        """Ends this episode only: the benchmark keeps its simulator for the next one (vla-eval's reuse)."""
        self._loop.close()


def _numeric(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind in "biuf"


def _seed_global_rngs(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)
