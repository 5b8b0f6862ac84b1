"""Per-task, per-scene and total success rates of one contract's records.

Totals are given two ways and always labelled: the mean over tasks (each task weighted equally, as the
reference reports it, with its stratified score interval) and the rate pooled over episodes (each
episode weighted equally, the one a Wilson interval applies to). Errored episodes are counted apart and
never enter a rate. In an adaptive run (EVAL_STOP, `harness.results.adaptive`) each cell counts its
decided prefix only, and every rate carries the anytime-valid interval.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.episode.records import is_trial
from harness.results import ResultsError
from harness.results.adaptive import Adaptive
from harness.results.cell_decision import CellVerdict
from harness.results.load import episode_key, scene_of
from harness.results.stats import Rate, mean_interval, mean_rate


@dataclass
class TaskResult:
    """One (scene, task) cell: its episodes, rates and how many errored."""

    scene: str
    task: str
    task_config: str
    episodes: list[dict[str, Any]] = field(default_factory=list)
    verdict: CellVerdict | None = None  # its state under the run's stopping rule (adaptive runs)

    @property
    def trials(self) -> list[dict[str, Any]]:
        return [r for r in self.episodes if is_trial(r)]

    @property
    def errored(self) -> int:
        return len(self.episodes) - len(self.trials)

    @property
    def sr(self) -> Rate:
        return Rate(
            sum(bool(r.get("success")) for r in self.trials), len(self.trials), self.verdict is not None
        )

    @property
    def hsr(self) -> Rate:
        k = sum(bool(r.get("hard_success")) for r in self.trials)
        return Rate(k, len(self.trials), self.verdict is not None)


@dataclass
class Group:
    """Several tasks summarised together (a scene, or the whole run)."""

    name: str
    tasks: list[TaskResult]

    @property
    def errored(self) -> int:
        return sum(t.errored for t in self.tasks)

    @property
    def pooled_sr(self) -> Rate:
        return _pool(t.sr for t in self.tasks)

    @property
    def pooled_hsr(self) -> Rate:
        return _pool(t.hsr for t in self.tasks)

    @property
    def mean_sr(self) -> float | None:
        return mean_rate([t.sr for t in self.tasks])

    @property
    def mean_hsr(self) -> float | None:
        return mean_rate([t.hsr for t in self.tasks])

    @property
    def mean_sr_interval(self) -> tuple[float, float] | None:
        """The stratified score 95% interval of `mean_sr` (`harness.results.stats.mean_interval`); None in
        an adaptive run."""
        return mean_interval([t.sr for t in self.tasks])

    @property
    def mean_hsr_interval(self) -> tuple[float, float] | None:
        return mean_interval([t.hsr for t in self.tasks])

    @property
    def tasks_with_trials(self) -> int:
        return sum(1 for t in self.tasks if t.sr.n)


@dataclass
class Summary:
    """The results of one contract: tasks by scene, and the total."""

    contract: str
    scenes: list[Group]
    total: Group
    adaptive: Adaptive | None = None

    @property
    def interval(self) -> str:
        """The interval every rate of this summary carries."""
        return "anytime-valid 95%" if self.adaptive else "Wilson 95%"


def summarize(records: list[dict[str, Any]], contract: str, adaptive: Adaptive | None = None) -> Summary:
    """Group records into (scene, task) cells; one cell may not mix task_configs (that is two configs).
    With `adaptive`, a decided cell keeps only the episodes of its decided prefix."""
    cells: dict[tuple[str, str], TaskResult] = {}
    counted = [r for r in records if adaptive is None or adaptive.counted(r)]
    for record in sorted(counted, key=episode_key):
        scene = scene_of(record)
        cell = cells.setdefault(
            (scene, record["task"]), TaskResult(scene, record["task"], record["task_config"])
        )
        if record["task_config"] != cell.task_config:
            raise ResultsError(
                f"scene {scene!r} task {record['task']!r} has records of task_configs "
                f"{cell.task_config!r} and {record['task_config']!r}; organize each config separately"
            )
        cell.episodes.append(record)
    by_scene: dict[str, list[TaskResult]] = {}
    for (scene, task), cell in sorted(cells.items()):
        if adaptive is not None:
            cell.verdict = adaptive.verdicts.get((scene, task))
        by_scene.setdefault(scene, []).append(cell)
    scenes = [Group(scene, tasks) for scene, tasks in by_scene.items()]
    return Summary(contract, scenes, Group("TOTAL", [t for g in scenes for t in g.tasks]), adaptive)


def _pool(rates: Iterable[Rate]) -> Rate:
    rates = list(rates)
    return Rate(sum(r.k for r in rates), sum(r.n for r in rates), any(r.anytime for r in rates))
