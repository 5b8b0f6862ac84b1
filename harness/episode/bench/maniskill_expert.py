"""ManiSkill's motion-planning experts, recorded and converted to ee6d traces for seed banks.

The experts (mani_skill.examples.motionplanning, mplib 0.1.1 — needs numpy<2) command absolute joint
targets in `pd_joint_pos`. The trace a `replay` policy sends must be in the eval's action space, so each
joint target is mapped by forward kinematics (pinocchio, robot-root frame, the frame pd_ee_pose uses)
to its TCP pose and written as ee6d. The episode runs without rendering (~3 ms/step).
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np

from harness.episode.actions import pose_to_ee6d
from harness.episode.bench import ExpertResult
from harness.episode.bench.maniskill_config import BenchTable, LevelSpec, TaskSpec
from harness.episode.bench.maniskill_env import make_env, matrix_from_quat_wxyz

TCP_LINK = "panda_hand_tcp"


class _StepLimit(Exception):
    """The expert ran past the task's step limit: it does not solve the seed within the eval."""


class _Recorder:
    """Wraps the env the solver drives: records actions and any-step success, enforces the limit."""

    def __init__(self, env: Any, limit: int):
        self.env, self.limit = env, limit
        self.unwrapped = env
        self.actions: list[np.ndarray] = []
        self.first_success: int | None = None
        self.initial_success = False

    def reset(self, **kwargs: Any) -> Any:
        result = self.env.reset(**kwargs)
        self.initial_success = bool(self.env.evaluate()["success"].reshape(-1)[0])
        return result

    def step(self, action: np.ndarray) -> Any:
        if len(self.actions) >= self.limit:
            raise _StepLimit
        self.actions.append(np.asarray(action, dtype=np.float64).copy())
        result = self.env.step(action)
        if self.first_success is None and bool(result[4]["success"].reshape(-1)[0]):
            self.first_success = len(self.actions)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def run_expert(table: BenchTable, task: TaskSpec, level: LevelSpec, seed: int) -> ExpertResult:
    from mani_skill.examples.motionplanning.panda.run import MP_SOLUTIONS

    solve = MP_SOLUTIONS.get(task.env_id)
    if solve is None:
        return ExpertResult(False, f"no expert for {task.env_id}", np.zeros((0, 10), np.float32), 0)
    env = make_env(
        task, level, seed, threshold=table.collision_impulse,
        obs_mode="none", control_mode="pd_joint_pos", render=False,
    )  # fmt: skip
    recorder = _Recorder(env, task.step_limit)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the planner prints on every failure
            outcome = solve(recorder, seed=seed, debug=False, vis=False)
        reason = _verdict(recorder, outcome)
        actions = joint_targets_to_ee6d(env, np.array(recorder.actions)) if reason == "ok" else None
    except _StepLimit:
        reason, actions = f"expert exceeds step limit {task.step_limit}", None
    finally:
        env.close()
    if actions is None:
        return ExpertResult(False, reason, np.zeros((0, 10), np.float32), len(recorder.actions))
    joint_targets = np.array(recorder.actions, dtype=np.float32)
    return ExpertResult(True, "ok", actions, len(recorder.actions), joint_targets)


def _verdict(recorder: _Recorder, outcome: Any) -> str:
    if recorder.initial_success:
        return "succeeds with no action"
    if isinstance(outcome, int) and outcome == -1 and recorder.first_success is None:
        return "planner failed"
    if recorder.first_success is None:
        return "expert did not succeed"
    return "ok"


def joint_targets_to_ee6d(env: Any, actions: np.ndarray) -> np.ndarray:
    """[T, 8] pd_joint_pos actions (7 joint targets + gripper) → [T, 10] ee6d in the robot-root frame."""
    articulation = env.agent.robot._objs[0]
    model = articulation.create_pinocchio_model()
    tcp = [link.name for link in env.agent.robot.get_links()].index(TCP_LINK)
    fingers = np.zeros(articulation.dof - 7)
    out = np.empty((len(actions), 10), dtype=np.float32)
    for t, action in enumerate(actions):
        model.compute_forward_kinematics(np.concatenate([action[:7], fingers]))
        pose = model.get_link_pose(tcp)
        out[t] = pose_to_ee6d(np.asarray(pose.p), matrix_from_quat_wxyz(pose.q), action[7])
    return out
