"""Episode records: one JSON line per finished episode, each writer in its own metrics file.

Readers take the union of every `_metrics*.jsonl` under a directory, ignore a torn last line (a
writer killed mid-write), and keep the latest record per (task, task_config, seed). A malformed
line that is not the last one of its file is reported, never silently dropped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RECORD_FIELDS = (
    "task", "scene", "task_config", "seed", "success", "hard_success", "error", "steps", "wall_s",
    "sim_s", "model_s", "policy", "ckpt", "host", "worker", "sim_version", "contract", "video",
    "finished_at",
)  # fmt: skip

METRICS_GLOB = "_metrics*.jsonl"

RecordKey = tuple[str, str, int]


def record_key(record: dict[str, Any]) -> RecordKey:
    return (record["task"], record["task_config"], int(record["seed"]))


def is_trial(record: dict[str, Any]) -> bool:
    """An errored episode (harness or simulator failure) is not a trial: it is counted apart."""
    return record.get("error") is None


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one record as a single write of one whole line, flushed to the server."""
    missing = [name for name in RECORD_FIELDS if name not in record]
    if missing:
        raise ValueError(f"episode record lacks fields {missing}")
    line = (json.dumps(record, sort_keys=True, allow_nan=False) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        if os.fstat(fd).st_size > 0:
            _end_torn_line(fd)
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _end_torn_line(fd: int) -> None:
    """If a previous writer with this id died mid-line, start on a fresh line so ours is whole."""
    size = os.fstat(fd).st_size
    if os.pread(fd, 1, size - 1) != b"\n":
        os.write(fd, b"\n")


@dataclass
class RecordSet:
    """The deduplicated records of a directory tree, and what was wrong with the files."""

    records: dict[RecordKey, dict[str, Any]] = field(default_factory=dict)
    torn_lines: list[str] = field(default_factory=list)  # "file:line" of torn last lines (ignored)
    bad_lines: list[str] = field(default_factory=list)  # "file:line: reason" of other malformed lines
    files: int = 0

    def add(self, record: dict[str, Any]) -> None:
        key = record_key(record)
        old = self.records.get(key)
        if old is None or str(record.get("finished_at", "")) >= str(old.get("finished_at", "")):
            self.records[key] = record

    def seeds(self, task: str, task_config: str) -> set[int]:
        return {seed for (t, c, seed) in self.records if t == task and c == task_config}


def metrics_files(root: Path) -> list[Path]:
    return sorted(Path(root).rglob(METRICS_GLOB)) if Path(root).exists() else []


def read_records(paths: Iterable[Path]) -> RecordSet:
    result = RecordSet()
    for path in paths:
        result.files += 1
        for record in _read_file(path, result):
            result.add(record)
    return result


def read_tree(root: Path) -> RecordSet:
    """All records under `root` (a run's eval_result, or one result dir)."""
    return read_records(metrics_files(root))


def _read_file(path: Path, result: RecordSet) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as handle:
        data = handle.read()
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        last = number == len(lines)  # no newline after it: the writer died mid-line
        try:
            record = json.loads(raw)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            record_key(record)
        except (ValueError, KeyError, TypeError) as exc:
            if last:
                result.torn_lines.append(f"{path}:{number}")
            else:
                result.bad_lines.append(f"{path}:{number}: {exc}")
            continue
        if last:  # parses, but was not terminated: possibly cut at a digit; do not trust it
            result.torn_lines.append(f"{path}:{number}")
            continue
        yield record
