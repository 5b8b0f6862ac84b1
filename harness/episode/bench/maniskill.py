"""The embedded benchmark: ManiSkill3 tabletop tasks on the CPU (physx_cpu, lavapipe rendering).

Actions arrive as ee6d per arm and drive the `pd_ee_pose` controller (absolute TCP pose in the robot's
root frame); proprio is the current TCP pose in the same frame as ee6d, so `hold` (proprio echoed as
the action) keeps the robot still. Render settings come from the knobs (IMAGE_SIZE, RENDER_SHADER,
RT_SPP, DENOISER) and are part of the run's contract.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.config import knobs
from harness.episode.actions import ARM_DIM, ee6d_to_pose_euler, pose_to_ee6d
from harness.episode.bench import ExpertResult
from harness.episode.bench.maniskill_config import LevelSpec, TaskSpec, load_table
from harness.episode.bench.maniskill_env import configure_ray_tracing, make_env, matrix_from_quat_wxyz

GRIPPER_LOW, GRIPPER_HIGH = -0.01, 0.04  # finger target range that pd_ee_pose maps [-1, 1] onto


class ManiSkillBenchmark:
    def __init__(self) -> None:
        import mani_skill
        import sapien

        self.table = load_table()
        self.version = f"mani-skill=={mani_skill.__version__} sapien=={sapien.__version__}"
        self.image_size = knobs.get_int("IMAGE_SIZE")
        self.shader = knobs.get("RENDER_SHADER")
        self.primary_cam = knobs.get("PRIMARY_CAM")
        self.video_cam = knobs.get("VIDEO_CAM")
        configure_ray_tracing(self.shader, knobs.get_int("RT_SPP"), knobs.get("DENOISER"))

    def tasks(self) -> list[str]:
        return list(self.table.tasks)

    def check(self, task: str, bench_config: str) -> None:
        try:
            self.table.task(task), self.table.level(bench_config)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None

    def make_episode(
        self, task: str, bench_config: str, seed: int, *, render: bool = True
    ) -> ManiSkillEpisode:
        """A fresh env reset to `seed`. render=False (no cameras) is for expert validation only."""
        spec, level = self.table.task(task), self.table.level(bench_config)
        return ManiSkillEpisode(self, spec, level, int(seed), render)

    def expert(self, task: str, bench_config: str, seed: int) -> ExpertResult:
        from harness.episode.bench.maniskill_expert import run_expert

        return run_expert(self.table, self.table.task(task), self.table.level(bench_config), int(seed))


class ManiSkillEpisode:
    def __init__(self, bench: ManiSkillBenchmark, task: TaskSpec, level: LevelSpec, seed: int, render: bool):
        self.instruction = task.instruction
        self.step_limit = task.step_limit
        self._render = render
        self._video_cam = bench.video_cam
        self.env = make_env(
            task, level, seed, threshold=bench.table.collision_impulse,
            obs_mode="rgb" if render else "state_dict", control_mode="pd_ee_pose", render=render,
            image_size=bench.image_size, shader=bench.shader,
        )  # fmt: skip
        try:
            self._obs, self._info = self.env.reset(seed=seed)
            self.cameras = self._camera_order(bench.primary_cam) if render else []
        except BaseException:
            self.env.close()
            raise
        self.agents = _arm_agents(self.env)
        self.action_dim = ARM_DIM * len(self.agents)
        self.initial_success = self.success()
        self.spec = {
            "benchmark": "maniskill", "task": task.name, "env_id": task.env_id, "bench_config": level.name,
            "action_dim": self.action_dim, "arms": len(self.agents), "cameras": self.cameras,
            "image_size": bench.image_size, "action": "ee6d", "control_mode": "pd_ee_pose",
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
        """Current ee6d per arm: TCP pose in the arm's root frame + normalized finger opening.

        The frame change is done in numpy on the raw poses: ManiSkill's torch `Pose` algebra costs
        ~0.3 ms a step here, a percent of an episode, for two 4x4 products."""
        parts = []
        for agent in self.agents:
            root, tcp = _np(agent.robot.pose.raw_pose[0]), _np(agent.tcp.pose.raw_pose[0])
            root_rot = matrix_from_quat_wxyz(root[3:7])
            xyz = root_rot.T @ (tcp[:3].astype(np.float64) - root[:3])
            rot = root_rot.T @ matrix_from_quat_wxyz(tcp[3:7])
            finger = float(_np(agent.robot.get_qpos()[0, -2:]).mean())
            grip = np.clip(2 * (finger - GRIPPER_LOW) / (GRIPPER_HIGH - GRIPPER_LOW) - 1, -1, 1)
            parts.append(pose_to_ee6d(xyz, rot, grip))
        return np.concatenate(parts)

    def apply(self, action: np.ndarray) -> None:
        action = np.asarray(action)
        if action.shape != (self.action_dim,) or not np.all(np.isfinite(action)):
            raise ValueError(f"action must be {self.action_dim} finite numbers, got shape {action.shape}")
        pose = ee6d_to_pose_euler(action)  # [7 per arm]: xyz, XYZ Euler, gripper
        if len(self.agents) == 1:
            command: Any = pose
        else:
            uids = list(self.env.agent.agents_dict)
            command = {uid: pose[i * 7 : (i + 1) * 7] for i, uid in enumerate(uids)}
        self._obs, _, _, _, self._info = self.env.step(command)

    def success(self) -> bool:
        return bool(_np(self._info["success"]).reshape(-1)[0])

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
        self.env.close()


def _arm_agents(env: Any) -> list[Any]:
    agent = env.agent
    return list(agent.agents) if hasattr(agent, "agents") else [agent]


def _np(value: Any) -> np.ndarray:
    return value.cpu().numpy() if hasattr(value, "cpu") else np.asarray(value)
