"""ACTION_CONVENTION on the real ManiSkill env: each convention drives the robot (the expert's PickCube
trajectory, expressed in it, succeeds), a single step lands exactly where the convention says, and a
policy that emits another convention is refused at hello, naming both."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from harness.config.manifest import ManifestError
from harness.config.settings import Settings
from harness.episode.actions import (
    ChunkRunner,
    euler_xyz_from_matrix,
    matrix_from_euler_xyz,
    matrix_from_rot6d,
)
from harness.episode.bench import ExpertResult, load_benchmark
from harness.episode.bench.conventions import CONVENTIONS, get_convention
from harness.episode.bench.maniskill_env import matrix_from_quat_wxyz
from harness.launch.newrun import check_runnable
from harness.model.policyload import load_policy
from harness.model.session import Session
from harness.wire import protocol
from harness.wire.errors import WireError

ROOT = Path(__file__).resolve().parents[2]
SEED = 0  # the first seed of seeds/maniskill/PickCube/table_clean.txt


@pytest.fixture(scope="module")
def expert() -> ExpertResult:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACTION_CONVENTION", "ee6d")
        result = load_benchmark("maniskill", Settings.from_env(os.environ)).expert("PickCube", "clean", SEED)
    assert result.solved and result.joint_targets is not None
    return result


def _episode(mp: pytest.MonkeyPatch, convention: str):
    mp.setenv("ACTION_CONVENTION", convention)
    return load_benchmark("maniskill", Settings.from_env(os.environ)).make_episode(
        "PickCube", "clean", SEED, render=False
    )


@pytest.fixture
def mp() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _delta_towards(proprio: np.ndarray, target_ee6d: np.ndarray) -> np.ndarray:
    """An ee_delta action from the current TCP pose (xyz, XYZ Euler, grip) to an ee6d target."""
    now, goal = matrix_from_euler_xyz(proprio[3:6]), matrix_from_rot6d(target_ee6d[3:9])
    return np.concatenate(
        [target_ee6d[:3] - proprio[:3], euler_xyz_from_matrix(goal @ now.T), target_ee6d[9:]]
    )


@pytest.mark.sim
@pytest.mark.parametrize("convention", ["ee6d", "ee_delta", "joint_pos"])
def test_the_experts_trajectory_in_each_convention_solves_pickcube(
    convention: str, expert: ExpertResult, mp: pytest.MonkeyPatch
) -> None:
    episode = _episode(mp, convention)
    try:
        assert episode.action_dim == CONVENTIONS[convention].arm_dim
        assert episode.spec["action"] == convention
        assert episode.proprio().shape == (episode.action_dim,)
        solved_at = None
        for step, (joints, pose) in enumerate(zip(expert.joint_targets, expert.actions, strict=True)):
            if convention == "joint_pos":
                action = joints
            elif convention == "ee6d":
                action = pose
            else:  # closed loop, as a delta policy runs: from where the TCP is now to the expert's target
                action = _delta_towards(episode.proprio(), pose)
            episode.apply(action)
            if episode.success():
                solved_at = step + 1
                break
        assert solved_at is not None, f"{convention}: the expert's trajectory did not solve PickCube"
    finally:
        episode.close()


@pytest.mark.sim
def test_one_ee_delta_step_targets_the_current_pose_moved_by_the_delta(mp: pytest.MonkeyPatch) -> None:
    episode = _episode(mp, "ee_delta")
    try:
        before = episode.proprio()
        delta = np.array([0.02, -0.01, 0.03, 0.0, 0.0, 0.05, -1.0])  # m, rad (XYZ Euler), close
        episode.apply(delta)
        arm = episode.env.agent.controller.controllers["arm"]
        target = arm._target_pose  # the controller's pose goal, robot-root frame
        np.testing.assert_allclose(target.p[0].numpy(), before[:3] + delta[:3], atol=1e-5)
        expected = matrix_from_euler_xyz(delta[3:6]) @ matrix_from_euler_xyz(before[3:6])
        np.testing.assert_allclose(matrix_from_quat_wxyz(target.q[0].numpy()), expected, atol=1e-5)
        gripper = episode.env.agent.controller.controllers["gripper"]
        np.testing.assert_allclose(gripper._target_qpos[0].numpy(), -0.01, atol=1e-6)  # -1 = closed
    finally:
        episode.close()


@pytest.mark.sim
def test_one_joint_pos_step_targets_the_joints_and_holding_proprio_stays_put(mp: pytest.MonkeyPatch) -> None:
    episode = _episode(mp, "joint_pos")
    try:
        start = episode.proprio()
        for _ in range(5):  # the hold policy's action: the proprio echoed
            episode.apply(episode.proprio())
        np.testing.assert_allclose(episode.proprio(), start, atol=2e-3)
        goal = start.copy()
        goal[0] += 0.1
        episode.apply(goal)
        arm = episode.env.agent.controller.controllers["arm"]
        np.testing.assert_allclose(arm._target_qpos[0].numpy(), goal[:7], atol=1e-6)
        assert episode.proprio()[7] == pytest.approx(1.0, abs=1e-3)  # +1 = open, as the reset left it
    finally:
        episode.close()


def test_smoothing_touches_no_gripper_in_any_convention() -> None:
    assert list(get_convention("joint_pos").smoothed_dims(1, True)) == list(range(7))
    assert list(get_convention("ee_delta").smoothed_dims(2, False)) == [0, 1, 2, 7, 8, 9]
    assert list(get_convention("ee6d").smoothed_dims(1, True)) == list(range(9))
    joint_pos = get_convention("joint_pos")
    runner = ChunkRunner(8, alpha=0.5, smoothed=lambda smooth_rot: joint_pos.smoothed_dims(1, smooth_rot))
    runner.plan(np.zeros((1, 8)))
    first = runner.plan(np.ones((2, 8)))[0]
    np.testing.assert_allclose(first, [0.5] * 7 + [1.0])


def test_an_unknown_convention_is_refused_naming_the_knob(mp: pytest.MonkeyPatch) -> None:
    mp.setenv("ACTION_CONVENTION", "ee_quat")
    with pytest.raises(ValueError, match=r"ACTION_CONVENTION='ee_quat'.*ee6d, ee_delta, joint_pos"):
        load_benchmark("maniskill", Settings.from_env(os.environ))


def test_a_policy_emitting_another_convention_is_refused_at_hello_naming_both() -> None:
    replay = load_policy("replay")  # its yml: action_convention: ee6d
    assert replay.spec["action"] == ["ee6d"]
    session = Session(replay, token=None, reply_token=None)
    client = {"action_dim": 10, "action": "ee_delta", "cameras": []}
    hello = protocol.hello(client, ["json"])
    refused = r"policy emits \['ee6d'\].*sim applies 'ee_delta' \(ACTION_CONVENTION\)"
    with pytest.raises(WireError, match=refused):
        session.handle(hello)
    hold = load_policy("hold")  # the floor: emits whichever convention the sim applies
    accepted = Session(hold, token=None, reply_token=None).handle(
        protocol.hello({"action_dim": 8, "action": "joint_pos", "cameras": []}, ["json"])
    )
    assert accepted["spec"]["action"] == "any"
    with pytest.raises(WireError, match="action_convention"):  # the client side checks the reply too
        protocol.check_specs(replay.spec, client)


def test_run_creation_refuses_a_policy_that_does_not_state_the_convention(
    tmp_path: Path, mp: pytest.MonkeyPatch
) -> None:
    queue = tmp_path / "queue.txt"
    queue.write_text("table PickCube\n")
    env = {"POLICY": "replay", "ACTION_CONVENTION": "ee_delta"}
    mp.setenv("ACTION_CONVENTION", "ee_delta")  # the benchmark reads its knobs from the environment
    with pytest.raises(ManifestError, match=r"policy emits \['ee6d'\].*sim applies 'ee_delta'"):
        check_runnable(queue, env)
    check_runnable(queue, {**env, "POLICY_ARGS": "action_convention=[ee_delta]"})  # overrides count
    check_runnable(queue, {**env, "POLICY": "hold"})  # the floor fits any convention


def test_precollect_refuses_a_convention_its_ee6d_banks_cannot_hold(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), ACTION_CONVENTION="joint_pos")
    argv = [sys.executable, str(ROOT / "scripts" / "precollect_eval_seeds.py"), "--root", str(tmp_path / "b")]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2
    assert "ACTION_CONVENTION='joint_pos': seed banks hold ee6d traces" in result.stderr
    assert not (tmp_path / "b").exists()
