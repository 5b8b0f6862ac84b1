"""The embedded benchmark's task table and config levels, read from `maniskill_tasks.yaml`.

Step limits, instructions and clutter levels are data, not code, so they can be reviewed and changed
in one file (the reference kept them in `_eval_step_limit.yml`); a bad name is a clear error that lists
the valid ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

CONFIG_FILE = Path(__file__).with_name("maniskill_tasks.yaml")


@dataclass(frozen=True)
class TaskSpec:
    name: str
    env_id: str
    robot: str | tuple[str, ...]  # a tuple for a multi-arm task
    step_limit: int
    instruction: str


@dataclass(frozen=True)
class LevelSpec:
    name: str
    distractors: int = 0
    camera_jitter_m: float = 0.0
    camera_jitter_deg: float = 0.0
    light_scale: tuple[float, float] = (1.0, 1.0)


@dataclass(frozen=True)
class BenchTable:
    scene: str
    collision_impulse: float
    tasks: dict[str, TaskSpec]
    levels: dict[str, LevelSpec]

    def task(self, name: str) -> TaskSpec:
        if name not in self.tasks:
            raise KeyError(f"unknown ManiSkill task {name!r}; known: {', '.join(sorted(self.tasks))}")
        return self.tasks[name]

    def level(self, name: str) -> LevelSpec:
        if name not in self.levels:
            raise KeyError(f"unknown BENCH_CONFIG {name!r}; known: {', '.join(sorted(self.levels))}")
        return self.levels[name]


@cache
def load_table(path: Path = CONFIG_FILE) -> BenchTable:
    raw = yaml.safe_load(Path(path).read_text())
    try:
        tasks = {}
        for name, fields in raw["tasks"].items():
            if isinstance(fields.get("robot"), list):
                fields = {**fields, "robot": tuple(fields["robot"])}
            tasks[name] = TaskSpec(name=name, **fields)
        levels = {}
        for name, fields in raw["configs"].items():
            fields = dict(fields or {})
            if "light_scale" in fields:
                fields["light_scale"] = tuple(float(v) for v in fields["light_scale"])
            levels[name] = LevelSpec(name=name, **fields)
        return BenchTable(str(raw["scene"]), float(raw["collision_impulse"]), tasks, levels)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: malformed benchmark table: {exc}") from None
