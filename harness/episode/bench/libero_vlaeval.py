"""vla-eval's own `LIBEROBenchmark`, plus our privileged-state field: for `vla-eval run` to drive the
oracle (policy/libero_oracle), as the per-episode cross-check against vla-eval's runner does.

Why a subclass of theirs and not our adapter: the cross-check's point is that vla-eval's runner
builds, settles, steps and judges the episode with its own code; this class only adds, with
`send_privileged_state: true` (off by default: ground truth no fair policy may read), the same
`privileged_state` observation field our adapter sends (`harness.episode.bench.libero`), so the same
oracle can run on both sides. Named in a vla-eval config as
`benchmark: harness.episode.bench.libero_vlaeval:PrivilegedLIBEROBenchmark` (with our repo on
PYTHONPATH); every other parameter is `LIBEROBenchmark`'s.
"""

from __future__ import annotations

from typing import Any

from vla_eval.benchmarks.libero.benchmark import LIBEROBenchmark
from vla_eval.types import Observation, Task

from harness.episode.bench.libero import privileged_state


class PrivilegedLIBEROBenchmark(LIBEROBenchmark):
    """`LIBEROBenchmark` whose observations also carry `privileged_state` when asked to."""

    def __init__(self, *args: Any, send_privileged_state: bool = False, **kwargs: Any) -> None:
        if not isinstance(send_privileged_state, bool):
            raise ValueError(f"send_privileged_state must be true or false, got {send_privileged_state!r}")
        super().__init__(*args, **kwargs)
        self.send_privileged_state = send_privileged_state

    def make_obs(self, raw_obs: Any, task: Task) -> Observation:
        obs = super().make_obs(raw_obs, task)
        if self.send_privileged_state:
            obs["privileged_state"] = privileged_state(self._env.env, raw_obs)
        return obs
