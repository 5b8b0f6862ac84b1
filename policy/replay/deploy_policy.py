"""replay: plays back recorded action traces keyed by (task, task_config, seed).

The chunk for an infer at env step s is trace[s : s + num_actions], padded with the trace's last
action, so the harness's chunking/smoothing see exactly what a real policy would hand them.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import knobs


class ReplayModel:
    def __init__(self, root: Path, action_dim: int, num_actions: int) -> None:
        self.root = root
        self.action_dim = action_dim
        self.num_actions = num_actions
        self._traces: dict[tuple[str, str], dict[str, np.ndarray]] = {}
        self._lock = threading.Lock()

    def _bank(self, task: str, task_config: str) -> dict[str, np.ndarray]:
        with self._lock:
            if (task, task_config) not in self._traces:
                path = self.root / task / f"{task_config}.traces.npz"
                if not path.is_file():
                    raise KeyError(
                        f"replay: no traces for task {task!r}, task_config {task_config!r}: {path}"
                    )
                with np.load(path, allow_pickle=False) as npz:
                    self._traces[task, task_config] = {k: npz[k] for k in npz.files}
            return self._traces[task, task_config]

    def generate_actions(self, episode: list[dict[str, Any]]) -> np.ndarray:
        """[B, num_actions, action_dim]: each request's slice of its trace."""
        return np.stack([self._chunk(item) for item in episode])

    def _chunk(self, episode: dict[str, Any]) -> np.ndarray:
        task, task_config, seed, step = (episode[k] for k in ("task", "task_config", "seed", "step"))
        bank = self._bank(task, task_config)
        trace = bank.get(f"seed{seed}")
        if trace is None:
            raise KeyError(f"replay: no trace for (task={task!r}, task_config={task_config!r}, seed={seed})")
        if trace.ndim != 2 or trace.shape[1] != self.action_dim or len(trace) == 0:
            raise ValueError(
                f"replay: trace seed{seed} has shape {trace.shape}, expected [T>0, {self.action_dim}]"
            )
        chunk = trace[step : step + self.num_actions]
        if len(chunk) < self.num_actions:
            pad = np.repeat(trace[-1:], self.num_actions - len(chunk), axis=0)
            chunk = np.concatenate([chunk, pad])
        return chunk.astype(np.float32)


def _root(setting: str | None) -> Path:
    root = Path(setting or knobs.get("SEEDS_ROOT"))
    return root if root.is_absolute() else Path(os.environ.get("BUNDLE", ".")) / root


def get_model(usr_args: dict[str, Any]) -> ReplayModel:
    return ReplayModel(
        _root(usr_args.get("seeds_root")), int(usr_args["action_dim"]), int(usr_args["num_actions"])
    )


def encode_obs(obs: dict[str, Any]) -> dict[str, Any]:
    """Only the episode key and step matter: the server adds them as obs['episode']."""
    return {"episode": obs["episode"]}


def reset_model(model: ReplayModel) -> None:
    """Stateless per episode: the trace is chosen by the key each call carries."""
