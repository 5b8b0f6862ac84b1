"""Test double: a policy that loads a checkpoint dir (its config.json, read at load: a checkpoint
that is not JSON, or lacks `"kind": "sleep"`, stops the model server before it listens) and then only
sleeps infer_ms per batch and returns zeros. For the checkpoint watcher's tests, where every
checkpoint is a run and what is evaluated must be a real directory the policy reads."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np


class CkptSleeper:
    def __init__(self, usr_args: dict[str, Any], config: dict[str, Any]) -> None:
        self.shape = (usr_args["num_actions"], usr_args["action_dim"])
        self.delay = float(config.get("infer_ms", usr_args.get("infer_ms", 2))) / 1000

    def generate_actions(self, proprio: np.ndarray) -> np.ndarray:
        time.sleep(self.delay)
        return np.zeros((len(proprio), *self.shape), np.float32)


def get_model(usr_args: dict[str, Any]) -> CkptSleeper:
    path = Path(usr_args["ckpt_path"]) / "config.json"
    config = json.loads(path.read_text())
    if config.get("kind") != "sleep":
        raise ValueError(f"{path}: not a ckpt_sleep checkpoint (kind {config.get('kind')!r})")
    return CkptSleeper(usr_args, config)


def encode_obs(obs: dict[str, Any]) -> dict[str, Any]:
    return {"proprio": np.asarray(obs["proprio"]).reshape(1, -1)}


def reset_model(model: CkptSleeper) -> None:
    """Stateless."""
