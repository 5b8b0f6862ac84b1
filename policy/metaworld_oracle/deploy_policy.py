"""metaworld_oracle: MetaWorld's scripted expert for each task, from privileged simulator state.

Not a fair policy: it reads `obs["privileged_state"]` (MetaWorld's 39-number state observation, goal
included, and the task's env name), which the MetaWorld benchmark sends only with BENCH_PARAMS
`privileged_state: true` (a contract knob, so such a run is marked in its run.yaml). The actions are
MetaWorld's own scripted policies' (`metaworld.policies.ENV_POLICY_MAP`, one class per task, written
by MetaWorld's authors, not here): it proves the path end to end (observation, wire, 4-D actions,
gripper sign, success check) and bounds what a fair policy can reach. The scripted policies keep no
state, so every session shares them.

The model env needs only those policies, plain numpy: `metaworld` is installed there without its
dependencies (scripts/setup.sh), and since its package `__init__` imports gymnasium and MuJoCo, which
the model env lacks, its `policies` subpackage is imported under a bare parent package
(`scripted_policies`). Where metaworld imports whole (the sim env), it is imported as usual.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import warnings
from typing import Any

import numpy as np

STATE_DIM = 39  # MetaWorld's state observation: hand, fingers, objects, the previous frame's, goal


def scripted_policies() -> dict[str, type]:
    """MetaWorld's {env name: scripted policy class}."""
    if "metaworld" not in sys.modules:
        spec = importlib.util.find_spec("metaworld")
        if spec is None or not spec.submodule_search_locations:
            why = "metaworld_oracle needs `metaworld` in the model env (scripts/setup.sh)"
            raise ModuleNotFoundError(why, name="metaworld")
        try:
            importlib.import_module("metaworld")
        except ImportError:  # its __init__'s imports (gymnasium, mujoco): a bare parent package instead
            for name in [n for n in sys.modules if n == "metaworld" or n.startswith("metaworld.")]:
                del sys.modules[name]
            parent = types.ModuleType("metaworld")
            parent.__path__ = list(spec.submodule_search_locations)
            sys.modules["metaworld"] = parent
    return dict(importlib.import_module("metaworld.policies").ENV_POLICY_MAP)


class Oracle:
    def __init__(self, action_dim: int, num_actions: int) -> None:
        if action_dim != 4:
            raise ValueError(f"metaworld_oracle: action_dim must be 4 (MetaWorld's action), got {action_dim}")
        self.num_actions = num_actions
        self.policies = {task: cls() for task, cls in scripted_policies().items()}

    def generate_actions(self, state: np.ndarray, task: str) -> np.ndarray:
        """[1, num_actions, 4]: the scripted policy's answer to this state (num_actions 1: every step)."""
        if task not in self.policies:
            raise ValueError(f"metaworld_oracle: MetaWorld has no scripted policy for task {task!r}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its gains warn that the env clips their output
            action = np.asarray(self.policies[task].get_action(state), np.float32)
        return action[None, None, :].repeat(self.num_actions, axis=1)


def get_model(usr_args: dict[str, Any]) -> Oracle:
    return Oracle(int(usr_args["action_dim"]), int(usr_args["num_actions"]))


def encode_obs(obs: dict[str, Any]) -> dict[str, Any]:
    privileged = obs.get("privileged_state")
    if not isinstance(privileged, dict) or "state" not in privileged:
        raise ValueError(
            "metaworld_oracle: the observation has no privileged_state; run MetaWorld with "
            "BENCH_PARAMS='{privileged_state: true}'"
        )
    # a copy: the wire's arrays are read-only, and some scripted policies (door-open-v3) write into
    # the views their `_parse_obs` takes of the state
    state = np.array(privileged["state"], np.float64)
    if state.shape != (STATE_DIM,):
        raise ValueError(
            f"metaworld_oracle: privileged_state.state must be {STATE_DIM} numbers, not {state.shape}"
        )
    return {"state": state, "task": str(privileged["task"])}


def reset_model(model: Oracle) -> None:
    """Nothing to reset: MetaWorld's scripted policies keep no state."""
