"""Test double: keeps each session's last `frames` observations exactly as they came in (the arrays
themselves, no copy) and answers with the sum over everything it keeps, so a transport that lets an
observation change after it was handed over shows in the answers."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np


class FrameStack:
    def __init__(self, usr_args: dict[str, Any]) -> None:
        self.frames = int(usr_args["frames"])
        self.shape = (usr_args["num_actions"], usr_args["action_dim"])

    def generate_actions(self, total: np.ndarray) -> np.ndarray:
        return np.broadcast_to(total[:, :, None], (len(total), *self.shape)).astype(np.float32)


def get_model(usr_args: dict[str, Any]) -> FrameStack:
    return FrameStack(usr_args)


def init_state(model: FrameStack) -> deque[dict[str, np.ndarray]]:
    return deque(maxlen=model.frames)


def encode_obs(obs: dict[str, Any], state: deque[dict[str, np.ndarray]]) -> dict[str, Any]:
    state.append({"proprio": obs["proprio"], **obs["images"]})  # kept as they came, never copied
    total = sum(float(arr.sum(dtype=np.float64)) for kept in state for arr in kept.values())
    return {"total": np.array([[total]])}


def reset_model(model: FrameStack, state: deque[dict[str, np.ndarray]]) -> None:
    state.clear()
