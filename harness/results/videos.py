"""Episode videos: where a record's video lies in the run dir, and the per-model video tree.

The tree (`<out>/<scene>/<task>/seed<N>.mp4`, the names through `path_part` as in the run dir) is made
of relative symlinks by default, so it costs no space and survives moving $RUNS_ROOT as a whole;
`copy` makes a tree that stands alone.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config.rundir import RunDir
from harness.pathnames import path_part
from harness.results.load import EpisodeKey, episode_key, scene_of

VIDEO_MODES = ("link", "copy", "none")


def source_video(run: RunDir, record: dict[str, Any]) -> Path | None:
    """The record's video file, if it exists: its `video` field (absolute, or relative to the run dir or
    to the result dir), else the result dir's `videos/seed<N>.mp4`."""
    result_dir = run.result_dir(
        record["task"], str(record.get("policy") or ""), record["task_config"], str(record.get("ckpt") or "")
    )
    candidates = []
    if record.get("video"):
        video = Path(str(record["video"]))
        candidates += [video] if video.is_absolute() else [run.root / video, result_dir / video]
    candidates.append(result_dir / "videos" / f"seed{int(record['seed'])}.mp4")
    return next((c for c in candidates if c.is_file()), None)


def tree_path(out: Path, record: dict[str, Any]) -> Path:
    """Where the organized tree puts a record's video (names through `path_part`, as in the run dir)."""
    return out / path_part(scene_of(record)) / path_part(record["task"]) / f"seed{int(record['seed'])}.mp4"


def place(source: Path, target: Path, mode: str) -> None:
    """Link or copy `source` to `target`, replacing what an earlier organize left there."""
    if mode not in VIDEO_MODES:
        raise ValueError(f"video mode {mode!r}: expected one of {', '.join(VIDEO_MODES)}")
    if mode == "none":
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.exists():
        target.unlink()
    if mode == "link":
        target.symlink_to(os.path.relpath(source.resolve(), target.parent.resolve()))
    else:
        shutil.copy2(source, target)


def build_tree(
    run: RunDir,
    records: list[dict[str, Any]],
    out: Path,
    mode: str,
    progress: Callable[[int, int], None] | None = None,
) -> dict[EpisodeKey, Path]:
    """Place every record's video under `out`. Returns each episode's video as the report should link
    it: the placed file, or with mode `none` the run dir's own file. Episodes without a video are absent."""
    videos: dict[EpisodeKey, Path] = {}
    for index, record in enumerate(records, start=1):
        source = source_video(run, record)
        if source is not None:
            target = source if mode == "none" else tree_path(out, record)
            place(source, target, mode)
            videos[episode_key(record)] = target
        if progress:
            progress(index, len(records))
    return videos
