"""Episode records: one JSON line per finished episode, each writer in its own record file.

Readers take the union of every `_metrics*.jsonl` under a directory, ignore a torn last line (a
writer killed mid-write), and keep one record per (task, task_config, seed) by `precedence`. Every
line is checked against the record contract (`check_record`: each field's type and range) before it
is used: a malformed line that is not the last one of its file is reported as "file:line: reason"
and left out, so it never replaces a good record and is never counted; `RecordSet.warnings()` says so.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RECORD_FIELDS = (
    "task", "scene", "task_config", "seed", "success", "hard_success", "error", "steps", "wall_s",
    "sim_s", "model_s", "policy", "ckpt", "host", "worker", "sim_version", "contract", "video",
    "finished_at",
)  # fmt: skip

# fields a record may lack (older records do), in FIELD_CHECKS' order
OPTIONAL_FIELDS = ("collision", "infer_calls", "infer_p50_ms", "infer_p95_ms", "invalid", "fingerprint")

RECORD_FILE_GLOB = "_metrics*.jsonl"  # record files keep the name old runs have
SHOWN_BAD_LINES = 10  # malformed lines named one by one in a warning; the rest are counted

RecordKey = tuple[str, str, int]


def now_iso_microseconds() -> str:
    """A record's finished_at for now: ISO 8601 UTC to the microsecond, so that one writer's
    records order as strings (`precedence`, and the worker's `seeds_written_since`)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


class RecordError(ValueError):
    """A record that breaks the contract; the message names every bad field and what it holds."""


def _json(value: Any) -> str:
    """A value as the record's JSON spelled it (inf/nan included), cut short."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {_json(value)}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"non-finite number {_json(value)}"  # NaN, Infinity, or a literal such as 1e999
    if isinstance(value, int | float):
        return f"number {_json(value)}"
    if isinstance(value, str):
        return f"string {_json(value)}" if value.strip() else f"blank string {_json(value)}"
    return "a list" if isinstance(value, list) else "an object"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # a JSON float is never an integer


def _name(value: Any) -> str | None:
    return None if isinstance(value, str) and value.strip() else "expected a non-empty string"


def _seed(value: Any) -> str | None:
    return None if _is_int(value) and value >= 0 else "expected an integer >= 0"


def _flag(value: Any) -> str | None:
    return None if isinstance(value, bool) else "expected true or false"


def _error(value: Any) -> str | None:
    return None if value is None or _name(value) is None else "expected null or a non-empty string"


def _count(value: Any) -> str | None:
    # null is accepted as "not measured" (the timings and steps feed no rate), a bad number is not
    return None if value is None or (_is_int(value) and value >= 0) else "expected an integer >= 0 or null"


def _seconds(value: Any) -> str | None:
    number = _is_int(value) or (isinstance(value, float) and math.isfinite(value))
    return None if value is None or (number and value >= 0) else "expected a finite number >= 0 or null"


def _fingerprint(value: Any) -> str | None:
    hex16 = isinstance(value, str) and len(value) == 16 and all(c in "0123456789abcdef" for c in value)
    return None if value is None or hex16 else "expected null or 16 hex digits (a fingerprint id)"


def _text_or_null(value: Any) -> str | None:
    return None if value is None or isinstance(value, str) else "expected a string or null"


FIELD_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "task": _name, "scene": _name, "task_config": _name, "seed": _seed,
    "success": _flag, "hard_success": _flag, "error": _error,
    "steps": _count, "wall_s": _seconds, "sim_s": _seconds, "model_s": _seconds,
    "policy": _text_or_null, "ckpt": _text_or_null, "host": _text_or_null, "worker": _text_or_null,
    "sim_version": _text_or_null, "contract": _text_or_null, "video": _text_or_null,
    "finished_at": _name,
    "collision": _text_or_null,  # optional: "<link> ~ <object> impulse=<x>" of the first collision
    # optional (older records lack them): the episode's policy round trips, their p50/p95 in ms
    "infer_calls": _count, "infer_p50_ms": _seconds, "infer_p95_ms": _seconds,
    # optional: why this episode is not a trial though nothing failed (its success held before the
    # policy's first action); counted apart, like an errored one, and not run again
    "invalid": _error,
    # optional: the id of the node's fingerprint, <run>/fingerprints/<id>.json (harness.episode.nodeprint)
    "fingerprint": _fingerprint,
}  # fmt: skip


def check_record(record: Any) -> None:
    """Raise RecordError naming each field of `record` that breaks the record contract."""
    if not isinstance(record, dict):
        raise RecordError(f"not a JSON object but {_kind(record)}")
    problems = []
    missing = [name for name in RECORD_FIELDS if name not in record]
    if missing:
        problems.append(f"missing field(s) {', '.join(missing)}")
    for name, check in FIELD_CHECKS.items():
        if name in record and (why := check(record[name])):
            problems.append(f"{name}: {why}, got {_kind(record[name])}")
    if not problems and record["hard_success"] and not record["success"]:
        problems.append("hard_success is true but success is false (a hard success is a success)")
    if not problems and record["error"] is not None and record["success"]:
        problems.append("error is set but success is true (an errored episode is not a success)")
    if not problems and record.get("invalid") is not None and record["success"]:
        problems.append("invalid is set but success is true (an invalid episode is not a trial)")
    if problems:
        raise RecordError("; ".join(problems))


def precedence(record: dict[str, Any]) -> tuple[bool, str, str]:
    """Which of two records of one seed counts: a trial beats an errored attempt; then the writer id,
    then that writer's own finished_at. Clocks are only ever compared within one writer (one node),
    so a node whose clock runs ahead cannot hide another node's later success, and the choice does
    not depend on the order the files are read in. The writer id is the record's `worker` field."""
    writer = str(record.get("worker") or "")
    return is_trial(record), writer, str(record.get("finished_at") or "")


def record_key(record: dict[str, Any]) -> RecordKey:
    return (record["task"], record["task_config"], int(record["seed"]))


def is_trial(record: dict[str, Any]) -> bool:
    """An errored episode (harness or simulator failure) is not a trial, nor an invalid one (its
    success held before the policy acted): both are counted apart."""
    return record.get("error") is None and record.get("invalid") is None


def is_invalid(record: dict[str, Any]) -> bool:
    """An episode that ran but was no test of the policy (`invalid` names why)."""
    return record.get("error") is None and record.get("invalid") is not None


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one record as a single write of one whole line, flushed to the server.

    A record that breaks the contract is refused (RecordError) before anything is written: readers
    would leave it out anyway."""
    try:
        check_record(record)
    except RecordError as exc:
        raise RecordError(f"episode record refused: {exc}") from None
    line = (json.dumps(record, sort_keys=True, allow_nan=False) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        if os.fstat(fd).st_size > 0:
            _end_torn_line(fd)
        os.write(fd, line)
        os.fsync(fd)
    except OSError as exc:  # a full disk: say which file could not take the record
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    finally:
        os.close(fd)


def _end_torn_line(fd: int) -> None:
    """If a previous writer with this id died mid-line, start on a fresh line so ours is whole."""
    size = os.fstat(fd).st_size
    if os.pread(fd, 1, size - 1) != b"\n":
        os.write(fd, b"\n")


def line_warnings(torn_lines: list[str], bad_lines: list[str]) -> list[str]:
    """What a reader shows about the lines it left out: torn last lines (ignored, expected when a
    writer is killed) in one warning, and each malformed line by its file:line and reason."""
    out = []
    if torn_lines:
        out.append(
            f"ignored {len(torn_lines)} torn line(s) (a writer died mid-line): "
            + ", ".join(torn_lines[:3])
            + (" …" if len(torn_lines) > 3 else "")
        )
    for entry in bad_lines[:SHOWN_BAD_LINES]:
        out.append(f"ignored a malformed record line (not counted): {entry}")
    if len(bad_lines) > SHOWN_BAD_LINES:
        out.append(f"ignored {len(bad_lines) - SHOWN_BAD_LINES} more malformed record line(s)")
    return out


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
        if old is None or precedence(record) >= precedence(old):
            self.records[key] = record

    def seeds(self, task: str, task_config: str) -> set[int]:
        return {seed for (t, c, seed) in self.records if t == task and c == task_config}

    def warnings(self) -> list[str]:
        return line_warnings(self.torn_lines, self.bad_lines)


def record_files(root: Path) -> list[Path]:
    return sorted(Path(root).rglob(RECORD_FILE_GLOB)) if Path(root).exists() else []


def read_records(paths: Iterable[Path]) -> RecordSet:
    result = RecordSet()
    for path in paths:
        result.files += 1
        for record in _read_file(path, result):
            result.add(record)
    return result


def read_tree(root: Path) -> RecordSet:
    """All records under `root` (a run's eval_result, or one result dir)."""
    return read_records(record_files(root))


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
            check_record(record)
        except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, too deep, or a bad record
            if last:
                result.torn_lines.append(f"{path}:{number}")
            else:
                reason = str(exc) if isinstance(exc, RecordError) else f"not JSON ({exc})"
                result.bad_lines.append(f"{path}:{number}: {reason}")
            continue
        if last:  # parses, but was not terminated: possibly cut at a digit; do not trust it
            result.torn_lines.append(f"{path}:{number}")
            continue
        yield record
