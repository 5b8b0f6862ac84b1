"""Episode videos: every frame reaches the mp4 through the real ffmpeg, which runs niced."""

from __future__ import annotations

import os
import time
from pathlib import Path

import imageio_ffmpeg
import numpy as np

from harness.episode.video import VideoWriter


def _frames(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)
    return [np.roll(base, i, axis=1) for i in range(n)]


def _ffmpeg_children() -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        if "ffmpeg" in name and int(rest[1]) == os.getpid():
            pids.append(int(stat.parent.name))
    return pids


def _nice(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rindex(")") + 2 :].split()[16])  # field 19 of stat: nice


def test_every_frame_is_in_the_published_video(tmp_path: Path) -> None:
    writer = VideoWriter(tmp_path / "videos" / "seed0.mp4")
    for frame in _frames(25):
        writer.add(frame)
    path = writer.finish()
    assert path == tmp_path / "videos" / "seed0.mp4" and writer.failure is None
    assert not list(tmp_path.rglob("*.part.mp4"))
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    assert tuple(meta["size"]) == (96, 64)
    assert sum(1 for _ in reader) == 25


def test_the_encoder_runs_niced_and_the_episode_loop_does_not(tmp_path: Path) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's (the episode loop's) nice value
    writer = VideoWriter(tmp_path / "seed0.mp4")
    writer.add(_frames(1)[0])
    deadline = time.monotonic() + 30
    while not (children := _ffmpeg_children()) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert children, "no ffmpeg child started"
        assert ours < 19, "the test runs at the lowest priority already: nothing to compare"
        assert [_nice(pid) for pid in children] == [min(ours + 10, 19)] * len(children)
        assert os.getpriority(os.PRIO_PROCESS, 0) == ours
    finally:
        writer.finish()


def test_a_videos_dir_that_cannot_be_made_costs_the_video_not_the_caller(tmp_path: Path) -> None:
    """Issue 20, item 3: `add` raised FileExistsError into the episode when videos/ was a file."""
    (tmp_path / "videos").write_text("a regular file where the videos dir should be")
    writer = VideoWriter(tmp_path / "videos" / "seed0.mp4")
    for frame in _frames(3):
        writer.add(frame)  # must not raise
    assert writer.finish() is None
    assert writer.failure is not None
    assert writer.failure.startswith("video seed0.mp4 not written: FileExistsError")
    assert _ffmpeg_children() == []


def test_a_final_rename_that_fails_costs_the_video_not_the_caller(tmp_path: Path) -> None:
    """Issue 20, item 3: `finish` let the rename's OSError out (it killed the persistent sim)."""
    (tmp_path / "seed0.mp4").mkdir()
    (tmp_path / "seed0.mp4" / "taken").write_text("a non-empty dir holds the final name")
    writer = VideoWriter(tmp_path / "seed0.mp4")
    for frame in _frames(3):
        writer.add(frame)
    assert writer.finish() is None  # must not raise
    assert writer.failure is not None and "not written" in writer.failure and "seed0.mp4" in writer.failure
    assert not list(tmp_path.glob("*.part.mp4")), "the encoded part file must not be left behind"


def test_a_frame_source_that_fails_is_not_called_again(tmp_path: Path) -> None:
    calls: list[int] = []

    def broken() -> np.ndarray:
        calls.append(1)
        raise RuntimeError("video camera gone")

    writer = VideoWriter(tmp_path / "seed0.mp4")
    writer.capture(lambda: _frames(1)[0])
    writer.capture(broken)
    writer.capture(broken)
    assert writer.finish() is None and len(calls) == 1
    assert writer.failure == "video seed0.mp4 not written: RuntimeError: video camera gone"
    assert not list(tmp_path.glob("*.mp4"))
