"""harness.episode.actions: smoothing arithmetic pinned on hand-computed numbers, chunking, ee6d ⇄ pose."""

from __future__ import annotations

import os

import numpy as np
import pytest

from harness.config.settings import Settings
from harness.episode import actions
from harness.episode.actions import ChunkRunner


def chunk(first: float, n: int = 3, dim: int = 10) -> np.ndarray:
    """Chunk whose row i is `first + i` everywhere (grippers included)."""
    return np.array([[first + i] * dim for i in range(n)], dtype=np.float32)


def test_first_chunk_is_not_smoothed_and_whole_chunk_runs() -> None:
    runner = ChunkRunner(action_dim=10, alpha=0.7)
    np.testing.assert_array_equal(runner.plan(chunk(1.0)), chunk(1.0))


def test_smoothing_single_arm_hand_computed() -> None:
    runner = ChunkRunner(action_dim=10, alpha=0.7, smooth_rot=True)
    runner.plan(chunk(1.0))  # last executed: all 3.0
    out = runner.plan(chunk(10.0))
    # 0.7 * 3 + 0.3 * 10 = 5.1 on dims 0..8; gripper 9 raw (10); later rows untouched.
    np.testing.assert_allclose(out[0, :9], 5.1, rtol=1e-6)
    assert out[0, 9] == 10.0
    np.testing.assert_array_equal(out[1:], chunk(10.0)[1:])


def test_smooth_rot_off_only_xyz() -> None:
    runner = ChunkRunner(action_dim=10, alpha=0.5, smooth_rot=False)
    runner.plan(chunk(0.0, n=1))  # last executed: 0
    out = runner.plan(chunk(4.0, n=1))
    np.testing.assert_allclose(out[0], [2, 2, 2, 4, 4, 4, 4, 4, 4, 4])


def test_dual_arm_dims_and_grippers() -> None:
    assert list(actions.smoothed_dims(20, True)) == [*range(9), *range(10, 19)]
    assert list(actions.smoothed_dims(20, False)) == [0, 1, 2, 10, 11, 12]
    runner = ChunkRunner(action_dim=20, alpha=0.25)
    runner.plan(np.full((1, 20), 8.0, np.float32))
    out = runner.plan(np.zeros((2, 20), np.float32))
    expected = np.full(20, 2.0)  # 0.25 * 8 + 0.75 * 0
    expected[[9, 19]] = 0.0
    np.testing.assert_allclose(out[0], expected)
    np.testing.assert_array_equal(out[1], 0.0)


def test_exec_actions_receding_horizon_carries_last_executed() -> None:
    runner = ChunkRunner(action_dim=10, exec_actions=2, alpha=0.5)
    out = runner.plan(chunk(1.0, n=5))
    np.testing.assert_array_equal(out, chunk(1.0, n=5)[:2])  # executed 1.0 and 2.0
    out = runner.plan(chunk(10.0, n=5))
    assert len(out) == 2
    np.testing.assert_allclose(out[0, :9], 0.5 * 2.0 + 0.5 * 10.0)


def test_reset_forgets_previous_episode() -> None:
    runner = ChunkRunner(action_dim=10, alpha=0.7)
    runner.plan(chunk(1.0))
    runner.reset()
    np.testing.assert_array_equal(runner.plan(chunk(10.0)), chunk(10.0))


def test_fake_proprio() -> None:
    real = np.arange(10, dtype=np.float32)
    runner = ChunkRunner(action_dim=10, fake_proprio=True)
    np.testing.assert_array_equal(runner.proprio(real), real)  # nothing commanded yet
    runner.plan(chunk(5.0, n=2))
    np.testing.assert_array_equal(runner.proprio(real), np.full(10, 6.0))
    assert ChunkRunner(action_dim=10).proprio(real) is not None


def test_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {
        "EXEC_ACTIONS": "20",
        "ACTION_SMOOTH": "0.7",
        "SMOOTH_ROT": "0",
        "FAKE_PROPRIO": "1",
    }.items():
        monkeypatch.setenv(k, v)
    runner = ChunkRunner.from_settings(Settings.from_env(os.environ), 20)
    assert (runner.exec_actions, runner.alpha, runner.smooth_rot, runner.fake_proprio) == (
        20,
        0.7,
        False,
        True,
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"action_dim": 7}, "action_dim 7"),
        ({"action_dim": 10, "alpha": 1.5}, "ACTION_SMOOTH"),
        ({"action_dim": 10, "exec_actions": -1}, "EXEC_ACTIONS"),
    ],
)
def test_bad_settings(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ChunkRunner(**kwargs)


def test_bad_chunk_shape() -> None:
    with pytest.raises(ValueError, match="expected"):
        ChunkRunner(action_dim=10).plan(np.zeros((3, 20)))


def test_euler_convention_is_intrinsic_xyz() -> None:
    # 90° about X, then about the *new* Y: the static (sxyz) reading would give a different matrix.
    rot = actions.matrix_from_euler_xyz(np.array([np.pi / 2, np.pi / 2, 0.0]))
    rx = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]])
    ry = np.array([[0, 0, 1], [0, 1, 0], [-1, 0, 0]])
    np.testing.assert_allclose(rot, rx @ ry, atol=1e-12)
    assert not np.allclose(rot, ry @ rx)
    rz = actions.matrix_from_euler_xyz(np.array([0.0, 0.0, np.pi / 2]))
    np.testing.assert_allclose(rz @ [1, 0, 0], [0, 1, 0], atol=1e-12)  # x → y


def test_euler_matches_maniskill_reference() -> None:
    torch = pytest.importorskip("torch")
    rc = pytest.importorskip("mani_skill.utils.geometry.rotation_conversions")
    euler = np.array([[0.3, -0.5, 1.2], [-2.0, 0.4, 0.1]])
    ref = rc.euler_angles_to_matrix(torch.tensor(euler), "XYZ").numpy()
    np.testing.assert_allclose(actions.matrix_from_euler_xyz(euler), ref, atol=1e-12)
    np.testing.assert_allclose(actions.euler_xyz_from_matrix(ref), euler, atol=1e-9)


def test_rot6d_round_trip_and_gram_schmidt() -> None:
    rot = actions.matrix_from_euler_xyz(np.array([0.3, -0.5, 1.2]))
    r6 = actions.rot6d_from_matrix(rot)
    np.testing.assert_allclose(r6, [*rot[:, 0], *rot[:, 1]])
    np.testing.assert_allclose(actions.matrix_from_rot6d(r6), rot, atol=1e-12)
    noisy = actions.matrix_from_rot6d(r6 * 2.0 + np.array([0, 0, 0, 0.01, 0, 0]))
    np.testing.assert_allclose(noisy @ noisy.T, np.eye(3), atol=1e-12)
    assert np.isclose(np.linalg.det(noisy), 1.0)
    with pytest.raises(ValueError, match="parallel"):
        actions.matrix_from_rot6d(np.array([1.0, 0, 0, 2.0, 0, 0]))


def test_ee6d_pose_euler_dual_arm() -> None:
    euler = np.array([0.1, 0.2, 0.3])
    arm = actions.pose_to_ee6d(np.array([1.0, 2.0, 3.0]), actions.matrix_from_euler_xyz(euler), 0.04)
    assert arm.shape == (10,) and arm.dtype == np.float32
    pose = actions.ee6d_to_pose_euler(np.concatenate([arm, arm]))
    np.testing.assert_allclose(pose[:7], [1, 2, 3, *euler, 0.04], atol=1e-6)
    np.testing.assert_allclose(pose[7:], pose[:7])
