"""One arm's action in a convention → the input ManiSkill's controller takes, and the arm's state as
proprio in the same convention (harness.episode.bench.conventions says what each means).

The controllers do the kinematics (IK for the pose conventions); this module only rescales: the
pose controllers take ManiSkill's euler layout, and `pd_ee_delta_pose` takes normalized [-1, 1]
inputs, so a metric delta is divided back by the controller's own limits, read from its config.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.episode.actions import ee6d_to_pose_euler, euler_xyz_from_matrix, pose_to_ee6d
from harness.episode.bench.conventions import Convention
from harness.episode.bench.maniskill_env import matrix_from_quat_wxyz

GRIPPER_LOW, GRIPPER_HIGH = -0.01, 0.04  # finger target range that the gripper controller maps [-1, 1] onto


def controller_input(convention: Convention, action: np.ndarray, agent: Any) -> np.ndarray:
    """One arm's `action` (convention.arm_dim numbers) as the float32 input of `agent`'s controller."""
    if convention.name == "ee6d":
        return ee6d_to_pose_euler(action)  # xyz, XYZ Euler, gripper
    if convention.name == "ee_delta":
        config = agent.controller.controllers["arm"].config
        low = np.broadcast_to(np.asarray(config.pos_lower, dtype=np.float64), 3)
        high = np.broadcast_to(np.asarray(config.pos_upper, dtype=np.float64), 3)
        position = (2.0 * action[0:3] - (high + low)) / (high - low)
        # the controller scales a rotation input by rot_lower (norm-clipped to 1 first): divide by it
        rotation = action[3:6] / float(config.rot_lower)
        return np.concatenate([position, rotation, action[6:7]]).astype(np.float32)
    return np.asarray(action, dtype=np.float32)  # joint_pos: the controller takes targets as they are


def arm_state(convention: Convention, agent: Any) -> np.ndarray:
    """One arm's proprio, laid out like an absolute action of `convention`."""
    qpos = _np(agent.robot.get_qpos()[0])
    finger = float(qpos[-2:].mean())
    grip = float(np.clip(2 * (finger - GRIPPER_LOW) / (GRIPPER_HIGH - GRIPPER_LOW) - 1, -1, 1))
    if convention.name == "joint_pos":
        return np.concatenate([qpos[: convention.arm_dim - 1], [grip]]).astype(np.float32)
    # TCP in the arm's root frame, in numpy on the raw poses: ManiSkill's torch `Pose` algebra costs
    # ~0.3 ms a step here (a percent of an episode) for two 4x4 products; numpy ~0.07 ms
    root, tcp = _np(agent.robot.pose.raw_pose[0]), _np(agent.tcp.pose.raw_pose[0])
    root_rot = matrix_from_quat_wxyz(root[3:7])
    xyz = root_rot.T @ (tcp[:3].astype(np.float64) - root[:3])
    rot = root_rot.T @ matrix_from_quat_wxyz(tcp[3:7])
    if convention.name == "ee_delta":
        return np.concatenate([xyz, euler_xyz_from_matrix(rot), [grip]]).astype(np.float32)
    return pose_to_ee6d(xyz, rot, grip)


def check_controller(convention: Convention, agent: Any) -> None:
    """Refuse a robot whose controller does not take this convention's per-arm layout."""
    taken = int(agent.controller.single_action_space.shape[0])
    expected = 7 if convention.name == "ee6d" else convention.arm_dim  # ee6d reaches pd_ee_pose as 7
    if taken != expected:
        raise ValueError(
            f"ACTION_CONVENTION={convention.name}: robot {agent.uid} takes {taken} numbers in "
            f"{convention.control_mode}, the convention gives {expected}"
        )


def _np(value: Any) -> np.ndarray:
    return value.cpu().numpy() if hasattr(value, "cpu") else np.asarray(value)
