"""Test double: a batching wrapper drawing random chunks from a generator per request (seeded by the
server), with a small sleep per call so concurrent requests interleave and batch.

Hooks for the tests: obs["explode"] raises in encode_obs (that session's thread); obs["explode_in_call"]
makes generate_actions raise for the whole batch (the server then runs its requests one at a time);
the `extra_rows` setting returns that many rows too many (a wrapper breaking the batch contract)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np


class Noisy:
    def __init__(self, usr_args: dict[str, Any]) -> None:
        self.shape = (usr_args["num_actions"], usr_args["action_dim"])
        self.extra_rows = int(usr_args.get("extra_rows", 0))
        self.sleep_s = float(usr_args.get("sleep_ms", 2)) / 1000
        self.batch_sizes: list[int] = []  # what each call received, for the tests to look at

    def generate_actions(self, proprio: np.ndarray, explode: np.ndarray, rng_seeds: list[int]) -> np.ndarray:
        time.sleep(self.sleep_s)
        self.batch_sizes.append(len(rng_seeds))
        if explode.any():
            raise RuntimeError("boom in the call, requested by the test")
        noise = np.stack([np.random.default_rng(seed).standard_normal(self.shape) for seed in rng_seeds])
        out = noise + proprio[:, :1, None]
        return np.concatenate([out, out[: self.extra_rows]]) if self.extra_rows else out


def get_model(usr_args: dict[str, Any]) -> Noisy:
    return Noisy(usr_args)


def encode_obs(obs: dict[str, Any]) -> dict[str, Any]:
    if obs.get("explode"):
        raise RuntimeError("boom requested by the test")
    return {
        "proprio": np.asarray(obs["proprio"]).reshape(1, -1),
        "explode": np.array([bool(obs.get("explode_in_call"))]),
    }


def reset_model(model: Noisy) -> None:
    """Stateless."""
