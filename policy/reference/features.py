"""The observation features the reference policy sees, computed the same way at training and at eval.

The collector (sim env) and the wrapper (model env) both call these, so a training sample and a live
observation go through one code path: the primary camera image area-downsampled to IMAGE_RES, the
10-D ee6d proprio, and the task's goal position when ManiSkill's rgb observation carries one
(`goal_pos`, PickCube/PullCube; `bin_pos`, PlaceSphere; the PickCube goal is invisible to the cameras).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

IMAGE_RES = 96  # pixels per side fed to the image encoder
GOAL_KEYS = ("goal_pos", "bin_pos")  # the first present in obs["state"] is the goal feature
GOAL_DIM = 3


def downsample(image: np.ndarray, res: int = IMAGE_RES) -> np.ndarray:
    """[H, W, 3] uint8 → [res, res, 3] uint8 by area averaging (anti-aliased, deterministic)."""
    array = np.asarray(image)
    if array.ndim != 3 or array.shape[2] != 3:
        raise ValueError(f"expected an [H, W, 3] RGB image, got shape {array.shape}")
    if array.shape[:2] == (res, res):
        return array.astype(np.uint8)
    x = torch.from_numpy(np.ascontiguousarray(array)).permute(2, 0, 1)[None].float()
    y = torch.nn.functional.interpolate(x, size=(res, res), mode="area")
    return y[0].permute(1, 2, 0).round().clamp(0, 255).to(torch.uint8).numpy()


def goal_of(state: Mapping[str, Any] | None) -> np.ndarray:
    """The goal feature [3] from an observation's state extras; zeros for tasks without one."""
    for key in GOAL_KEYS:
        if state and key in state:
            goal = np.asarray(state[key], dtype=np.float32).reshape(-1)
            if goal.shape != (GOAL_DIM,):
                raise ValueError(f"state[{key!r}] has shape {goal.shape}, expected ({GOAL_DIM},)")
            return goal
    return np.zeros(GOAL_DIM, np.float32)


def chunk_at(trace: np.ndarray, step: int, length: int) -> np.ndarray:
    """trace[step : step + length], padded with the trace's last action (the replay policy's rule)."""
    chunk = trace[step : step + length]
    if len(chunk) < length:
        chunk = np.concatenate([chunk, np.repeat(trace[-1:], length - len(chunk), axis=0)])
    return chunk
