"""hold: stays put, in whichever action convention the sim applies: the lower bound of any policy.

The sim's convention and action size come with each observation (`episode`: `action`,
`action_dim`). An absolute convention (`ee6d`, `joint_pos`: proprio is laid out like their action)
is held by repeating proprio; a delta one by zero motion, the gripper as it is (`ee_delta`, whose
proprio ends each arm with the gripper) or open (`metaworld`, -1; a vla-eval convention, whose
gripper is binary: `binary_close_positive` opens at -1, `binary_close_negative` at +1). Anything
else is refused naming the convention.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ABSOLUTE = ("ee6d", "joint_pos")
OPEN = {"binary_close_positive": -1.0, "binary_close_negative": 1.0}


class HoldModel:
    def __init__(self, num_actions: int) -> None:
        self.num_actions = num_actions

    def generate_actions(self, held: np.ndarray) -> np.ndarray:
        """[B, num_actions, action_dim]: each request's held action, repeated."""
        return np.repeat(held[:, None, :], self.num_actions, axis=1)


def get_model(usr_args: dict[str, Any]) -> HoldModel:
    return HoldModel(int(usr_args["num_actions"]))


def held_action(convention: str, action_dim: int, proprio: np.ndarray) -> np.ndarray:
    """The action that keeps the robot where `proprio` says it is, in `convention`."""
    if convention in ABSOLUTE:
        if proprio.size < action_dim:
            raise ValueError(f"hold: proprio has {proprio.size} numbers, a {convention} action {action_dim}")
        return proprio[:action_dim].copy()
    if convention == "metaworld":  # xyz change, then the gripper: +1 closes, -1 opens
        return np.array([0.0, 0.0, 0.0, -1.0], np.float32)
    if convention == "ee_delta":  # per arm: 6 zeros, then the gripper proprio ends the arm with
        arms = action_dim // 7
        held = np.zeros((arms, 7), np.float32)
        held[:, 6] = proprio.reshape(arms, -1)[:, -1]
        return held.reshape(-1)
    fields = dict(
        part.split("=", 1) for part in convention.removeprefix("vla-eval:").split(",") if "=" in part
    )
    kinds = {name: value.split("/")[0] for name, value in fields.items()}
    if not convention.startswith("vla-eval:") or any(
        name != "gripper" and not kind.startswith("delta") and kind != "axis_angle"
        for name, kind in kinds.items()
    ):
        raise ValueError(f"hold: cannot hold still in action convention {convention!r}")
    held = np.zeros(action_dim, np.float32)
    if "gripper" in kinds:
        held[-1] = OPEN.get(kinds["gripper"], 0.0)
    return held


def encode_obs(obs: dict[str, Any]) -> dict[str, Any]:
    if "proprio" not in obs:
        raise ValueError("hold: the observation has no 'proprio'")
    episode = obs.get("episode") or {}
    convention, action_dim = episode.get("action") or "ee6d", episode.get("action_dim")
    proprio = np.asarray(obs["proprio"], dtype=np.float32).reshape(-1)
    dim = int(action_dim) if action_dim is not None else proprio.size
    return {"held": held_action(convention, dim, proprio).reshape(1, -1)}


def reset_model(model: HoldModel) -> None:
    """Stateless: nothing to reset."""
