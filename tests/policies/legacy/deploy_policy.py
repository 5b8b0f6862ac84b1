"""Test double: a wrapper written before batching (no max_batch, no state): random chunks from the
global RNG (so determinism depends on the server seeding it per request), with a small sleep to make
concurrent requests interleave. It must keep working unchanged."""

from __future__ import annotations

import time
from typing import Any

import numpy as np


class Noisy:
    def __init__(self, usr_args: dict[str, Any]) -> None:
        self.shape = (1, usr_args["num_actions"], usr_args["action_dim"])

    def generate_actions(self, proprio: np.ndarray) -> np.ndarray:
        time.sleep(0.002)
        return np.random.standard_normal(self.shape) + proprio.reshape(-1)[0]


def get_model(usr_args: dict[str, Any]) -> Noisy:
    return Noisy(usr_args)


def encode_obs(obs: dict[str, Any]) -> dict[str, Any]:
    if obs.get("explode"):
        raise RuntimeError("boom requested by the test")
    return {"proprio": np.asarray(obs["proprio"])}


def reset_model(model: Noisy) -> None:
    """Stateless."""
