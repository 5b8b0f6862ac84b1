"""Episode videos: frames streamed to an mp4 through imageio-ffmpeg as the episode runs.

Frames go through a queue to a writer thread that feeds ffmpeg, so the episode loop never waits on
the encoder's pipe (measured: ~6 ms a step on the loop's critical path when written inline). Streaming
rather than buffering keeps a long episode's memory flat. The file appears under its final name only
when complete. A video never costs an episode: no method raises. A `videos/` dir that cannot be
made, a frame that cannot be taken, an encoder failure or a final rename that fails leaves no file
and is reported in `failure` by `finish()`, so the episode's result is recorded as it happened.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

FPS = 20  # ManiSkill's control frequency: one frame per control step plays at real time
# x264 `veryfast` on one thread: measured on real 224x224 episode frames, 0.63 ms of CPU a frame against
# 1.43 ms for the default preset (threads auto), and a smaller file; the encoder shares the node's
# cores with the simulator, so its CPU is taken from the episode loop.
ENCODER_PARAMS = ["-preset", "veryfast", "-threads", "1"]
# The encoder runs niced: on a node whose cores the sims keep busy it takes the CPU they leave, and
# falls behind (up to the frame queue) rather than slowing the episode it records.
ENCODER_NICE = 10
_END = None


class VideoWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._tmp = path.with_name(path.stem + ".part.mp4")
        self._frames: queue.Queue[np.ndarray | None] = queue.Queue(maxsize=256)
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self.failure: str | None = None  # why no video was written, once finish() has run

    def add(self, frame: np.ndarray) -> None:
        """Queue one frame; after a failure, frames are dropped (the failure is `finish()`'s to say)."""
        if self._failure is not None:
            return
        try:
            if self._thread is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                height, width = frame.shape[:2]
                self._thread = threading.Thread(target=self._encode, args=(width, height), daemon=True)
                self._thread.start()
            self._frames.put(np.array(frame, dtype=np.uint8, order="C"))
        except Exception as exc:  # no videos/ dir (a file in its place, a full disk), a bad frame
            self._failure = exc

    def capture(self, source: Callable[[], np.ndarray]) -> None:
        """Take a frame from `source` (the episode's video camera) and queue it; a source that fails
        costs the video, not the episode. After a failure the source is no longer called."""
        if self._failure is not None:
            return
        try:
            frame = source()
        except Exception as exc:
            self._failure = exc
            return
        self.add(frame)

    def _encode(self, width: int, height: int) -> None:
        import imageio_ffmpeg

        gen: Any = None
        try:
            # Linux nice is per thread and a child inherits its forking thread's: ffmpeg starts niced
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), ENCODER_NICE)
            gen = imageio_ffmpeg.write_frames(
                str(self._tmp), (width, height), fps=FPS, macro_block_size=1, ffmpeg_log_level="error",
                output_params=ENCODER_PARAMS,
            )  # fmt: skip
            gen.send(None)
            while (frame := self._frames.get()) is not _END:
                gen.send(frame)
        except BaseException as exc:  # reported by finish(); keep draining so add() never blocks
            self._failure = exc
            while self._frames.get() is not _END:
                pass
        finally:
            if gen is not None:
                try:
                    gen.close()
                except BaseException as exc:  # ffmpeg failed at the end (its exit status)
                    self._failure = self._failure or exc

    def _stop(self) -> None:
        if self._thread is not None:
            self._frames.put(_END)
            self._thread.join()
            self._thread = None

    def finish(self) -> Path | None:
        """Wait for the encoder and publish the file; None when no frame was written or the video
        failed (then `failure` says why). Never raises."""
        started = self._thread is not None
        self._stop()
        if self._failure is None:
            if not started:
                return None  # no frame was ever added
            try:
                self._tmp.replace(self.path)
                return self.path
            except OSError as exc:  # the final name is taken by a dir, the dir went away, ...
                self._failure = exc
        with contextlib.suppress(OSError):
            self._tmp.unlink(missing_ok=True)
        why = f"{type(self._failure).__name__}: {self._failure}"
        self.failure = f"video {self.path.name} not written: {why}"
        return None

    def abandon(self) -> None:
        self._stop()
        with contextlib.suppress(OSError):
            self._tmp.unlink(missing_ok=True)
