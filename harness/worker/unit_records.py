"""What the worker reads and writes of a unit's records: the seeds still to run, and the errored
record of an episode it had to kill (counted apart, never as a failure; retried on a later pass)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.records import RecordSet, append_record, now_iso_microseconds, read_tree
from harness.queue.units import Unit


def finished_seeds(records: RecordSet, unit: Unit) -> set[int]:
    """Seeds of `unit` whose latest record is a result (a policy success or failure), not an error."""
    return {
        seed
        for seed in unit.seeds
        if (rec := records.records.get((unit.task, unit.task_config, seed))) is not None
        and rec.get("error") is None
    }


def missing_seeds(result_dir: Path, unit: Unit) -> list[int]:
    """The seeds still to run: never recorded, or whose latest record is an errored episode."""
    done = finished_seeds(read_tree(result_dir), unit)
    return [seed for seed in unit.seeds if seed not in done]


def seeds_written_since(
    run: RunDir, unit: Unit, info: dict, writer: str, since: str, seeds: list[int]
) -> set[int]:
    """Seeds of `seeds` that `writer` itself recorded at `since` or later: every line of its own
    record file, not each seed's winning record. An older record of a writer id that sorts higher
    (or an older trial of this writer) wins the seed, which then looked unattempted and ran again."""
    path = run.record_file(unit.task, info["policy"], unit.task_config, info.get("ckpt", ""), writer)
    try:
        lines = path.read_bytes().split(b"\n")
    except FileNotFoundError:
        return set()
    wanted, found, unit_cell = set(seeds), set(), (unit.task, unit.task_config)
    for raw in lines:
        try:
            rec = json.loads(raw)
        except ValueError:
            continue  # blank, or torn by a writer killed mid-line
        if not isinstance(rec, dict) or (rec.get("task"), rec.get("task_config")) != unit_cell:
            continue
        if rec.get("seed") in wanted and str(rec.get("finished_at", "")) >= since:
            found.add(rec["seed"])
    return found


def errored_record(
    unit: Unit, seed: int, error: str, info: dict, writer: str, wall_s: float, settings: Settings
) -> dict:
    """The record of an episode the worker had to kill: counted apart, retried on a later pass.
    `writer` is the writer id, stored in the record's `worker` field (its name in old records)."""
    return {
        "task": unit.task, "scene": unit.scene, "task_config": unit.task_config, "seed": seed,
        "success": False, "hard_success": False, "error": error, "steps": 0, "wall_s": wall_s,
        "sim_s": 0.0, "model_s": 0.0, "policy": info.get("policy", settings.policy),
        "ckpt": info.get("ckpt", ""), "host": socket.gethostname(), "worker": writer, "sim_version": "",
        "contract": settings.contract, "video": None,
        "finished_at": now_iso_microseconds(),
    }  # fmt: skip


def record_errored(
    run: RunDir, unit: Unit, seed: int, error: str, info: dict, writer: str, wall_s: float, settings: Settings
) -> None:
    """Append the errored record of `seed` to the writer's own record file of that result dir."""
    ckpt = info.get("ckpt", "")
    path = run.record_file(unit.task, info["policy"], unit.task_config, ckpt, f"{writer}.worker")
    append_record(path, errored_record(unit, seed, error, info, writer, wall_s, settings))
