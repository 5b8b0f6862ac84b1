"""libero_oracle: a scripted expert for LIBERO's pick-and-place goals, from privileged simulator state.

Not a fair policy: it reads `obs["privileged_state"]`, which the LIBERO benchmark sends only with
BENCH_PARAMS `privileged_state: true` (a contract knob, so such a run is marked in its run.yaml).
It proves the path end to end (observation, wire, 7-D delta actions, gripper sign, success check)
and gives the ceiling a fair policy is measured against. The motion is `pickplace.next_action`;
each session keeps its own episode plan (per-session state), so concurrent episodes never mix.

`noise_std` (a policy arg, default 0: the plain oracle) adds Gaussian noise of that standard
deviation (in action units) to the six motion dims of every action: a weaker policy that still
draws the same numbers wherever the episode runs. Its generator is seeded from the episode's task,
seed (LIBERO's init-state index) and step only, never from the runner's config naming or the
order of requests, so vla-eval's runner and our pool give an episode the same noise (the
per-episode cross-check, tests/episode/test_libero_crosscheck.py).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from policy.libero_oracle.pickplace import Plan, next_action


class Oracle:
    def __init__(self, action_dim: int, num_actions: int, noise_std: float = 0.0) -> None:
        if action_dim != 7:
            raise ValueError(f"libero_oracle: action_dim must be 7 (LIBERO's delta action), got {action_dim}")
        if not noise_std >= 0:
            raise ValueError(f"libero_oracle: noise_std must be a number >= 0, got {noise_std!r}")
        self.num_actions = num_actions
        self.noise_std = noise_std

    def generate_actions(self, privileged_state: dict[str, Any], plan: Plan, noise_seed: int) -> np.ndarray:
        """[1, num_actions, 7]: the next steps of the plan (num_actions 1: re-planned every step),
        with noise_std's noise on the motion dims."""
        action = next_action(privileged_state, plan)
        if self.noise_std > 0:
            noise = np.random.default_rng(noise_seed).normal(0.0, self.noise_std, 6)
            action[:6] = action[:6] + noise.astype(np.float32)
        return action[None, None, :].repeat(self.num_actions, axis=1)


def get_model(usr_args: dict[str, Any]) -> Oracle:
    noise_std = usr_args.get("noise_std", 0.0)
    if isinstance(noise_std, bool) or not isinstance(noise_std, int | float):
        raise ValueError(f"libero_oracle: noise_std must be a number >= 0, got {noise_std!r}")
    return Oracle(int(usr_args["action_dim"]), int(usr_args["num_actions"]), float(noise_std))


def noise_seed(episode: dict[str, Any]) -> int:
    """A 32-bit seed from the episode's task, seed and step (what the server puts in obs["episode"])."""
    key = f"{episode.get('task', '')}\0{episode.get('seed', 0)}\0{episode.get('step', 0)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "big")


def init_state(model: Oracle) -> Plan:
    return Plan()


def encode_obs(obs: dict[str, Any], plan: Plan) -> dict[str, Any]:
    state = obs.get("privileged_state")
    if not isinstance(state, dict):
        raise ValueError(
            "libero_oracle: the observation has no privileged_state; run LIBERO with "
            "BENCH_PARAMS='{privileged_state: true}'"
        )
    return {"privileged_state": state, "plan": plan, "noise_seed": noise_seed(obs.get("episode") or {})}


def reset_model(model: Oracle, plan: Plan) -> None:
    plan.restart()
