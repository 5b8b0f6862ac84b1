"""The run directory layout (`$RUNS_ROOT/<RUN>/`) and the queue file format.

Every path the parts share is named here once, so the worker, the results tools and the
orchestrators agree on it. The README's "Runs" section shows the layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.pathnames import path_part, safe_key


class QueueFileError(ValueError):
    """A queue file that cannot be read; the message names the file and line."""


@dataclass(frozen=True, order=True)
class Cell:
    """One (scene, task) line of a queue file."""

    scene: str
    task: str


def task_config_name(scene: str, bench_config: str) -> str:
    """The task_config of a cell at a config level, as seed banks and result dirs name it."""
    return f"{scene}_{bench_config}"


def read_queue(path: Path) -> list[Cell]:
    """Parse a queue file: one `<scene> <task>` a line, the scene its first field and the task the
    rest of the line, trimmed (a task may be a sentence: LIBERO's are their instructions); blank
    lines and `#` comments ignored."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise QueueFileError(f"queue file {path} does not exist") from None
    cells: list[Cell] = []
    seen: set[Cell] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split(None, 1)
        if len(fields) != 2:
            raise QueueFileError(f"{path}:{number}: expected '<scene> <task>', got {raw.strip()!r} (no task)")
        cell = Cell(fields[0], fields[1].strip())
        if cell in seen:
            raise QueueFileError(f"{path}:{number}: duplicate unit {raw.strip()!r}")
        seen.add(cell)
        cells.append(cell)
    return cells


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def manifest(self) -> Path:
        return self.root / "run.yaml"

    @property
    def queue(self) -> Path:
        return self.root / "queue.txt"

    @property
    def leases(self) -> Path:
        return self.root / "queue.txt.leases"

    @property
    def results(self) -> Path:
        return self.root / "eval_result"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def decided(self) -> Path:
        """Markers of the cells an adaptive run's stopping rule decided (harness.config.decided)."""
        return self.root / "decided"

    def result_dir(self, task: str, policy: str, task_config: str, ckpt: str) -> Path:
        """Where the episode records and videos of one (task, task_config) of one model live (the
        task and task_config through `path_part`: a task named by a sentence is one directory)."""
        return self.results / path_part(task) / policy / path_part(task_config) / (ckpt or "default")

    def record_file(self, task: str, policy: str, task_config: str, ckpt: str, writer: str) -> Path:
        """The record file of one writer: no two processes ever append to the same file."""
        return self.result_dir(task, policy, task_config, ckpt) / f"_metrics.{safe_key(writer)}.jsonl"
