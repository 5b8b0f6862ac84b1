"""hold: answers every observation with the current pose, gripper unchanged: the lower bound.

proprio is the current ee6d pose per arm ([xyz, rot6d, gripper], 10 or 20 numbers), so repeating
it is exactly "stay put".
"""

from __future__ import annotations

from typing import Any

import numpy as np


class HoldModel:
    def __init__(self, action_dim: int, num_actions: int) -> None:
        self.action_dim = action_dim
        self.num_actions = num_actions

    def generate_actions(self, proprio: np.ndarray) -> np.ndarray:
        """[B, num_actions, action_dim]: each request's current pose, repeated."""
        if proprio.shape[-1] < self.action_dim:
            raise ValueError(
                f"hold: proprio has {proprio.shape[-1]} numbers, needs the {self.action_dim}-D ee6d pose"
            )
        pose = proprio[:, : self.action_dim]
        return np.repeat(pose[:, None, :], self.num_actions, axis=1)


def get_model(usr_args: dict[str, Any]) -> HoldModel:
    return HoldModel(int(usr_args["action_dim"]), int(usr_args["num_actions"]))


def encode_obs(obs: dict[str, Any]) -> dict[str, Any]:
    if "proprio" not in obs:
        raise ValueError("hold: the observation has no 'proprio'")
    return {"proprio": np.asarray(obs["proprio"], dtype=np.float32).reshape(1, -1)}


def reset_model(model: HoldModel) -> None:
    """Stateless: nothing to reset."""
