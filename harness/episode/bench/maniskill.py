"""The embedded benchmark: ManiSkill3 tabletop tasks on the CPU (physx_cpu, lavapipe rendering).

Actions arrive in the ACTION_CONVENTION (harness.episode.bench.conventions: absolute `ee6d` by default,
`ee_delta`, `joint_pos`) and drive the ManiSkill controller that convention names (`pd_ee_pose`,
`pd_ee_delta_pose`, `pd_joint_pos`); proprio is the arm's state laid out like an absolute action of the
convention, so `hold` (proprio echoed as the action) keeps the robot still in ee6d and joint_pos.
Render settings come from the knobs (IMAGE_SIZE, RENDER_SHADER, RT_SPP, DENOISER) and are part of
the run's contract. Built envs are kept for the process's next episodes of the same (task,
task_config) and rebuilt per seed (SIM_ENV_CACHE, `maniskill_cache`).
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np

from harness.config.settings import Settings
from harness.config.simstack import sim_stack, stack_text
from harness.episode.bench import ExpertResult
from harness.episode.bench.conventions import get_convention
from harness.episode.bench.maniskill_actions import arm_state, check_controller, controller_input
from harness.episode.bench.maniskill_cache import EnvCache
from harness.episode.bench.maniskill_config import LevelSpec, TaskSpec, load_table
from harness.episode.bench.maniskill_env import configure_ray_tracing, make_env


class ManiSkillBenchmark:
    # the episode seeds ManiSkill accepts: env.reset(seed) seeds numpy's RandomState, which takes
    # 0..2**32-1 (a larger seed errors every episode); checked against the seed bank at run creation
    seed_space = range(2**32)

    def __init__(self, settings: Settings) -> None:
        # ManiSkill runs a full gc.collect() whenever an env's scene is cleared (for GPU memory): in
        # a process holding torch and SAPIEN that is ~90 ms, twice an episode. Freezing the heap
        # imported so far leaves those collections only the objects made since (the envs): 0.1 ms.
        gc.freeze()

        self.table = load_table()
        self.version = stack_text(sim_stack("maniskill"))
        self.image_size = settings.image_size
        self.shader = settings.render_shader
        self.primary_cam = settings.primary_cam
        self.video_cam = settings.video_cam
        self.bench_config = settings.bench_config
        self.convention = get_convention(settings.action_convention)
        self.action_convention = self.convention.name
        configure_ray_tracing(self.shader, settings.rt_spp, settings.denoiser)
        self.envs = EnvCache(settings.sim_env_cache)

    def tasks(self) -> list[str]:
        return list(self.table.tasks)

    def check(self, task: str, bench_config: str) -> None:
        try:
            self.table.task(task), self.table.level(bench_config)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None

    def step_limit_for(self, task: str, bench_config: str) -> int:
        return self.table.task(task).step_limit

    def make_episode(
        self, task: str, bench_config: str, seed: int, *, render: bool = True
    ) -> ManiSkillEpisode:
        """An env (new, or kept and rebuilt) reset to `seed`. render=False (no cameras) is for expert
        validation only."""
        spec, level = self.table.task(task), self.table.level(bench_config)
        return ManiSkillEpisode(self, spec, level, int(seed), render)

    def warm_up(self) -> None:
        """Build and render the first task at BENCH_CONFIG once: the renderer's start-up (~1 s, now
        that it is given its BRDF table: `brdf_lut`) is paid here, before any unit (the env is kept
        for that task's first episode)."""
        self.make_episode(self.tasks()[0], self.bench_config, 0).close()

    def expert(self, task: str, bench_config: str, seed: int) -> ExpertResult:
        from harness.episode.bench.maniskill_expert import run_expert

        return run_expert(self.table, self.table.task(task), self.table.level(bench_config), int(seed))


class ManiSkillEpisode:
    def __init__(self, bench: ManiSkillBenchmark, task: TaskSpec, level: LevelSpec, seed: int, render: bool):
        self.instruction = task.instruction
        self.step_limit = task.step_limit
        self._render = render
        self._video_cam = bench.video_cam
        self.convention = bench.convention
        control_mode = self.convention.control_mode
        self._envs, self._key = bench.envs, (task.name, level.name, render)
        self.env = bench.envs.take(self._key)
        # Every episode's scene is built under its own seed, fresh env or kept: a fresh env's
        # construction reconfigured under ManiSkill's fixed seed (2022), so without this a task that
        # randomises at build would depend on which units its process ran before.
        rebuild = {"reconfigure": True}
        if self.env is None:
            self.env = make_env(
                task, level, seed, threshold=bench.table.collision_impulse,
                obs_mode="rgb" if render else "state_dict", control_mode=control_mode, render=render,
                image_size=bench.image_size, shader=bench.shader,
            )  # fmt: skip
        else:  # the cached env rebuilds its scene for this seed: a fresh PhysX scene, same env object
            self.env.bench_seed = seed
        self._intact = False  # the env may go back to the cache only after a reset and steps that all ended
        try:
            self._obs, self._info = self.env.reset(seed=seed, options=rebuild)
            self.cameras = self._camera_order(bench.primary_cam) if render else []
            self.agents = _arm_agents(self.env)
            for agent in self.agents:
                check_controller(self.convention, agent)
        except BaseException:
            self.env.close()
            raise
        self._intact = True
        self.action_dim = self.convention.arm_dim * len(self.agents)
        self.initial_success = self.success()
        self.spec = {
            "benchmark": "maniskill", "task": task.name, "env_id": task.env_id, "bench_config": level.name,
            "action_dim": self.action_dim, "arms": len(self.agents), "cameras": self.cameras,
            "image_size": bench.image_size, "action": self.convention.name, "control_mode": control_mode,
        }  # fmt: skip

    def _camera_order(self, primary: str) -> list[str]:
        cameras = list(self._obs["sensor_data"])
        for name in (primary, self._video_cam):
            if name not in cameras:
                raise KeyError(f"camera {name!r} (PRIMARY_CAM/VIDEO_CAM) not in this task's {cameras}")
        return [primary] + [c for c in cameras if c != primary]

    def observe(self) -> dict[str, Any]:
        obs: dict[str, Any] = {"images": {}, "camera_params": {}, "proprio": self.proprio(), "state": {}}
        for cam in self.cameras:
            obs["images"][cam] = _np(self._obs["sensor_data"][cam]["rgb"][0]).astype(np.uint8)
            params = self._obs["sensor_param"][cam]
            obs["camera_params"][cam] = {k: _np(v[0]).astype(np.float32) for k, v in params.items()}
        for key, value in self._obs.get("extra", {}).items():
            obs["state"][key] = _np(value[0]).astype(np.float32)
        return obs

    def proprio(self) -> np.ndarray:
        """Each arm's state in the convention's absolute layout (ee6d: TCP pose in the root frame + grip)."""
        return np.concatenate([arm_state(self.convention, agent) for agent in self.agents])

    def smoothed_dims(self, smooth_rot: bool) -> np.ndarray:
        """The action indices ACTION_SMOOTH touches in this convention (never a gripper)."""
        return self.convention.smoothed_dims(len(self.agents), smooth_rot)

    def apply(self, action: np.ndarray) -> None:
        action = np.asarray(action)
        if action.shape != (self.action_dim,) or not np.all(np.isfinite(action)):
            raise ValueError(f"action must be {self.action_dim} finite numbers, got shape {action.shape}")
        dim = self.convention.arm_dim
        arms = [controller_input(self.convention, action[i * dim : (i + 1) * dim], agent)
                for i, agent in enumerate(self.agents)]  # fmt: skip
        if len(self.agents) == 1:
            command: Any = arms[0]
        else:
            command = dict(zip(self.env.agent.agents_dict, arms, strict=True))
        self._intact = False
        self._obs, _, _, _, self._info = self.env.step(command)
        self._intact = True

    def success(self) -> bool:
        return bool(_np(self._info["success"]).reshape(-1)[0])

    def physics_state(self) -> np.ndarray:
        """The whole scene's physics state (every actor's pose and velocities, every articulation's
        joints): what a canary hashes (harness.episode.canary)."""
        return _np(self.env.unwrapped.get_state()).astype(np.float64).reshape(-1)

    def collided(self) -> bool:
        return self.env.contact_monitor.collided

    def collision_detail(self) -> str | None:
        """The first collision ("<link> ~ <object> impulse=<x>"), for logs and tests."""
        return self.env.contact_monitor.first

    def state(self) -> np.ndarray:
        """The full simulator state vector (for determinism checks)."""
        return _np(self.env.get_state()[0]).astype(np.float64)

    def video_frame(self) -> np.ndarray:
        return _np(self._obs["sensor_data"][self._video_cam]["rgb"][0]).astype(np.uint8)

    def close(self) -> None:
        if self._intact:
            self._envs.give(self._key, self.env)
        else:
            self.env.close()


def _arm_agents(env: Any) -> list[Any]:
    agent = env.agent
    return list(agent.agents) if hasattr(agent, "agents") else [agent]


def _np(value: Any) -> np.ndarray:
    return value.cpu().numpy() if hasattr(value, "cpu") else np.asarray(value)
