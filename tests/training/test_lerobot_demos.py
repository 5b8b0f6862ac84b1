"""The expert demos of the shipped LeRobot policy (training/lerobot_demos.py): a training seed an
eval could draw is refused, naming it; a recorded episode is what LeRobot's env returns for its seed,
and loads back with `LeRobotDataset`."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from support.wirekit import REPO
from training.lerobot_demos import FIRST_TRAINING_SEED, EvalSeedOverlap, check_training_seeds

TASK = "button-press-topdown-v3"


def test_a_seed_below_the_training_range_is_refused_by_name(tmp_path: Path) -> None:
    check_training_seeds([TASK], [FIRST_TRAINING_SEED, FIRST_TRAINING_SEED + 7], tmp_path)
    with pytest.raises(EvalSeedOverlap, match=r"training seed 999999 is below 1_000_000"):
        check_training_seeds([TASK], [FIRST_TRAINING_SEED, 999_999], tmp_path)
    with pytest.raises(EvalSeedOverlap, match=r"training seed 0 "):
        check_training_seeds([TASK], [0], tmp_path)


def test_a_seed_in_a_metaworld_seed_bank_is_refused_by_name(tmp_path: Path) -> None:
    bank = tmp_path / TASK / "metaworld_clean.txt"  # harness/config/seedbank.py's layout
    bank.parent.mkdir()
    bank.write_text("3 1000005 17\n")
    check_training_seeds(["drawer-close-v3"], [1_000_005], tmp_path)  # another task's bank
    with pytest.raises(
        EvalSeedOverlap, match=re.escape(f"training seed 1000005 of {TASK} is in the eval seed bank {bank}")
    ):
        check_training_seeds([TASK], [1_000_004, 1_000_005], tmp_path)


def test_the_shipped_seeds_folder_has_no_bank_holding_a_training_seed() -> None:
    check_training_seeds(
        ["drawer-close-v3", TASK, "window-close-v3"], range(1_000_000, 1_000_100), REPO / "seeds"
    )


RECORD_AND_REPLAY = r"""
import sys
from pathlib import Path
import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.envs.metaworld import MetaworldEnv, TASK_DESCRIPTIONS
from policy.lerobot.seeded_metaworld import honor_seeds
from training.lerobot_demos import REPO_ID, record

root, task, seed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
recorded = record(root, [task], 1, first_seed=seed, seeds_root=root.parent / "no-banks")
assert recorded.episodes == {task: [seed]}, recorded
data = LeRobotDataset(REPO_ID, root=root)
assert data.num_episodes == 1 and len(data) == recorded.frames, (data.num_episodes, len(data))
honor_seeds()
env = MetaworldEnv(task, obs_type="pixels_agent_pos")
obs, _ = env.reset(seed=seed)
for i in range(len(data)):
    frame = data[i]
    image = np.round(frame["observation.image"].numpy().transpose(1, 2, 0) * 255).astype(np.uint8)
    assert np.array_equal(image, obs["pixels"]), f"frame {i}: image differs"
    assert np.array_equal(frame["observation.state"].numpy(), obs["agent_pos"].astype(np.float32)), i
    assert frame["task"] == TASK_DESCRIPTIONS[task]
    action = frame["action"].numpy()
    assert action.dtype == np.float32 and np.all(np.abs(action) <= 1)
    obs, _, terminated, _, info = env.step(action)
    assert info["is_success"] == (i == len(data) - 1), f"frame {i}: success {info['is_success']}"
print("replayed", len(data))
"""


def test_a_recorded_episode_is_what_lerobots_env_returns_for_its_seed(tmp_path: Path) -> None:
    python = os.environ.get("LEROBOT_PY") or str(REPO / "envs" / "lerobot" / "bin" / "python")
    if not Path(python).exists():
        pytest.skip("LEROBOT_PY env not installed")
    env = {**os.environ, "PYTHONPATH": str(REPO), "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    args = [python, "-c", RECORD_AND_REPLAY, str(tmp_path / "demos"), TASK, str(FIRST_TRAINING_SEED + 3)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "replayed" in done.stdout


def test_a_failed_export_keeps_the_shipped_checkpoint(tmp_path: Path) -> None:
    """scripts/train_lerobot_policy.py --export-only with nothing trained: one error line naming the
    missing weights, and the shipped checkpoint it would replace is left as it was."""
    python = Path(os.environ.get("LEROBOT_PY") or REPO / "envs" / "lerobot" / "bin" / "python")
    if not python.exists():
        pytest.skip(f"{python}: no LeRobot env (scripts/setup.sh makes it)")
    ship = tmp_path / "shipped"
    ship.mkdir()
    (ship / "model.safetensors").write_bytes(b"the shipped weights")
    argv = [str(python), str(REPO / "scripts" / "train_lerobot_policy.py"), "--export-only",
            "--out", str(tmp_path / "never-trained"), "--ship", str(ship)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode != 0 and "no model.safetensors to export" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert (ship / "model.safetensors").read_bytes() == b"the shipped weights"
