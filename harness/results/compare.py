"""Paired comparison of two runs on the episodes both have as trials.

Pairing by (scene, task, seed) removes seed-to-seed difficulty from the difference, so a small change
can be told from noise; the exact McNemar test uses only the episodes that flipped, and Newcombe's paired
interval says how large the difference may be. Per task, the same test Holm-adjusted over the tasks
gives a verdict (`harness.results.verdicts`): which tasks got better or worse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.episode.records import is_trial
from harness.results import ResultsError
from harness.results.load import EpisodeKey, LoadedRun, episode_key, split_by_contract
from harness.results.stats import PairedTest, Rate, mean_rate, paired_diff_interval
from harness.results.verdicts import ALPHA, TaskVerdict, task_verdicts
from harness.results.videos import source_video


@dataclass(frozen=True)
class Flip:
    """One seed whose outcome differs between the runs, with both videos (None where missing)."""

    key: EpisodeKey
    a: dict[str, Any]
    b: dict[str, Any]
    video_a: Path | None
    video_b: Path | None


@dataclass
class PairedCell:
    """The paired outcomes of one (scene, task), or of all tasks pooled."""

    name: str
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    only_a: int = 0
    only_b: int = 0
    errored: int = 0  # seeds present in both but errored in at least one: not paired trials

    def rate(self, side: int, metric: str) -> Rate:
        return Rate(sum(bool(p[side].get(metric)) for p in self.pairs), len(self.pairs))

    def test(self, metric: str) -> PairedTest:
        b = sum(bool(a.get(metric)) and not bool(bb.get(metric)) for a, bb in self.pairs)
        c = sum(not bool(a.get(metric)) and bool(bb.get(metric)) for a, bb in self.pairs)
        return PairedTest(b, c)

    def diff(self, metric: str) -> float | None:
        a, b = self.rate(0, metric), self.rate(1, metric)
        return None if not a.n else b.value - a.value  # type: ignore[operator]

    def diff_interval(self, metric: str) -> tuple[float, float] | None:
        """Newcombe's paired 95% interval of the difference B − A (for runs of a fixed size)."""
        outcomes = [(bool(a.get(metric)), bool(b.get(metric))) for a, b in self.pairs]
        return paired_diff_interval(
            both=outcomes.count((True, True)),
            b_only=outcomes.count((False, True)),
            a_only=outcomes.count((True, False)),
            neither=outcomes.count((False, False)),
        )


@dataclass
class Comparison:
    a_name: str
    b_name: str
    cells: list[PairedCell]
    total: PairedCell
    flips: list[Flip]
    alpha: float = ALPHA  # the level of the per-task verdicts

    def verdicts(self, metric: str) -> list[TaskVerdict]:
        """Per task (in `cells` order): exact McNemar, Holm-adjusted over the tasks, and the verdict."""
        return task_verdicts([(c.name, c.test(metric)) for c in self.cells], self.alpha)

    def mean_diff(self, metric: str) -> float | None:
        """Mean over tasks of the per-task difference (each task weighted equally)."""
        a = mean_rate([c.rate(0, metric) for c in self.cells])
        b = mean_rate([c.rate(1, metric) for c in self.cells])
        return None if a is None or b is None else b - a


def _by_key(loaded: LoadedRun) -> dict[EpisodeKey, dict[str, Any]]:
    split_by_contract(loaded.records, allow_split=False)
    return {episode_key(r): r for r in loaded.records}


def compare(a: LoadedRun, b: LoadedRun, alpha: float = ALPHA) -> Comparison:
    """Pair two runs; an error when they share no (scene, task, seed) trial. `alpha`: the level of the
    per-task verdicts."""
    recs_a, recs_b = _by_key(a), _by_key(b)
    cells: dict[tuple[str, str], PairedCell] = {}
    total = PairedCell("TOTAL")
    flips = []
    for key in sorted(recs_a.keys() | recs_b.keys()):
        cell = cells.setdefault(key[:2], PairedCell(f"{key[0]}/{key[1]}"))
        ra, rb = recs_a.get(key), recs_b.get(key)
        for target in (cell, total):
            if rb is None:
                target.only_a += 1
            elif ra is None:
                target.only_b += 1
            elif not (is_trial(ra) and is_trial(rb)):
                target.errored += 1
            else:
                target.pairs.append((ra, rb))
        if ra and rb and is_trial(ra) and is_trial(rb) and _outcome(ra) != _outcome(rb):
            flips.append(Flip(key, ra, rb, source_video(a.run, ra), source_video(b.run, rb)))
    if not total.pairs:
        raise ResultsError(
            f"runs {a.run.root} and {b.run.root} share no (scene, task, seed) that is a trial in both "
            f"({total.only_a} only in A, {total.only_b} only in B, {total.errored} errored in one)"
        )
    return Comparison(a.run.name, b.run.name, [c for c in cells.values() if c.pairs], total, flips, alpha)


def _outcome(record: dict[str, Any]) -> tuple[bool, bool]:
    return bool(record.get("success")), bool(record.get("hard_success"))
