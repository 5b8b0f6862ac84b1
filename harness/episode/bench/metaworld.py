"""MetaWorld (MuJoCo, pip `metaworld`) as one of our benchmarks: BENCHMARK=metaworld.

BENCH_CONFIG is a task list, `MT10` or `MT50` (MetaWorld's own: `metaworld.env_dict.MT10_V3`,
`MT50_V3`); a task is a MetaWorld env name (`push-v3`); run creation refuses a list or a task it does
not know, one line naming what it knows. An episode seed is a seeded task variation: the env's RNG is
seeded with it (`env.seed`) and its reset draws the object and goal positions from that RNG
(`seeded_rand_vec`), so an episode is a function of (task, seed) alone, whatever its process ran
before. (LeRobot's env unfreezes the same draw but from numpy's global RNG, seeded once per
`lerobot-eval`: aligning the two is the cross-check's work, not this adapter's.) The env is built
goal-observable, as MetaWorld's MT benchmarks build it, and kept for the task's next seeds.

Actions are MetaWorld's own (`harness.episode.bench.conventions.METAWORLD`): 4 numbers, the mocap
target's xyz change (1 = 0.01 m, clipped to [-1, 1]) and the gripper effort (+1 closes, -1 opens,
continuous). Done = MetaWorld's `info["success"]` after an action; the step limit is its horizon,
500 (`max_path_length`), unless BENCH_PARAMS max_steps sets a lower one. Observation: `images` (the
BENCH_PARAMS cameras; default `corner2` placed as LeRobot's MetaWorld env places it, at 480 px,
turned 180 degrees upright as LeRobot turns it), rendered only when the policy or the video asks for
a frame; `proprio` = the hand's xyz and the fingers' opening (MetaWorld's first 4 numbers, LeRobot's
`agent_pos`); `state` = {}; and, only with BENCH_PARAMS privileged_state: true, `privileged_state`:
MetaWorld's 39-number state observation (hand, fingers, object poses, the previous frame's, the goal)
and the task name, what MetaWorld's scripted policies read: for policy/metaworld_oracle only.
Collisions: none detected (`collided` is always False), so HSR = SR on MetaWorld.
The expert (seed banks) is MetaWorld's scripted policy for the task, run in this process.
"""

from __future__ import annotations

import atexit
import contextlib
import pickle
import warnings
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from harness.config.knobtypes import parse_mapping
from harness.config.settings import Settings
from harness.config.simstack import installed_version, sim_stack, stack_text
from harness.episode.bench import ExpertResult
from harness.episode.bench.conventions import METAWORLD
from harness.episode.bench.libero_suite import RENDERERS, select_renderer

ACTION_CONVENTION = METAWORLD.name
ACTION_DIM = METAWORLD.arm_dim  # 4
HORIZON = 500  # MetaWorld's max_path_length: a step past it raises in MetaWorld
TASK_LISTS = ("MT10", "MT50")  # BENCH_CONFIG values: metaworld.env_dict's MT10_V3, MT50_V3
CAMERAS = ("corner", "corner2", "corner3", "topview", "behindGripper", "gripperPOV")  # the model's
# LeRobot's MetaWorld env moves corner2 here (after arXiv 2206.14244) and turns its frames 180 degrees
CORNER2_POS = (0.75, 0.075, 0.7)
PINNED_MUJOCO = "3.3.2"  # MetaWorld 3.0 builds no env on MuJoCo 3.17 (`eq_data` holds 12 numbers there)
SEED_SPACE = range(2**32)  # numpy's seeding takes any 32-bit unsigned integer


@dataclass(frozen=True)
class MetaWorldParams:
    """BENCH_PARAMS of BENCHMARK=metaworld (a YAML/JSON mapping; every key optional)."""

    cameras: tuple[str, ...] = ("corner2",)  # [] renders nothing (a state-only policy: the oracle)
    image_size: int = 480  # rendered height = width; LeRobot's MetaWorld env renders 480
    render: str = "egl"  # egl or osmesa (Mesa's software rasterizer either way on a CPU)
    max_steps: int = 0  # 0: MetaWorld's horizon, 500
    privileged_state: bool = False  # obs["privileged_state"]: simulator state, for oracles only
    mujoco: str = PINNED_MUJOCO  # the MuJoCo release the run must run on

    @classmethod
    def parse(cls, text: str) -> MetaWorldParams:
        raw = parse_mapping("BENCH_PARAMS", text)
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ValueError(
                f"BENCH_PARAMS: unknown MetaWorld setting(s) {unknown}; known: {', '.join(known)}"
            )
        for key, value in raw.items():
            kind = list if key == "cameras" else type(getattr(cls, key))
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ValueError(f"BENCH_PARAMS {key}={value!r}: expected a {kind.__name__}")
        if "cameras" in raw:
            raw["cameras"] = tuple(raw["cameras"])
        params = cls(**raw)
        if bad := [cam for cam in params.cameras if cam not in CAMERAS]:
            raise ValueError(
                f"BENCH_PARAMS cameras: unknown camera(s) {bad}; MetaWorld has {', '.join(CAMERAS)}"
            )
        if params.render not in RENDERERS:
            raise ValueError(f"BENCH_PARAMS render={params.render!r}: expected one of {', '.join(RENDERERS)}")
        if not 16 <= params.image_size <= 1024:
            raise ValueError(f"BENCH_PARAMS image_size={params.image_size}: expected 16 to 1024 pixels")
        if not 0 <= params.max_steps <= HORIZON:
            raise ValueError(
                f"BENCH_PARAMS max_steps={params.max_steps}: expected 0 (the horizon) to {HORIZON}"
            )
        return params


def task_list(bench_config: str) -> list[str]:
    """The env names of MetaWorld task list `bench_config` (MT10, MT50), in MetaWorld's order."""
    if bench_config not in TASK_LISTS:
        raise ValueError(
            f"BENCH_CONFIG={bench_config!r}: not a MetaWorld task list; "
            f"expected one of {', '.join(TASK_LISTS)}"
        )
    try:
        from metaworld import env_dict
    except ImportError as exc:
        raise ValueError(
            f"BENCHMARK=metaworld needs metaworld in the sim env (scripts/setup.sh): {exc}"
        ) from None
    return list(env_dict.MT10_V3 if bench_config == "MT10" else env_dict.MT50_V3)


def check_task(bench_config: str, task: str) -> None:
    tasks = task_list(bench_config)
    if task not in tasks:
        raise ValueError(f"task {task!r} is not in MetaWorld's {bench_config}; its tasks: {', '.join(tasks)}")


def check_mujoco(wanted: str) -> None:
    have = installed_version("mujoco")
    if have == wanted:
        return
    if wanted == PINNED_MUJOCO:
        raise ValueError(
            f"BENCHMARK=metaworld: this sim env has mujoco {have}, the pinned one is {PINNED_MUJOCO} "
            f"(MetaWorld 3.0 builds no env on 3.17). Install the pin (scripts/setup.sh), or run on {have} "
            f"knowingly with BENCH_PARAMS='{{mujoco: \"{have}\"}}' (the run's contract then says so)"
        )
    raise ValueError(f"BENCH_PARAMS mujoco={wanted!r}: this sim env has mujoco {have}")


def instruction_of(task: str) -> str:
    """What the policy is told: the env name in words (`pick-place-v3`: "pick place")."""
    return task.removesuffix("-v3").replace("-", " ")


class MetaWorldBenchmark:
    seed_space = SEED_SPACE
    action_convention = ACTION_CONVENTION

    def __init__(self, settings: Settings) -> None:
        self.params = MetaWorldParams.parse(settings.bench_params)
        check_mujoco(self.params.mujoco)
        chosen = settings.action_convention.strip()
        if chosen not in ("", ACTION_CONVENTION):
            raise ValueError(
                f"knob ACTION_CONVENTION={chosen!r}: MetaWorld applies {ACTION_CONVENTION!r}; leave it empty"
            )
        select_renderer(self.params.render)  # before MuJoCo is first imported
        self.bench_config = settings.bench_config
        self.version = stack_text(sim_stack("metaworld"))  # every record's sim_version
        self.cameras = list(self.params.cameras)
        self._env: Any = None  # the last task's env and renderer, kept for its next seeds
        self._env_task: str | None = None
        self._renderer: Any = None
        self._closes_at_exit = False

    def tasks(self) -> list[str]:
        return task_list(self.bench_config)

    def check(self, task: str, bench_config: str) -> None:
        check_task(bench_config, task)

    def step_limit_for(self, task: str, bench_config: str) -> int:
        return self.params.max_steps or HORIZON

    def make_episode(
        self, task: str, bench_config: str, seed: int, *, render: bool = True
    ) -> MetaWorldEpisode:
        check_task(bench_config, task)
        return MetaWorldEpisode(self, task, check_seed(int(seed)), render=render)

    def expert(self, task: str, bench_config: str, seed: int) -> ExpertResult:
        """MetaWorld's scripted policy for `task` on seed `seed`, in this process, without rendering."""
        check_task(bench_config, task)
        from metaworld.policies import ENV_POLICY_MAP

        env, policy = self.env_for(task), ENV_POLICY_MAP[task]()
        state = reset_env(env, check_seed(int(seed)))
        actions = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its gains warn that the env clips their output
            for _ in range(self.step_limit_for(task, bench_config)):
                actions.append(np.asarray(policy.get_action(state), np.float32))
                state, _, _, _, info = env.step(actions[-1])
                if info["success"]:
                    trace = np.stack(actions)
                    return ExpertResult(True, "ok", trace, len(actions))
        failed = np.zeros((0, ACTION_DIM), np.float32)
        return ExpertResult(False, "the scripted policy did not succeed", failed, len(actions))

    def env_for(self, task: str) -> Any:
        """The goal-observable env of `task`, built once and kept for its next seeds."""
        if self._env_task != task:
            self.close_env()
            self._env, self._env_task = build_env(task), task
        return self._env

    def render(self, camera: str) -> np.ndarray:
        """One frame of `camera` of the current env's state, upright (corner2 turned as LeRobot turns
        it). The renderer (a GL context) is made at the task's first frame: a run that renders
        nothing makes none."""
        if self._renderer is None:
            import mujoco

            size = self.params.image_size
            self._renderer = mujoco.Renderer(self._env.model, height=size, width=size)
            if not self._closes_at_exit:  # after MuJoCo's EGL exit hook (eglTerminate), so it runs first:
                atexit.register(self.close_env)  # a context left to __del__ prints EGLError tracebacks
                self._closes_at_exit = True
        self._renderer.update_scene(self._env.data, camera=camera)
        frame = self._renderer.render()
        return np.ascontiguousarray(frame[::-1, ::-1]) if camera == "corner2" else frame

    def close_env(self) -> None:
        env, renderer = self._env, self._renderer
        self._env = self._env_task = self._renderer = None
        for thing in (renderer, env):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.close()


def build_env(task: str) -> Any:
    """`task`'s env as MetaWorld's MT benchmarks build it (goal-observable, the task's own settings),
    its variation drawn from its own RNG at each reset: `reset_env` seeds it."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS, ML1_args_kwargs
    from metaworld.types import Task

    cls = ALL_V3_ENVIRONMENTS[task]
    env = cls()
    settings = {key: value for key, value in ML1_args_kwargs[task]["kwargs"].items() if key != "task_id"}
    settings.update(rand_vec=None, env_cls=cls, partially_observable=False)  # MetaWorld's MT override
    env.set_task(Task(env_name=task, data=pickle.dumps(settings)))
    env._freeze_rand_vec = False  # each reset draws a variation (as LeRobot's env unfreezes it) ...
    env.seeded_rand_vec = True  # ... from the env's RNG, which `reset_env` seeds, not numpy's global one
    camera = env.model.camera("corner2").id
    env.model.cam_pos[camera] = CORNER2_POS
    return env


def reset_env(env: Any, seed: int) -> np.ndarray:
    """Variation `seed` of the env's task: its RNG seeded, then reset (MetaWorld's reset ignores a
    `seed` argument). Returns the 39-number state observation."""
    env.seed(seed)
    state, _ = env.reset()
    return np.asarray(state, np.float64)


def check_seed(seed: int) -> int:
    if seed not in SEED_SPACE:
        raise ValueError(f"seed {seed}: MetaWorld seeds are 0..{SEED_SPACE.stop - 1} (numpy's seed range)")
    return seed


class MetaWorldEpisode:
    def __init__(self, bench: MetaWorldBenchmark, task: str, seed: int, *, render: bool = True) -> None:
        self._bench = bench
        self.task = task
        self.instruction = instruction_of(task)
        self.step_limit = bench.step_limit_for(task, bench.bench_config)
        self.action_dim = ACTION_DIM
        self._cameras = bench.cameras if render else []
        self._env = bench.env_for(task)
        self._state = reset_env(self._env, seed)
        self._success = False
        self._steps = 0
        self._frames: dict[str, np.ndarray] = {}  # this step's frames, rendered when first asked for
        size = bench.params.image_size
        self.spec = {
            "benchmark": "metaworld", "task": task, "task_list": bench.bench_config, "action_dim": ACTION_DIM,
            "cameras": list(self._cameras), "action": ACTION_CONVENTION, "image_size": [size, size],
            "privileged_state": bench.params.privileged_state,
        }  # fmt: skip

    def _frame(self, camera: str) -> np.ndarray:
        if camera not in self._frames:
            self._frames[camera] = self._bench.render(camera)
        return self._frames[camera]

    def observe(self) -> dict[str, Any]:
        obs: dict[str, Any] = {
            "images": {cam: self._frame(cam) for cam in self._cameras},
            "proprio": self._state[:4].astype(np.float32),
            "state": {},
        }
        if self._bench.params.privileged_state:
            obs["privileged_state"] = {"state": self._state.copy(), "task": self.task}
        return obs

    def apply(self, action: np.ndarray) -> None:
        action = np.asarray(action, dtype=np.float32)
        if action.shape != (ACTION_DIM,) or not np.all(np.isfinite(action)):
            raise ValueError(f"action must be {ACTION_DIM} finite numbers, got shape {action.shape}")
        state, _, _, _, info = self._env.step(action)
        self._state, self._frames = np.asarray(state, np.float64), {}
        self._steps += 1
        self._success = bool(info["success"])

    def success(self) -> bool:
        """MetaWorld's success check after the last action (`info["success"]`)."""
        return self._success

    def collided(self) -> bool:
        return False  # no collision signal on MetaWorld: HSR = SR there

    def video_frame(self) -> np.ndarray:
        """The first camera's frame (corner2 where the policy is sent none)."""
        return self._frame(self._cameras[0] if self._cameras else "corner2")

    def smoothed_dims(self, smooth_rot: bool) -> np.ndarray:
        return METAWORLD.smoothed_dims(1, smooth_rot)  # the position, never the gripper

    def close(self) -> None:
        """Ends this episode only: the env is kept for the task's next seed."""
