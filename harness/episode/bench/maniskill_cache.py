"""Built ManiSkill envs kept across episodes of one sim process (SIM_ENV_CACHE).

A cached env's next episode resets with `reconfigure=True`: ManiSkill rebuilds the PhysX scene, the
robot, the lights and the cameras inside the same env object (and its seed-dependent parts from the
new seed), so the episode is the same bit for bit as in a freshly made env. A plain reset of a used
env is not: PhysX keeps sleep bookkeeping and contact-pair order across it, and replayed actions
diverged in 3 of 4 PickCube seeds and 2 of 3 StackCube seeds. What the cache saves is the env
object's own construction (spaces, a discarded first reset and its render).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class EnvCache:
    """Up to `capacity` idle built envs by key, least recently used evicted (and closed) first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._idle: OrderedDict[Hashable, Any] = OrderedDict()
        self.reused = 0  # envs handed out again (for tests and benchmarks)

    def take(self, key: Hashable) -> Any | None:
        """The idle env built for `key`, now the caller's; None when there is none."""
        env = self._idle.pop(key, None)
        if env is not None:
            self.reused += 1
        return env

    def give(self, key: Hashable, env: Any) -> None:
        """Keep `env` for the next episode of `key`; closes it instead when the cache is off."""
        if self.capacity == 0:
            env.close()
            return
        old = self._idle.pop(key, None)
        if old is not None:
            old.close()
        self._idle[key] = env
        while len(self._idle) > self.capacity:
            self._idle.popitem(last=False)[1].close()

    def __len__(self) -> int:
        return len(self._idle)

    def close(self) -> None:
        while self._idle:
            self._idle.popitem(last=False)[1].close()
