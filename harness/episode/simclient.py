"""The sim client's episode loop: one unit (scene, task, seeds) against one model server.

Per seed: build a fresh episode, reset the policy, then query → execute the chunk (EXEC_ACTIONS,
ACTION_SMOOTH/SMOOTH_ROT, FAKE_PROPRIO via harness.episode.actions.ChunkRunner) → repeat, until the task's
success predicate holds after an executed action (any step: the episode stops there) or the task's
step limit is reached. An episode whose success already holds before the policy's first action is
no trial of the policy: it is recorded with `invalid` naming why (counted apart, never run again).
One record per seed goes to this writer's own record file (none once the worker that started the
client is stopped: its lease may be reaped). An exception in the simulator, or an error the policy
server answers with, becomes an `error` record for that seed (not a trial) and the next seed runs;
only a lost connection to the server stops the unit. A video that cannot be written never changes a
record: it is recorded as `video: null` and a warning line says why (harness.episode.video). Each
record carries its policy round trips (count, p50/p95 ms) and its node's fingerprint id
(harness.episode.nodeprint).
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config.rundir import RunDir, task_config_name
from harness.config.settings import Settings
from harness.episode import canary
from harness.episode.actions import ChunkRunner
from harness.episode.bench import Benchmark, Episode
from harness.episode.nodeprint import NodePrint
from harness.episode.records import append_record, now_iso_microseconds
from harness.episode.video import VideoWriter
from harness.queue.owner import process_stopped
from harness.wire.client import PolicyClient
from harness.wire.errors import PeerClosed, WireError

ERROR_TEXT_MAX = 300
SUCCESS_AT_RESET = "success holds before the policy's first action (not a trial)"
PROGRESS_EVERY_S = 0.5  # a step's progress write is skipped within this long of the last (a new seed never)


@dataclass
class SimAssignment:
    """What one sim client run is asked to do: some seeds of one cell, and where to write."""

    run_dir: Path
    scene: str
    task: str
    seeds: list[int]
    writer_id: str
    progress_file: Path | None = None
    # The worker that started this client: while it is stopped (SIGSTOP, a frozen VM) its lease may be
    # reaped and the unit run by another worker, so no new episode starts and no record is written.
    worker_pid: int | None = None


class WorkerStopped(Exception):
    """The worker was stopped when an episode ended: that episode's record is not written."""


@dataclass
class Timing:
    sim_s: float = 0.0  # building the episode, observing, stepping
    model_s: float = 0.0  # infer round trips (policy compute + wire)
    infer_ms: list[float] = field(default_factory=list)  # each infer round trip's time, in order

    def latency(self) -> dict[str, Any]:
        """The record's latency fields: the policy round trips' count and their p50/p95 (ms,
        `latency_ms`); null percentiles when the episode made none."""
        return {
            "infer_calls": len(self.infer_ms),
            "infer_p50_ms": latency_ms(self.infer_ms, 50),
            "infer_p95_ms": latency_ms(self.infer_ms, 95),
        }


def latency_ms(times_ms: list[float], q: float) -> float | None:
    """The q-th percentile of `times_ms` by the nearest-rank method (an observed round trip, never an
    interpolation between two), rounded to 0.01 ms; None for no round trips."""
    if not times_ms:
        return None
    ordered = sorted(times_ms)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return round(ordered[rank - 1], 2)


class SimClient:
    """Runs a assignment's seeds; `client` is a connected PolicyClient (hello not yet sent); `settings` are
    the sim process's."""

    def __init__(
        self, bench: Benchmark, client: PolicyClient, assignment: SimAssignment, settings: Settings
    ) -> None:
        self.bench, self.client, self.assignment, self.settings = bench, client, assignment, settings
        self.bench_config = settings.bench_config
        self.task_config = task_config_name(assignment.scene, self.bench_config)
        self.record_video = settings.record_video
        self.server_spec: dict[str, Any] | None = None
        self.notes: list[str] = []  # things to report that do not change a record (a lost video)
        self._progress_at = float("-inf")
        self._seed_started_at = 0.0  # epoch seconds the running seed's episode started (progress file)
        self.worker_stopped = False  # run() ended early: the worker was stopped (its seeds left unrecorded)
        self.nodeprint = NodePrint()

    def run(self, report: Any = print) -> list[dict[str, Any]]:
        records = []
        self._canary(report)
        for seed in self.assignment.seeds:
            if self._worker_stopped():
                report(f"worker pid {self.assignment.worker_pid} is stopped: ending before seed {seed}")
                self.worker_stopped = True
                break
            try:
                record = self.run_seed(seed)
            except WorkerStopped:
                report(
                    f"worker pid {self.assignment.worker_pid} was stopped during seed {seed}: its result is "
                    "not recorded (the unit's lease may have a new owner)"
                )
                self.worker_stopped = True
                break
            records.append(record)
            for note in self.notes:
                report(f"{self.assignment.task} {self.task_config} seed {seed}: warning: {note}")
            self.notes.clear()
            verdict = record["error"] or record.get("invalid") or ("success" if record["success"] else "fail")
            took = f"{record['steps']} steps, {record['wall_s']:.1f} s"
            report(f"{self.assignment.task} {self.task_config} seed {seed}: {verdict} ({took})")
        return records

    def run_seed(self, seed: int) -> dict[str, Any]:
        started, self._seed_started_at = time.monotonic(), time.time()
        timing = Timing()
        steps, success, collided, collision, error = 0, False, False, None, None
        self._progress(seed, 0)
        episode: Episode | None = None
        try:
            episode = self.bench.make_episode(self.assignment.task, self.bench_config, seed)
        except Exception as exc:  # the simulator could not build this seed: record it, move on
            error = _error_text(exc)
        timing.sim_s += time.monotonic() - started
        if self.server_spec is None:  # first episode: agree with the server (a mismatch ends the unit)
            fallback = {"benchmark": self.settings.benchmark, "task": self.assignment.task}
            self.server_spec = self.client.hello(dict(episode.spec) if episode is not None else fallback)
        video = VideoWriter(self._video_path(seed)) if self.record_video and episode is not None else None
        invalid = None
        if episode is not None:
            try:
                if episode.success():  # nothing for the policy to do: no trial of it (issue 59)
                    invalid = SUCCESS_AT_RESET
                    if video is not None:
                        video.capture(episode.video_frame)  # the scene as it was found
                else:
                    steps, success = self._episode(episode, seed, timing, video)
                collided = episode.collided()
                collision = getattr(episode, "collision_detail", lambda: None)()
            except (PeerClosed, ConnectionError, TimeoutError):
                if video is not None:
                    video.abandon()
                raise  # the server is gone: no later seed can run either
            except WireError as exc:  # the server answered with an error, or an unusable reply
                error = f"policy: {exc}"[:ERROR_TEXT_MAX]
            except Exception as exc:  # the simulator (or adapter) failed mid-episode: record, move on
                error = _error_text(exc)
            finally:
                _close_quietly(episode)
        path = video.finish() if video is not None else None  # never raises: the video is not the trial
        if video is not None and video.failure:
            self.notes.append(video.failure[:ERROR_TEXT_MAX])  # the trial stands, with video null
        video_rel = str(path.relative_to(self._result_dir())) if path is not None else None
        record = self._record(
            seed, success and error is None, collided, error, steps, timing, started, video_rel
        )
        record["collision"] = collision
        record["invalid"] = invalid if error is None else None
        record.update(timing.latency())
        record["fingerprint"] = self._fingerprint()
        if self._worker_stopped():  # its lease may be reaped by now: this worker must commit nothing
            raise WorkerStopped(seed)
        append_record(self._record_file(), record)
        return record

    def _canary(self, report: Any) -> None:
        """This process's canary of the run, once, before its first episode (`canary.run_once`;
        the sim process runs it in its warm-up instead when it knows the run at start)."""
        self._seed_started_at = time.time()
        on_step = lambda step: self._progress(None, step)  # noqa: E731
        canary.run_once(self.bench, self.settings, self.assignment.run_dir, report, on_step=on_step)

    def _fingerprint(self) -> str | None:
        """This node's fingerprint id (`harness.episode.nodeprint`), stored in the run once; one that
        cannot be read or stored is null and a warning, never a lost record."""
        try:
            return self.nodeprint.id_for(self.assignment.run_dir, self.server_spec)
        except Exception as exc:
            self.notes.append(f"node fingerprint not recorded: {_error_text(exc)}")
            return None

    def _worker_stopped(self) -> bool:
        """Whether the worker that started this client is stopped now. Checked just before a record
        is written: a worker found running has heartbeaten within LEASE_TTL, so its lease still holds."""
        return self.assignment.worker_pid is not None and process_stopped(self.assignment.worker_pid)

    def _episode(
        self, episode: Episode, seed: int, timing: Timing, video: VideoWriter | None
    ) -> tuple[int, bool]:
        runner = ChunkRunner.from_settings(
            self.settings, episode.action_dim, getattr(episode, "smoothed_dims", None)
        )
        self.client.reset(self.assignment.task, self.task_config, episode.instruction, seed)
        if video is not None:
            video.capture(episode.video_frame)
        steps = 0
        while steps < episode.step_limit:
            t = time.monotonic()
            obs = episode.observe()
            obs["proprio"] = runner.proprio(obs["proprio"])
            obs["instruction"] = episode.instruction
            timing.sim_s += time.monotonic() - t
            t = time.monotonic()
            chunk = self.client.infer(obs, steps)
            took = time.monotonic() - t
            timing.model_s += took
            timing.infer_ms.append(1000 * took)
            for action in runner.plan(chunk):
                t = time.monotonic()
                episode.apply(action)
                steps += 1
                done = episode.success()
                timing.sim_s += time.monotonic() - t
                if video is not None:
                    video.capture(episode.video_frame)
                self._progress(seed, steps)
                if done:
                    return steps, True
                if steps >= episode.step_limit:
                    break
        return steps, False

    def _record(
        self, seed: int, success: bool, collided: bool, error: str | None, steps: int,
        timing: Timing, started: float, video: str | None,
    ) -> dict[str, Any]:  # fmt: skip
        spec = self.server_spec or {}
        return {
            "task": self.assignment.task, "scene": self.assignment.scene, "task_config": self.task_config,
            "seed": int(seed), "success": bool(success), "hard_success": bool(success and not collided),
            "error": error, "steps": steps, "wall_s": round(time.monotonic() - started, 3),
            "sim_s": round(timing.sim_s, 3), "model_s": round(timing.model_s, 3),
            "policy": spec.get("policy", ""), "ckpt": spec.get("ckpt", ""),
            "host": socket.gethostname(), "worker": self.assignment.writer_id,
            "sim_version": self.bench.version,
            "contract": self.settings.contract or None, "video": video,
            "finished_at": now_iso_microseconds(),
        }  # fmt: skip

    def _result_dir(self) -> Path:
        spec = self.server_spec or {}
        return RunDir(self.assignment.run_dir).result_dir(
            self.assignment.task, spec.get("policy", ""), self.task_config, spec.get("ckpt", "")
        )

    def _video_path(self, seed: int) -> Path:
        return self._result_dir() / "videos" / f"seed{seed}.mp4"

    def _record_file(self) -> Path:
        spec = self.server_spec or {}
        return RunDir(self.assignment.run_dir).record_file(
            self.assignment.task,
            spec.get("policy", ""),
            self.task_config,
            spec.get("ckpt", ""),
            self.assignment.writer_id,
        )

    def _progress(self, seed: int | None, step: int) -> None:
        """Replace the progress file the worker watches for stalls. A write and a rename cost ~0.35 ms,
        a percent of a step, so step updates are throttled to PROGRESS_EVERY_S (the stall timeout is
        minutes); an episode's start (step 0) is always written, it names the seed that is running.
        `started_at` (epoch seconds, this host's clock) is when that seed's episode began: a worker
        that kills the episode records its wall time from there, not the whole assignment's. The
        canary's steps are written with no seed: a stall there is the unit's, and no seed's episode."""
        path = self.assignment.progress_file
        now = time.monotonic()
        if path is None or (step and now - self._progress_at < PROGRESS_EVERY_S):
            return
        self._progress_at = now
        tmp = path.with_name(path.name + ".tmp")
        state = {"seed": seed, "step": int(step), "started_at": self._seed_started_at}
        tmp.write_text(json.dumps(state))
        tmp.replace(path)


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_MAX]


def _close_quietly(episode: Episode) -> None:
    with contextlib.suppress(Exception):  # closing a broken simulator must not hide the episode's error
        episode.close()
