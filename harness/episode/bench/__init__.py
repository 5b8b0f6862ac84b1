"""The benchmark interface (sim side) and `load_benchmark`.

A benchmark adapter turns `(task, bench_config, seed)` into an `Episode` the sim client drives one
action at a time, in the convention its spec's `action` names (an episode may offer
`smoothed_dims(smooth_rot)`, the indices ACTION_SMOOTH touches; else ee6d's are used); `expert` solves
an episode so seed banks can be pre-validated. The embedded default is ManiSkill3
(`harness.episode.bench.maniskill`); LIBERO is `libero` (`harness.episode.bench.libero`); a vla-eval
`StepBenchmark` runs through `harness.episode.bench.vlaeval` (`vla-eval:module.path:ClassName`); any
class with this shape plugs in by `module.path:ClassName` (BENCHMARK knob), which is how tests swap in
fast doubles.
Contract: docs/contracts.md.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from harness.config.settings import Settings


class Episode(Protocol):
    instruction: str
    step_limit: int
    action_dim: int
    spec: dict[str, Any]  # client spec sent in the wire hello

    def observe(self) -> dict[str, Any]: ...
    def apply(self, action: np.ndarray) -> None: ...  # one action of `action_dim` in the spec's `action`
    def success(self) -> bool: ...
    def collided(self) -> bool: ...
    def video_frame(self) -> np.ndarray: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class ExpertResult:
    """An expert attempt: `actions` is its ee6d trace [T, action_dim] (float32), empty when it failed;
    `joint_targets` is the same trace as the expert commanded it (pd_joint_pos), when it has one."""

    solved: bool
    reason: str  # "ok", or why the seed is rejected
    actions: np.ndarray
    steps: int
    joint_targets: np.ndarray | None = None


class Benchmark(Protocol):
    version: str  # simulator version recorded in every record
    # optional: action_convention, the convention its episodes apply (checked against the policy's
    # stated one when a run is created, and again in every hello); seed_space, a range holding every
    # episode seed it accepts (checked against the seed bank when a run is created); warm_up(), a
    # one-time start-up (a renderer's) a persistent sim process runs before its first unit;
    # step_limit_for(task, bench_config), an episode's step limit, read when a run is created (the
    # expected cost of a unit nobody has run yet, so its claims can be ordered)

    def tasks(self) -> list[str]: ...
    def check(self, task: str, bench_config: str) -> None:
        """Raise ValueError naming `task` or `bench_config` if this benchmark cannot build them."""

    def make_episode(self, task: str, bench_config: str, seed: int, *, render: bool = True) -> Episode: ...
    def expert(self, task: str, bench_config: str, seed: int) -> ExpertResult: ...


NAMED = {  # embedded, loaded by name
    "libero": "harness.episode.bench.libero:LiberoBenchmark",
    "metaworld": "harness.episode.bench.metaworld:MetaWorldBenchmark",
}


def load_benchmark(spec: str, settings: Settings) -> Benchmark:
    """`maniskill` (the embedded default), `libero`, `vla-eval:module.path:ClassName` (a vla-eval
    StepBenchmark, constructed with BENCH_PARAMS) or `module.path:ClassName`; a bad spec is a clear error.
    The embedded adapters take the process's `settings`; a plug-in class is constructed bare."""
    if spec == "maniskill":
        from harness.episode.bench.maniskill import ManiSkillBenchmark

        return ManiSkillBenchmark(settings)
    if spec in NAMED:  # imported when named: only a sim env with LIBERO installed can load it
        module_name, _, class_name = NAMED[spec].partition(":")
        return getattr(importlib.import_module(module_name), class_name)(settings)
    if spec.startswith("vla-eval:"):
        from harness.episode.bench.vlaeval import PREFIX, VlaEvalBenchmark

        return VlaEvalBenchmark(spec[len(PREFIX) :], settings)
    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise ValueError(
            f"BENCHMARK={spec!r}: expected 'maniskill', 'libero', 'vla-eval:module.path:ClassName' "
            "or 'module.path:ClassName'"
        )
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"BENCHMARK={spec!r}: cannot load it: {exc}") from None
    return cls()
