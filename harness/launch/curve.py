"""The learning curve of a watched series: SR and HSR with their intervals against the training step,
per task and in total, and each checkpoint's paired verdict against the best one before it.

Nothing is computed here that the results tools do not already compute: rates and intervals are the
run's `Summary` (Wilson, or anytime-valid in an adaptive run), and the verdict is `compare_runs`'
paired comparison on the shared (scene, task, seed) trials (Newcombe's paired 95% interval of ΔSR,
exact McNemar). "Best so far" is the earlier checkpoint with the highest pooled SR; a checkpoint
is `better` / `worse` when the paired interval of its ΔSR against it excludes 0, else `no clear
difference`. Each task gets compare_runs' per-task call too: its McNemar p-value Holm-adjusted over
the tasks (`harness.results.verdicts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.episode.records import record_key
from harness.launch.series import SeriesRun
from harness.results import ResultsError
from harness.results.adaptive import load_adaptive
from harness.results.aggregate import Summary, summarize
from harness.results.compare import compare
from harness.results.load import LoadedRun, load_run, split_by_contract
from harness.results.stats import Rate
from harness.results.verdicts import task_verdicts


@dataclass(frozen=True)
class TaskCall:
    """One task's paired ΔSR against the best earlier checkpoint; `word` after Holm over the tasks
    (`harness.results.verdicts`), so ten tasks do not make a false call likely."""

    diff: float | None
    lo: float | None
    hi: float | None
    p_value: float
    p_holm: float
    word: str


@dataclass(frozen=True)
class CheckpointVerdict:
    """A checkpoint's paired ΔSR against the best earlier one (B = this, A = the best)."""

    best_step: int
    pairs: int
    diff: float | None
    lo: float | None
    hi: float | None
    p_value: float
    a_over_b: int
    b_over_a: int
    tasks: dict[str, TaskCall]  # per (scene/task): the paired test, Holm-adjusted over the tasks

    @property
    def word(self) -> str:
        if self.lo is not None and self.lo > 0:
            return "better"
        if self.hi is not None and self.hi < 0:
            return "worse"
        return "no clear difference"

    def as_dict(self) -> dict[str, Any]:
        return {
            "against_step": self.best_step, "pairs": self.pairs, "diff_sr": self.diff, "diff_lo": self.lo,
            "diff_hi": self.hi, "diff_interval": "Newcombe paired 95%", "mcnemar_p": self.p_value,
            "a_over_b": self.a_over_b, "b_over_a": self.b_over_a, "verdict": self.word,
        }  # fmt: skip


@dataclass(frozen=True)
class Point:
    """One checkpoint of the curve."""

    step: int
    run: str
    checkpoint: str
    state: str  # done, todo (partial), dropped
    summary: Summary
    verdict: CheckpointVerdict | None  # None for the first checkpoint, or when nothing could be paired

    def rates(self) -> list[tuple[str, Rate, Rate]]:
        """(name, SR, HSR) per task, then ("TOTAL", pooled SR, pooled HSR)."""
        rows = [(f"{t.scene}/{t.task}", t.sr, t.hsr) for t in self.summary.total.tasks]
        return [*rows, ("TOTAL", self.summary.total.pooled_sr, self.summary.total.pooled_hsr)]


def _loaded(run: SeriesRun) -> tuple[LoadedRun, Summary] | None:
    try:
        loaded = load_run(run.run)
    except ResultsError:
        return None  # no record yet
    [(contract, records)] = split_by_contract(loaded.records, allow_split=False).items()
    adaptive = load_adaptive(run.run, {record_key(r): r for r in loaded.records})
    return loaded, summarize(records, contract, adaptive)


def _verdict(best: tuple[int, LoadedRun], this: LoadedRun) -> CheckpointVerdict | None:
    try:
        comp = compare(best[1], this)
    except ResultsError:
        return None
    cell = comp.total
    bounds = cell.diff_interval("success")
    test = cell.test("success")
    lo, hi = bounds if bounds else (None, None)
    tasks = {}
    for call, c in zip(
        task_verdicts([(c.name, c.test("success")) for c in comp.cells]), comp.cells, strict=True
    ):
        t_lo, t_hi = c.diff_interval("success") or (None, None)
        tasks[c.name] = TaskCall(c.diff("success"), t_lo, t_hi, call.test.p_value, call.p_holm, call.verdict)
    return CheckpointVerdict(
        best[0], len(cell.pairs), cell.diff("success"), lo, hi, test.p_value, test.b, test.c, tasks
    )


def curve(runs: list[SeriesRun]) -> list[Point]:
    """The points of the series, by step: every run that has records."""
    points: list[Point] = []
    best: tuple[int, LoadedRun, float] | None = None
    for run in sorted(runs, key=lambda r: r.step):
        got = _loaded(run)
        if got is None:
            continue
        loaded, summary = got
        verdict = _verdict((best[0], best[1]), loaded) if best is not None else None
        points.append(Point(run.step, run.run.name, run.checkpoint, run.state, summary, verdict))
        sr = summary.total.pooled_sr.value
        if sr is not None and run.state == "done" and (best is None or sr > best[2]):
            best = (run.step, loaded, sr)
    return points
