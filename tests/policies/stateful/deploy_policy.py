"""Test double: a wrapper with per-session history, so a leak between sessions shows in the answers.

Each session's state keeps the proprio values it has seen this episode (a frame stack filled by
encode_obs) and counts the calls that served it (generate_actions, through `states`). The chunk is
filled with history sum + 1000 · calls: it depends on everything that session did since its reset,
and on nothing another session did. obs["explode_in_call"] makes generate_actions raise for the
whole batch after it has counted the call in every state (the server then puts the states back and
runs the batch's requests one at a time)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class History:
    seen: list[float] = field(default_factory=list)
    calls: int = 0
    resets: int = 0


class Stateful:
    def __init__(self, usr_args: dict[str, Any]) -> None:
        self.shape = (usr_args["num_actions"], usr_args["action_dim"])
        self.sleep_s = float(usr_args.get("sleep_ms", 2)) / 1000
        self.batch_sizes: list[int] = []

    def generate_actions(
        self, history_sum: np.ndarray, explode: np.ndarray, states: list[History]
    ) -> np.ndarray:
        time.sleep(self.sleep_s)
        self.batch_sizes.append(len(states))
        for state in states:
            state.calls += 1
        if explode.any():
            raise RuntimeError("boom in the call, requested by the test")
        calls = np.array([state.calls for state in states], np.float64)
        return np.broadcast_to((history_sum[:, 0] + 1000 * calls)[:, None, None], (len(states), *self.shape))


def get_model(usr_args: dict[str, Any]) -> Stateful:
    return Stateful(usr_args)


def init_state(model: Stateful) -> History:
    return History()


def encode_obs(obs: dict[str, Any], state: History) -> dict[str, Any]:
    state.seen.append(float(np.asarray(obs["proprio"]).reshape(-1)[0]))
    explode = bool(obs.get("explode_in_call"))
    return {"history_sum": np.array([[sum(state.seen)]]), "explode": np.array([explode])}


def reset_model(model: Stateful, state: History) -> None:
    state.seen.clear()
    state.calls = 0
    state.resets += 1
