"""Episode videos: frames streamed to an mp4 through imageio-ffmpeg as the episode runs.

Streaming (rather than buffering) keeps a long episode's memory flat and lets ffmpeg encode on
another core while the simulator steps. The file appears under its final name only when complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

FPS = 20  # ManiSkill's control frequency: one frame per control step plays at real time


class VideoWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._tmp = path.with_name(path.stem + ".part.mp4")
        self._gen: Any = None

    def add(self, frame: np.ndarray) -> None:
        if self._gen is None:
            import imageio_ffmpeg

            self.path.parent.mkdir(parents=True, exist_ok=True)
            height, width = frame.shape[:2]
            self._gen = imageio_ffmpeg.write_frames(
                str(self._tmp), (width, height), fps=FPS, macro_block_size=1, ffmpeg_log_level="error"
            )
            self._gen.send(None)
        self._gen.send(np.ascontiguousarray(frame, dtype=np.uint8))

    def finish(self) -> Path | None:
        """Close the stream and publish the file; None when no frame was written."""
        if self._gen is None:
            return None
        self._gen.close()
        self._gen = None
        self._tmp.replace(self.path)
        return self.path

    def abandon(self) -> None:
        if self._gen is not None:
            self._gen.close()
            self._gen = None
        self._tmp.unlink(missing_ok=True)
