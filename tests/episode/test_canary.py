"""Issue 59's canary: a policy-free rollout whose physics trajectory is hashed; the run's first canary
becomes the reference (an exclusive create), later ones are compared with it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from harness.episode import canary


class Episode:
    """A point mass: `drift` stands for a node whose physics differs (another build, another CPU)."""

    action_dim = 2

    def __init__(self, drift: float = 0.0, drift_from: int = 5) -> None:
        self.x, self.v, self.t, self.drift, self.drift_from = np.zeros(2), np.zeros(2), 0, drift, drift_from

    def physics_state(self) -> np.ndarray:
        return np.concatenate([self.x, self.v])

    def apply(self, action: np.ndarray) -> None:
        self.t += 1
        self.v = self.v + 0.1 * action + (self.drift if self.t >= self.drift_from else 0.0)
        self.x = self.x + 0.1 * self.v

    def video_frame(self) -> np.ndarray:
        frame = np.zeros((8, 8, 3), np.uint8)
        frame[..., 0] = int(abs(self.x[0]) * 100) % 255
        return frame


ACTIONS = np.tile(np.array([[1.0, -0.5]], np.float32), (4, 1))


def _canary(run: Path, fingerprint: str, **episode: Any) -> canary.CanaryVerdict:
    return canary.run_canary(run, Episode(**episode), ACTIONS, "T", 0, fingerprint)


def test_first_canary_is_the_reference_and_an_identical_node_matches(tmp_path: Path) -> None:
    first = _canary(tmp_path, "aaaaaaaaaaaaaaaa")
    assert first.is_reference and first.match and "reference" in first.text()
    again = _canary(tmp_path, "bbbbbbbbbbbbbbbb")
    assert again.match and not again.is_reference and again.frame_psnr == math.inf
    assert again.sha256 == first.sha256 and again.steps == canary.CANARY_STEPS
    verdicts = canary.read_verdicts(tmp_path)
    assert set(verdicts) == {"aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"}
    assert sorted(p.name for p in (tmp_path / "canary").iterdir()) == sorted(
        ["aaaaaaaaaaaaaaaa.json", "bbbbbbbbbbbbbbbb.json", "reference.npz"]
    )  # no temporary file left


def test_a_node_that_simulates_differently_is_named_with_its_first_difference(tmp_path: Path) -> None:
    _canary(tmp_path, "aaaaaaaaaaaaaaaa")
    odd = _canary(tmp_path, "cccccccccccccccc", drift=1e-9, drift_from=5)
    assert not odd.match and odd.first_difference == 5  # step 5's action is the first that drifts
    assert 0 < odd.max_state_diff < 1e-6
    assert "DIFFERS" in odd.text() and "step 5" in odd.text()
    stored = json.loads((tmp_path / "canary" / "cccccccccccccccc.json").read_text())
    assert stored["match"] is False and stored["first_difference"] == 5


def test_the_reference_is_created_once(tmp_path: Path) -> None:
    verdicts = [_canary(tmp_path, f"{i:016x}", drift=0.1 * i) for i in range(3)]
    assert [v.is_reference for v in verdicts] == [True, False, False]
    assert all(v.reference_sha256 == verdicts[0].sha256 for v in verdicts)


def test_each_canary_step_is_told_so_the_workers_stall_watch_sees_it_move(tmp_path: Path) -> None:
    """The canary ran 20 steps with no progress written: a short STALL_TIMEOUT killed every sim
    process before its first episode (tests/worker/test_worker_stopped.py caught it)."""
    told: list[int] = []
    canary.run_canary(tmp_path, Episode(), ACTIONS, "T", 0, "aaaaaaaaaaaaaaaa", on_step=told.append)
    assert told == list(range(1, canary.CANARY_STEPS + 1))
