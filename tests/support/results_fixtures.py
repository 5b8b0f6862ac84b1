"""Builders of run dirs with hand-made episode records, for the results tools' tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.config.rundir import RunDir, task_config_name
from harness.episode.records import append_record

POLICY = "hold"
CKPT = "ck1"
CONTRACT = "c0ffee0000000000aaaa"


def record(
    scene: str,
    task: str,
    seed: int,
    success: bool,
    hard: bool | None = None,
    *,
    error: str | None = None,
    contract: str = CONTRACT,
    finished_at: str | None = None,
    ckpt: str = CKPT,
    bench_config: str = "clean",
) -> dict[str, Any]:
    """One episode record with every field of the contract."""
    return {
        "task": task,
        "scene": scene,
        "task_config": task_config_name(scene, bench_config),
        "seed": seed,
        "success": success and error is None,
        "hard_success": (success if hard is None else hard) and error is None,
        "error": error,
        "steps": 100,
        "wall_s": 3.0,
        "sim_s": 2.0,
        "model_s": 1.0,
        "policy": POLICY,
        "ckpt": ckpt,
        "host": "node1",
        "worker": "w0",
        "sim_version": "sapien 3.0.3",
        "contract": contract,
        "video": f"videos/seed{seed}.mp4",
        "finished_at": finished_at or f"2025-01-01T00:00:{seed % 60:02d}+00:00",
    }


def write_records(
    run: RunDir, records: list[dict[str, Any]], writer: str = "w0", videos: bool = True
) -> None:
    """Append records to the writer's record file and give each a (tiny, fake) video file."""
    for rec in records:
        append_record(
            run.record_file(rec["task"], rec["policy"], rec["task_config"], rec["ckpt"], writer), rec
        )
        if videos:
            video = run.result_dir(rec["task"], rec["policy"], rec["task_config"], rec["ckpt"]) / rec["video"]
            video.parent.mkdir(parents=True, exist_ok=True)
            video.write_bytes(b"not really an mp4: seed " + str(rec["seed"]).encode())


def append_raw(run: RunDir, task: str, task_config: str, text: str, writer: str = "w0") -> Path:
    """Append raw text (e.g. a torn line) to a writer's record file."""
    path = run.record_file(task, POLICY, task_config, CKPT, writer)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(text)
    return path


def new_run(root: Path, name: str = "run1") -> RunDir:
    run = RunDir(root / name)
    run.results.mkdir(parents=True)
    (run.root / "queue.txt").write_text("")
    return run


def dumps(rec: dict[str, Any]) -> str:
    return json.dumps(rec, sort_keys=True)


def append_line(run: RunDir, task: str, task_config: str, text: str, writer: str = "w0") -> str:
    """Append one whole (newline-terminated) line to a writer's record file; returns its "file:line"."""
    path = append_raw(run, task, task_config, text + "\n", writer)
    return f"{path}:{len(path.read_bytes().splitlines())}"
