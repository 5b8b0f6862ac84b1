"""The ManiSkill adapter: conversions, determinism, collision (HSR), bad names.

Sim tests run without cameras (render=False, ~3-10 ms/step) except where rendering is the point;
the end-to-end test in test_simclient_e2e.py covers the rendered path.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from harness.config.settings import Settings
from harness.episode.actions import matrix_from_euler_xyz, matrix_from_rot6d, pose_to_ee6d
from harness.episode.bench import load_benchmark
from harness.episode.bench.maniskill_config import load_table
from harness.episode.bench.maniskill_env import matrix_from_quat_wxyz, quat_from_euler_xyz

ROOT = Path(__file__).resolve().parents[2]
BANK = ROOT / "seeds" / "maniskill"


def _rz(deg: float) -> np.ndarray:
    return matrix_from_euler_xyz(np.deg2rad([0.0, 0.0, deg]))


@pytest.mark.parametrize(
    ("quat", "matrix"),
    [
        ([1, 0, 0, 0], np.eye(3)),
        ([np.cos(np.pi / 4), 0, 0, np.sin(np.pi / 4)], [[0, -1, 0], [1, 0, 0], [0, 0, 1]]),  # +90° about z
        ([0, 1, 0, 0], [[1, 0, 0], [0, -1, 0], [0, 0, -1]]),  # 180° about x: Panda's TCP pointing down
    ],
)
def test_quaternion_to_matrix_on_known_rotations(quat: list[float], matrix: list[list[float]]) -> None:
    np.testing.assert_allclose(matrix_from_quat_wxyz(quat), matrix, atol=1e-12)


def test_euler_quaternion_and_ee6d_agree() -> None:
    angles = np.array([0.3, -1.1, 2.5])
    from_quat = matrix_from_quat_wxyz(quat_from_euler_xyz(angles))
    np.testing.assert_allclose(from_quat, matrix_from_euler_xyz(angles), atol=1e-12)
    ee6d = pose_to_ee6d(np.zeros(3), from_quat, 1.0)
    np.testing.assert_allclose(matrix_from_rot6d(ee6d[3:9]), from_quat, atol=1e-6)


def test_bad_names_are_clear_errors() -> None:
    table = load_table()
    with pytest.raises(KeyError, match=r"unknown ManiSkill task 'NoSuchTask'.*PickCube"):
        table.task("NoSuchTask")
    with pytest.raises(KeyError, match=r"unknown BENCH_CONFIG 'dirty'.*clean"):
        table.level("dirty")
    with pytest.raises(ValueError, match=r"module\.path:ClassName"):
        load_benchmark("not-a-spec", Settings.from_env(os.environ))
    with pytest.raises(ValueError, match="cannot load"):
        load_benchmark("harness.nowhere:Bench", Settings.from_env(os.environ))


def test_every_task_has_a_generous_step_limit_and_an_instruction() -> None:
    for task in load_table().tasks.values():
        assert task.step_limit >= 100 and len(task.instruction.split()) >= 4


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("maniskill", Settings.from_env(os.environ))


def _trace(task: str, task_config: str, seed: int) -> np.ndarray:
    with np.load(BANK / task / f"{task_config}.traces.npz") as npz:
        return npz[f"seed{seed}"]


def _run(bench, task: str, config: str, seed: int, actions: np.ndarray):
    episode = bench.make_episode(task, config, seed, render=False)
    try:
        success_at = None
        for step, action in enumerate(actions, start=1):
            episode.apply(action)
            if success_at is None and episode.success():
                success_at = step
        return success_at, episode.collided(), episode.state()
    finally:
        episode.close()


@pytest.mark.sim
@pytest.mark.parametrize("config", ["clean", "clutter3"])
def test_same_seed_and_actions_give_the_same_outcome_and_state(bench, config: str) -> None:
    actions = _trace("PickCube", f"table_{config}", 0)
    first = _run(bench, "PickCube", config, 0, actions)
    second = _run(bench, "PickCube", config, 0, actions)
    assert first[0] is not None and first[:2] == second[:2]
    np.testing.assert_array_equal(first[2], second[2])


@pytest.mark.sim
def test_commanded_ee6d_pose_is_reached(bench) -> None:
    """The ee6d → pd_ee_pose path, frames included: proprio converges to a commanded rotated pose."""
    episode = bench.make_episode("PickCube", "clean", 3, render=False)
    try:
        start = episode.proprio()
        rot = matrix_from_rot6d(start[3:9]) @ _rz(30.0)
        target = pose_to_ee6d(start[:3] + np.array([0.05, -0.05, 0.05]), rot, 1.0)
        for _ in range(25):
            episode.apply(target)
        now = episode.proprio()
        np.testing.assert_allclose(now[:3], target[:3], atol=0.005)
        angle = np.degrees(np.arccos(np.clip((np.trace(matrix_from_rot6d(now[3:9]).T @ rot) - 1) / 2, -1, 1)))
        assert angle < 1.0
        assert not episode.collided()
    finally:
        episode.close()


def _press_down(bench, config: str, seed: int, xy_of) -> tuple[bool, str | None]:
    episode = bench.make_episode("PickCube", config, seed, render=False)
    try:
        start = episode.proprio()
        xy = xy_of(episode)
        for z in np.linspace(start[2], -0.05, 40):
            episode.apply(np.concatenate([[xy[0], xy[1], z], start[3:9], [-1.0]]).astype(np.float32))
        return episode.collided(), episode.collision_detail()
    finally:
        episode.close()


@pytest.mark.sim
def test_scripted_collision_with_table_and_distractor(bench) -> None:
    """Driving the closed gripper through the table top, or onto a distractor, is a collision."""
    collided, detail = _press_down(bench, "clean", 0, lambda ep: ep.proprio()[:2] + np.array([0.0, 0.15]))
    assert collided and "table-workspace" in detail

    def distractor_xy(ep) -> np.ndarray:
        world = ep.env.distractors[0].pose.p[0, :2].numpy()
        return world - ep.env.agent.robot.pose.p[0, :2].numpy()  # robot-root frame

    collided, detail = _press_down(bench, "clutter3", 0, distractor_xy)
    assert collided and "distractor" in detail


@pytest.mark.sim
def test_clean_grasp_is_a_hard_success(bench) -> None:
    """The expert's PickCube grasp touches only the cube: success without collision."""
    success_at, collided, _ = _run(bench, "PickCube", "clean", 1, _trace("PickCube", "table_clean", 1))
    assert success_at is not None and not collided


@pytest.mark.sim
def test_two_arm_task_takes_20d_ee6d_and_holds_still(bench) -> None:
    episode = bench.make_episode("TwoRobotPickCube", "clean", 0, render=False)
    try:
        assert episode.action_dim == 20 and episode.spec["arms"] == 2
        start = episode.proprio()
        for _ in range(5):
            episode.apply(start)
        np.testing.assert_allclose(
            episode.proprio()[[0, 1, 2, 10, 11, 12]], start[[0, 1, 2, 10, 11, 12]], atol=2e-3
        )
        assert not episode.collided()
    finally:
        episode.close()
