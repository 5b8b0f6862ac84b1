"""libero_oracle: a scripted expert for LIBERO's pick-and-place goals, from privileged simulator state.

Not a fair policy: it reads `obs["privileged_state"]`, which the LIBERO benchmark sends only with
BENCH_PARAMS `privileged_state: true` (a contract knob, so such a run is marked in its run.yaml).
It proves the path end to end (observation, wire, 7-D delta actions, gripper sign, success check)
and gives the ceiling a fair policy is measured against. The motion is `pickplace.next_action`;
each session keeps its own episode plan (per-session state), so concurrent episodes never mix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from policy.libero_oracle.pickplace import Plan, next_action


class Oracle:
    def __init__(self, action_dim: int, num_actions: int) -> None:
        if action_dim != 7:
            raise ValueError(f"libero_oracle: action_dim must be 7 (LIBERO's delta action), got {action_dim}")
        self.num_actions = num_actions

    def generate_actions(self, privileged_state: dict[str, Any], plan: Plan) -> np.ndarray:
        """[1, num_actions, 7]: the next steps of the plan (num_actions 1: re-planned every step)."""
        return next_action(privileged_state, plan)[None, None, :].repeat(self.num_actions, axis=1)


def get_model(usr_args: dict[str, Any]) -> Oracle:
    return Oracle(int(usr_args["action_dim"]), int(usr_args["num_actions"]))


def init_state(model: Oracle) -> Plan:
    return Plan()


def encode_obs(obs: dict[str, Any], plan: Plan) -> dict[str, Any]:
    state = obs.get("privileged_state")
    if not isinstance(state, dict):
        raise ValueError(
            "libero_oracle: the observation has no privileged_state; run LIBERO with "
            "BENCH_PARAMS='{privileged_state: true}'"
        )
    return {"privileged_state": state, "plan": plan}


def reset_model(model: Oracle, plan: Plan) -> None:
    plan.restart()
