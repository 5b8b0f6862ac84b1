"""The sim client's episode loop, with a scripted benchmark and policy (no simulator, no sockets)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.records import read_tree
from harness.episode.simclient import SimAssignment, SimClient
from harness.queue.owner import process_stopped
from harness.wire.errors import RemoteError


class ScriptedEpisode:
    """Succeeds after `succeed_at` actions; raises at step `raise_at` (a simulator crash)."""

    def __init__(self, seed: int, succeed_at: int | None, raise_at: int | None) -> None:
        self.instruction, self.step_limit, self.action_dim = "do it", 6, 10
        self.spec = {"benchmark": "scripted", "action_dim": 10, "cameras": ["cam"]}
        self.seed, self.succeed_at, self.raise_at, self.steps = seed, succeed_at, raise_at, 0
        self.closed = False

    def observe(self) -> dict[str, Any]:
        return {"images": {"cam": np.zeros((4, 4, 3), np.uint8)}, "proprio": np.zeros(10, np.float32)}

    def apply(self, action: np.ndarray) -> None:
        self.steps += 1
        if self.steps == self.raise_at:
            raise RuntimeError("PhysX exploded")

    def success(self) -> bool:
        return self.succeed_at is not None and self.steps >= self.succeed_at

    def collided(self) -> bool:
        return self.seed == 3

    def video_frame(self) -> np.ndarray:
        return np.zeros((4, 4, 3), np.uint8)

    def close(self) -> None:
        self.closed = True


class ScriptedBench:
    version = "scripted==1"

    def __init__(self, plan: dict[int, tuple[int | None, int | None]]) -> None:
        self.plan, self.episodes = plan, []

    def tasks(self) -> list[str]:
        return ["T"]

    def make_episode(
        self, task: str, bench_config: str, seed: int, *, render: bool = True
    ) -> ScriptedEpisode:
        if self.plan[seed] == ("build", "fails"):
            raise RuntimeError("cannot build the scene")
        self.episodes.append(ScriptedEpisode(seed, *self.plan[seed]))
        return self.episodes[-1]


class ScriptedPolicy:
    """A PolicyClient stand-in: chunks of 2 zero actions; answers seed 5 with a server error."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def hello(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("hello", spec["benchmark"]))
        return {"policy": "scripted", "ckpt": "c1", "action_dim": 10}

    def reset(self, task: str, task_config: str, instruction: str, seed: int) -> None:
        self.seed = seed
        self.calls.append(("reset", seed))

    def infer(self, obs: dict[str, Any], step: int) -> np.ndarray:
        if self.seed == 5:
            raise RemoteError("replay: no trace for seed 5")
        assert obs["instruction"] == "do it" and "cam" in obs["images"]
        return np.zeros((2, 10), np.float32)


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], Path, ScriptedBench]:
    monkeypatch.setenv("RECORD_VIDEO", "0")
    monkeypatch.setenv("BENCH_CONFIG", "clean")
    monkeypatch.setenv("EVAL_CONTRACT", "abc123")
    plan = {0: (3, None), 1: (None, 3), 2: (None, None), 3: (1, None), 4: ("build", "fails"), 5: (1, None)}
    bench = ScriptedBench(plan)
    unit = SimAssignment(tmp_path / "run", "table", "T", list(plan), "w7", tmp_path / "progress.json")
    client = SimClient(bench, ScriptedPolicy(), unit, Settings.from_env(os.environ))
    return client.run(report=lambda line: None), tmp_path, bench


def test_one_record_per_seed_and_a_crash_does_not_stop_the_unit(records) -> None:
    recs, tmp_path, bench = records
    by_seed = {r["seed"]: r for r in recs}
    assert by_seed[0]["success"] and by_seed[0]["steps"] == 3 and by_seed[0]["hard_success"]
    assert by_seed[1]["error"] == "RuntimeError: PhysX exploded" and not by_seed[1]["success"]
    assert by_seed[2]["error"] is None and not by_seed[2]["success"] and by_seed[2]["steps"] == 6
    assert by_seed[3]["success"] and not by_seed[3]["hard_success"]  # success with a collision
    assert by_seed[4]["error"] == "RuntimeError: cannot build the scene"
    assert by_seed[5]["error"].startswith("policy: replay: no trace")
    assert all(ep.closed for ep in bench.episodes)
    on_disk = read_tree(RunDir(tmp_path / "run").results).records
    assert len(on_disk) == 6
    assert all(r["contract"] == "abc123" and r["policy"] == "scripted" and r["ckpt"] == "c1" for r in recs)
    path = RunDir(tmp_path / "run").record_file("T", "scripted", "table_clean", "c1", "w7")
    assert path.exists()
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert (progress["seed"], progress["step"]) == (5, 0) and isinstance(progress["started_at"], float)


def test_stops_at_the_first_success(records) -> None:
    _, _, bench = records
    assert bench.episodes[0].steps == 3  # chunk of 2 executed, then 1 more: stopped mid-chunk


def test_a_video_failure_keeps_the_finished_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 11, item 5: an ffmpeg failure used to turn a finished trial into an errored record."""
    monkeypatch.setenv("RECORD_VIDEO", "1")
    monkeypatch.setenv("BENCH_CONFIG", "clean")
    monkeypatch.setenv("IMAGEIO_FFMPEG_EXE", "/bin/false")  # an encoder that fails every time
    bench = ScriptedBench({0: (3, None), 1: (None, None)})
    said: list[str] = []
    assignment = SimAssignment(tmp_path / "run", "table", "T", [0, 1], "w7")
    recs = SimClient(bench, ScriptedPolicy(), assignment, Settings.from_env(os.environ)).run(said.append)
    assert [(r["error"], r["success"], r["video"]) for r in recs] == [(None, True, None), (None, False, None)]
    assert any("seed 0: warning: video seed0.mp4 not written" in line for line in said)
    assert not list((tmp_path / "run").rglob("*.mp4"))


def _video_assignment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[SimClient, Path, list[str]]:
    monkeypatch.setenv("RECORD_VIDEO", "1")
    monkeypatch.setenv("BENCH_CONFIG", "clean")
    said: list[str] = []
    assignment = SimAssignment(tmp_path / "run", "table", "T", [0], "w7")
    result_dir = RunDir(tmp_path / "run").result_dir("T", "scripted", "table_clean", "c1")
    result_dir.mkdir(parents=True)
    return (
        SimClient(ScriptedBench({0: (3, None)}), ScriptedPolicy(), assignment, Settings.from_env(os.environ)),
        result_dir,
        said,
    )


def test_a_videos_dir_that_cannot_be_made_keeps_the_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20, item 3: a success was recorded as error="FileExistsError...", steps 0."""
    client, result_dir, said = _video_assignment(tmp_path, monkeypatch)
    (result_dir / "videos").write_text("not a dir")
    [rec] = client.run(said.append)
    assert (rec["error"], rec["success"], rec["steps"], rec["video"]) == (None, True, 3, None)
    assert any("seed 0: warning: video seed0.mp4 not written: FileExistsError" in line for line in said), said
    assert read_tree(RunDir(tmp_path / "run").results).records[("T", "table_clean", 0)]["success"]


def test_a_failed_video_rename_keeps_the_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20, item 3: the rename's OSError left the episode loop (and killed the persistent sim)."""
    client, result_dir, said = _video_assignment(tmp_path, monkeypatch)
    (result_dir / "videos" / "seed0.mp4" / "taken").mkdir(parents=True)  # the final name is a busy dir
    [rec] = client.run(said.append)
    assert (rec["error"], rec["success"], rec["steps"], rec["video"]) == (None, True, 3, None)
    assert any("seed 0: warning: video seed0.mp4 not written" in line for line in said), said
    assert not list(result_dir.rglob("*.part.mp4"))


class StoppingBench(ScriptedBench):
    """Seed 1's episode SIGSTOPs the worker at its first step (a worker frozen mid-episode)."""

    def __init__(self, worker: subprocess.Popen) -> None:
        super().__init__({0: (None, None), 1: (None, None), 2: (None, None)})
        self.worker = worker

    def make_episode(self, task: str, bench_config: str, seed: int, *, render: bool = True):
        episode = super().make_episode(task, bench_config, seed)
        if seed == 1:
            apply = episode.apply

            def stop_then_apply(action: np.ndarray) -> None:
                os.kill(self.worker.pid, signal.SIGSTOP)
                deadline = time.monotonic() + 10
                while not process_stopped(self.worker.pid) and time.monotonic() < deadline:
                    time.sleep(0.01)
                apply(action)

            episode.apply = stop_then_apply
        return episode


def test_an_episode_that_ends_while_its_worker_is_stopped_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's lease may be reaped while it is stopped (LEASE_TTL): its in-flight episode used to
    be recorded after the reap (the NFS chaos test's `records_after_reap`); now nothing is written."""
    monkeypatch.setenv("RECORD_VIDEO", "0")
    monkeypatch.setenv("BENCH_CONFIG", "clean")
    worker = subprocess.Popen(["sleep", "60"])
    try:
        said: list[str] = []
        assignment = SimAssignment(tmp_path / "run", "table", "T", [0, 1, 2], "w7", worker_pid=worker.pid)
        recs = SimClient(
            StoppingBench(worker), ScriptedPolicy(), assignment, Settings.from_env(os.environ)
        ).run(said.append)
    finally:
        worker.kill()
        worker.wait()
    assert [r["seed"] for r in recs] == [0]
    assert set(read_tree(RunDir(tmp_path / "run").results).records) == {("T", "table_clean", 0)}
    assert any("was stopped during seed 1: its result is not recorded" in line for line in said), said
    assert not any("seed 2" in line for line in said), said
