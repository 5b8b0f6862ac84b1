"""Decision markers: `<run>/decided/<cell-key>.json`, one per (scene, task) cell that its stopping rule
decided. Every worker on every node checks them before it claims a unit, and leaves the units of a
decided cell unclaimed.

A marker is written to a temp file in the same dir and renamed onto its name, so a reader sees a whole
marker or none (rename is atomic on NFS too). Any worker may write one: the decision is a function of
the cell's records in seed order (`harness.results.cell_decision`), so two writers write the same
content and a rename over an existing marker changes nothing. A reader that cannot see a marker yet
(an NFS negative lookup) only runs a unit too many, which the report leaves out of the decided prefix.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from harness.config.rundir import RunDir
from harness.pathnames import safe_key


def cell_key(scene: str, task: str) -> str:
    """The marker's file-name stem: readable, file-name-safe, unique even if sanitising collides."""
    raw = f"{scene}__{task}"
    key = safe_key(raw).lstrip(".") or "cell"
    return key if key == raw else f"{key}.{hashlib.sha1(raw.encode()).hexdigest()[:8]}"


def marker_path(run: RunDir, scene: str, task: str) -> Path:
    return run.decided / f"{cell_key(scene, task)}.json"


def write_marker(run: RunDir, scene: str, task: str, decision: dict[str, Any]) -> Path:
    """Write (or rewrite, with the same content) the cell's marker atomically; its path."""
    path = marker_path(run, scene, task)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"scene": scene, "task": task, **decision}, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_marker(run: RunDir, scene: str, task: str) -> dict[str, Any] | None:
    """The cell's marker, or None when it has none (or it cannot be read: then the cell runs on)."""
    try:
        data = json.loads(marker_path(run, scene, task).read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return data if isinstance(data, dict) else None
