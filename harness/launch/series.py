"""A watched series: one run per checkpoint, named from its training step, and its state read from
the run dirs alone.

Why no state file of the watcher's own: a run dir already says everything (run.yaml names the
checkpoint, the records say which episodes are done), and a second file could disagree with it after
a crash. A run is `done` when every planned episode has a trial record, `dropped` when its
checkpoint was deleted while it ran (`DROPPED` in the run dir says when, and how far it had come;
its records stay), otherwise `todo`. Creating a run that exists with the same settings is a no-op,
so a restarted watcher simply creates again and resumes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from harness.config.manifest import Manifest, load_manifest
from harness.config.paths import run_dir
from harness.config.rundir import RunDir
from harness.launch.ckptscan import Checkpoint, run_name
from harness.launch.newrun import new_run
from harness.launch.progress import Progress, progress

DROPPED = "watch_dropped.json"
NAME = re.compile(r"^(?P<prefix>.+)_step(?P<step>[0-9]+)$")


@dataclass(frozen=True)
class SeriesRun:
    step: int
    run: RunDir
    manifest: Manifest
    progress: Progress
    dropped: dict | None

    @property
    def checkpoint(self) -> str:
        return self.manifest.knobs["CKPT_NAME"]

    @property
    def state(self) -> str:
        if self.progress.complete:
            return "done"
        return "dropped" if self.dropped is not None else "todo"


def series(prefix: str, env: Mapping[str, str] = os.environ) -> list[SeriesRun]:
    """Every run of the series under $RUNS_ROOT, by step; a dir without a readable run.yaml is skipped."""
    root = run_dir(run_name(prefix, 0), env).parent
    found = []
    for path in sorted(root.glob(f"{prefix}_step*")) if root.is_dir() else []:
        match = NAME.match(path.name)
        if not match or match["prefix"] != prefix or not (path / "run.yaml").is_file():
            continue
        run = RunDir(path.resolve())
        try:
            manifest = load_manifest(run.root)
        except ValueError:
            continue
        dropped = json.loads((path / DROPPED).read_text()) if (path / DROPPED).is_file() else None
        found.append(SeriesRun(int(match["step"]), run, manifest, progress(run, manifest, env), dropped))
    return sorted(found, key=lambda r: r.step)


def create(prefix: str, ckpt: Checkpoint, queue: Path, env: Mapping[str, str]) -> tuple[RunDir, Manifest]:
    """The run of `ckpt` (created, or the existing one when its settings are the same): the caller's
    knobs with CKPT_NAME set to the checkpoint. Raises what `new_run` raises, naming the input."""
    run = RunDir(run_dir(run_name(prefix, ckpt.step), env).resolve())
    knobs = {**env, "CKPT_NAME": str(ckpt.path.resolve()), "STUDY_RUN": run.name}
    manifest = new_run(run.root, queue, knobs)
    (run.root / DROPPED).unlink(missing_ok=True)  # back again (same contents): it resumes
    return run, manifest


def mark_dropped(run: RunDir, ckpt: Checkpoint, done: Progress) -> None:
    """Say in the run dir that its checkpoint went away mid-eval; the records it has stay."""
    note = {
        "checkpoint": str(ckpt.path),
        "step": ckpt.step,
        "dropped_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "episodes_done": done.done,
        "episodes_planned": done.planned,
        "why": "the checkpoint was deleted while it was evaluated",
    }
    tmp = run.root / (DROPPED + ".tmp")
    tmp.write_text(json.dumps(note, indent=1) + "\n")
    tmp.rename(run.root / DROPPED)
