"""Generic action handling around any policy: chunk execution, cross-chunk smoothing, fake proprio,
and the ee6d ⇄ rotation helpers the benchmark adapters need.

Action layout (`ee6d`, docs/contracts.md): per arm 10 numbers = xyz, rot6d (the first two columns of the
rotation matrix, column after column), gripper. One arm: 10-D, gripper at 9. Two arms: 20-D,
continuous dims [0:9]+[10:19], grippers at 9 and 19.

Smoothing (reference §6d): the first action of each new chunk becomes
`α·(last executed action) + (1-α)·(raw first action)` on the continuous dims (xyz + rot6d with
SMOOTH_ROT=1, xyz only with SMOOTH_ROT=0); the gripper is never smoothed and the rest of the chunk
is left as the policy produced it. It lives here, not in wrappers, so every policy gets it alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.config.settings import Settings

ARM_DIM = 10
GRIPPER = 9


def _arms(action_dim: int) -> int:
    if action_dim not in (ARM_DIM, 2 * ARM_DIM):
        raise ValueError(f"action_dim {action_dim}: expected 10 (one arm) or 20 (two arms) ee6d numbers")
    return action_dim // ARM_DIM


def smoothed_dims(action_dim: int, smooth_rot: bool) -> np.ndarray:
    """Indices the EMA touches: xyz (+ rot6d when smooth_rot) of each arm, never a gripper."""
    per_arm = range(GRIPPER) if smooth_rot else range(3)
    return np.array([arm * ARM_DIM + i for arm in range(_arms(action_dim)) for i in per_arm])


@dataclass
class ChunkRunner:
    """Turns each action chunk from the policy into the actions to execute, one episode at a time.

    Per episode: `reset()`, then per query `plan(chunk)` → the actions to apply in order. `plan`
    remembers the last action it hands out as the last executed one (an episode that stops mid-plan
    ends there, so nothing is carried wrongly). `proprio(real)` is what to send the policy.
    """

    action_dim: int
    exec_actions: int = 0
    alpha: float = 0.0
    smooth_rot: bool = True
    fake_proprio: bool = False
    # the dims the EMA touches, given SMOOTH_ROT (an episode's `smoothed_dims`); None: ee6d's
    smoothed: Callable[[bool], np.ndarray] | None = None
    _last: np.ndarray | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.exec_actions < 0:
            raise ValueError(
                f"EXEC_ACTIONS={self.exec_actions}: expected 0 (whole chunk) or a positive count"
            )
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"ACTION_SMOOTH={self.alpha}: expected 0 <= alpha <= 1")
        if self.smoothed is None:
            self._dims = smoothed_dims(self.action_dim, self.smooth_rot)
        else:
            self._dims = self.smoothed(self.smooth_rot)

    @classmethod
    def from_settings(
        cls, settings: Settings, action_dim: int, smoothed: Callable[[bool], np.ndarray] | None = None
    ) -> ChunkRunner:
        """A runner configured from EXEC_ACTIONS, ACTION_SMOOTH, SMOOTH_ROT and FAKE_PROPRIO."""
        return cls(
            action_dim=action_dim,
            smoothed=smoothed,
            exec_actions=settings.exec_actions,
            alpha=settings.action_smooth,
            smooth_rot=settings.smooth_rot,
            fake_proprio=settings.fake_proprio,
        )

    def reset(self) -> None:
        """Forget the previous episode: its last action must not smooth this one's first chunk."""
        self._last = None

    def plan(self, chunk: np.ndarray) -> np.ndarray:
        """The actions to execute from `chunk` [chunk_len, action_dim]: smoothed, then truncated."""
        chunk = np.array(chunk, dtype=np.float32)
        if chunk.ndim != 2 or chunk.shape[1] != self.action_dim or len(chunk) == 0:
            raise ValueError(f"action chunk shape {chunk.shape}: expected [chunk_len>0, {self.action_dim}]")
        if self.alpha > 0.0 and self._last is not None:
            first = chunk[0]
            first[self._dims] = self.alpha * self._last[self._dims] + (1.0 - self.alpha) * first[self._dims]
        planned = chunk[: self.exec_actions] if self.exec_actions else chunk
        self._last = planned[-1].copy()
        return planned

    def proprio(self, real: np.ndarray) -> np.ndarray:
        """FAKE_PROPRIO=1: the last commanded action (the real proprio before the first command)."""
        if self.fake_proprio and self._last is not None:
            return self._last.copy()
        return np.asarray(real, dtype=np.float32)


# --- ee6d helpers -------------------------------------------------------------------------------


def rot6d_from_matrix(rot: np.ndarray) -> np.ndarray:
    """[..., 3, 3] → [..., 6]: first column, then second column."""
    rot = np.asarray(rot, dtype=np.float64)
    return np.concatenate([rot[..., :, 0], rot[..., :, 1]], axis=-1)


def matrix_from_rot6d(r6: np.ndarray) -> np.ndarray:
    """[..., 6] → [..., 3, 3] by Gram-Schmidt, so a policy's slightly off 6-D output is still a rotation."""
    r6 = np.asarray(r6, dtype=np.float64)
    a1, a2 = r6[..., 0:3], r6[..., 3:6]
    n1 = np.linalg.norm(a1, axis=-1, keepdims=True)
    if np.any(n1 < 1e-9):
        raise ValueError("rot6d: first column is zero, not a rotation")
    b1 = a1 / n1
    b2 = a2 - np.sum(b1 * a2, axis=-1, keepdims=True) * b1
    n2 = np.linalg.norm(b2, axis=-1, keepdims=True)
    if np.any(n2 < 1e-9):
        raise ValueError("rot6d: the two columns are parallel, not a rotation")
    b2 = b2 / n2
    return np.stack([b1, b2, np.cross(b1, b2)], axis=-1)


def matrix_from_euler_xyz(euler: np.ndarray) -> np.ndarray:
    """ManiSkill's "XYZ" Euler convention (pd_ee_pose targets): R = Rx(a) @ Ry(b) @ Rz(c).

    Intrinsic X then Y then Z (transforms3d `rxyz`), not static `sxyz`.
    """
    a, b, c = np.moveaxis(np.asarray(euler, dtype=np.float64), -1, 0)
    ca, sa, cb, sb, cc, sc = np.cos(a), np.sin(a), np.cos(b), np.sin(b), np.cos(c), np.sin(c)
    rows = [
        [cb * cc, -cb * sc, sb],
        [ca * sc + sa * sb * cc, ca * cc - sa * sb * sc, -sa * cb],
        [sa * sc - ca * sb * cc, sa * cc + ca * sb * sc, ca * cb],
    ]
    return np.stack([np.stack(row, axis=-1) for row in rows], axis=-2)


def euler_xyz_from_matrix(rot: np.ndarray) -> np.ndarray:
    """Inverse of `matrix_from_euler_xyz` (middle angle in [-π/2, π/2])."""
    rot = np.asarray(rot, dtype=np.float64)
    b = np.arcsin(np.clip(rot[..., 0, 2], -1.0, 1.0))
    a = np.arctan2(-rot[..., 1, 2], rot[..., 2, 2])
    c = np.arctan2(-rot[..., 0, 1], rot[..., 0, 0])
    return np.stack([a, b, c], axis=-1)


def ee6d_to_pose_euler(action: np.ndarray) -> np.ndarray:
    """ee6d [..., 10k] → ManiSkill pd_ee_pose layout [..., 7k]: xyz, XYZ-euler, gripper per arm."""
    action = np.asarray(action, dtype=np.float64)
    arms = []
    for arm in range(_arms(action.shape[-1])):
        a = action[..., arm * ARM_DIM : (arm + 1) * ARM_DIM]
        euler = euler_xyz_from_matrix(matrix_from_rot6d(a[..., 3:9]))
        arms.append(np.concatenate([a[..., 0:3], euler, a[..., 9:10]], axis=-1))
    return np.concatenate(arms, axis=-1).astype(np.float32)


def pose_to_ee6d(xyz: np.ndarray, rot: np.ndarray, gripper: float | np.ndarray) -> np.ndarray:
    """One arm's ee6d [..., 10] from a position, a rotation matrix [..., 3, 3] and a gripper value."""
    xyz = np.asarray(xyz, dtype=np.float64)
    grip = np.broadcast_to(np.asarray(gripper, dtype=np.float64), (*xyz.shape[:-1], 1))
    return np.concatenate([xyz, rot6d_from_matrix(rot), grip], axis=-1).astype(np.float32)
