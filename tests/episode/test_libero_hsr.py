"""HSR on LIBERO: the MuJoCo contact monitor in both directions, in-process on libero_object task 0,
init state 0. The oracle's clean pick-and-place is a hard success (no collision); the fingers pushed
down on an object that is not the task's is a collision naming that object. Two episodes, about
40 s of LIBERO on a quiet 2-core machine."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from harness.config.settings import Settings
from harness.episode.bench import load_benchmark
from harness.episode.bench.libero_contacts import COLLISION_FORCE_N
from policy.libero_oracle.pickplace import POS_SCALE, Plan, next_action, rotation

SUITE = "libero_object"
TASK = "pick up the alphabet soup and place it in the basket"
TASK_OBJECTS = ("alphabet_soup_1", "basket_1")


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("BENCH_PARAMS", "{image_size: 32, privileged_state: true}")
    monkeypatch.delenv("ACTION_CONVENTION", raising=False)
    benchmark = load_benchmark("libero", Settings.from_env(os.environ))
    yield benchmark
    benchmark.close_env()


def top_of(state: dict[str, Any], name: str) -> np.ndarray:
    """The centre of `name`'s collision box's top face, in world coordinates."""
    pose, box = np.asarray(state["objects"][name], np.float64), np.asarray(state["boxes"][name], np.float64)
    signs = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).T.reshape(-1, 3)
    corners = pose[:3] + (box[:3] + signs * box[3:]) @ rotation(pose[3:]).T
    centre = corners.mean(axis=0)
    return np.array([centre[0], centre[1], corners[:, 2].max()])


def shove(episode: Any, name: str, max_steps: int = 80) -> int:
    """Drive the closed fingers above `name`, then 3 cm down into its top; the steps it took."""
    for step in range(max_steps):
        state = episode.observe()["privileged_state"]
        top, eef = top_of(state, name), np.asarray(state["eef_pos"], np.float64)
        above = np.linalg.norm((top - eef)[:2]) > 0.01 or eef[2] > top[2] + 0.1
        target = top + np.array([0.0, 0.0, 0.08 if above and step < 40 else -0.03])
        move = np.clip(2.0 * (target - eef) / POS_SCALE, -1.0, 1.0)
        episode.apply(np.concatenate([move, np.zeros(3), [1.0]]))
        if episode.collided():
            return step + 1
    return max_steps


@pytest.mark.sim
def test_the_oracles_clean_grasp_is_no_collision_and_a_shove_of_another_object_is(bench: Any) -> None:
    clean = bench.make_episode(TASK, SUITE, 0)
    plan, steps = Plan(), 0
    while steps < clean.step_limit and not clean.success():
        clean.apply(next_action(clean.observe()["privileged_state"], plan))
        steps += 1
    assert clean.success(), f"the oracle failed init state 0 in {steps} steps"
    assert not clean.collided() and clean.collision_detail() is None, clean.collision_detail()

    pushed = bench.make_episode(TASK, SUITE, 0)
    state = pushed.observe()["privileged_state"]
    eef = np.asarray(state["eef_pos"])
    others = [name for name in state["objects"] if name not in TASK_OBJECTS]
    victim = min(others, key=lambda name: float(np.linalg.norm(top_of(state, name)[:2] - eef[:2])))
    shove(pushed, victim)
    assert pushed.collided(), f"pressing {victim} down did not count as a collision"
    detail = pushed.collision_detail()
    assert detail is not None and f"~ {victim}_main force=" in detail and detail.startswith("gripper0_")
    assert float(detail.rsplit("force=", 1)[1].rstrip("N")) > COLLISION_FORCE_N
