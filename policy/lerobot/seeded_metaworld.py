"""LeRobot's MetaWorld env, seeded as our MetaWorld benchmark seeds it: run in the LeRobot env.

Why: LeRobot's `MetaworldEnv.reset(seed=s)` does not reach MetaWorld's draw of the task variation.
MetaWorld's reset ignores its `seed` argument and, with the variation unfrozen as LeRobot leaves it,
draws the object and goal positions from numpy's global RNG, which `lerobot-eval` seeds once per
run: an episode's scene then depends on every episode before it in that process. Our benchmark
(harness/episode/bench/metaworld.py) makes episode `s` a function of (task, s) alone: the env's own
RNG seeded with `s`, the variation drawn from it (`seeded_rand_vec`). `honor_seeds()` makes LeRobot's
env do the same on a reset that is given a seed, and nothing else: its camera, frames, rollout loop
and success check stay LeRobot's. The expert demonstrations (training/) and the cross-check against
`lerobot-eval` (scripts/lerobot_crosscheck.py) both run LeRobot's env through it, so episode `s` there
is episode `s` in our pool.
"""

from __future__ import annotations

from typing import Any


def honor_seeds() -> None:
    """Patch `lerobot.envs.metaworld.MetaworldEnv.reset` (once) so that `reset(seed=s)` draws
    variation `s` from the env's own RNG; `reset()` without a seed is unchanged."""
    from lerobot.envs import metaworld as lerobot_metaworld

    env_class = lerobot_metaworld.MetaworldEnv
    if getattr(env_class.reset, "honors_seeds", False):
        return
    original = env_class.reset

    def reset(self: Any, seed: int | None = None, **kwargs: Any) -> Any:
        if seed is not None:
            self._env.seed(int(seed))
            self._env.seeded_rand_vec = True
        return original(self, seed=seed, **kwargs)

    reset.honors_seeds = True  # type: ignore[attr-defined]
    env_class.reset = reset
