"""Training the reference policy (the `training` package, scripts/train_reference_policy.py) on a tiny
made-up data set: a run in pieces ends byte-identical to one run, its checkpoint is one the deployed
wrapper loads, and a setting no run could use is refused before any data is read."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np

from support.wirekit import REPO

TASKS = ("PushCube", "PullCube")
STEPS = 4  # a few optimizer steps of batch 4: seconds on the CPU


def make_data(root: Path, demos: int = 2, length: int = 6) -> Path:
    """A collector-shaped data dir (data_card.json + episodes/<task>/seed<N>.npz) of random demos."""
    rng = np.random.default_rng(0)
    for task in TASKS:
        for seed in range(demos):
            path = root / "episodes" / task / f"seed{seed}.npz"
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(
                path, images=rng.integers(0, 255, (length, 96, 96, 3), dtype=np.uint8),
                proprio=rng.normal(size=(length, 10)).astype(np.float32),
                goal=rng.normal(size=(length, 3)).astype(np.float32),
                trace=rng.normal(size=(length, 10)).astype(np.float32),
            )  # fmt: skip
    card = {
        "seed_range": [0, demos], "tasks": list(TASKS), "bench_config": "clean", "scene": "table",
        "demos": {t: list(range(demos)) for t in TASKS}, "num_demos": demos * len(TASKS),
        "samples": {t: demos * length for t in TASKS}, "image_res": 96, "camera": "base_camera",
        "render_size": 96, "shader": "default",
    }  # fmt: skip
    (root / "data_card.json").write_text(json.dumps(card))
    return root


def train(model_py: str, data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [model_py, str(REPO / "scripts" / "train_reference_policy.py"), "--data", str(data), "--out",
           str(out), "--steps", str(STEPS), "--batch", "4", "--save-every", "2", "--log-every", "1",
           "--threads", "1", *extra]  # fmt: skip
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)


def test_training_in_pieces_ends_where_one_run_ends(tmp_path: Path, model_py: str) -> None:
    data = make_data(tmp_path / "data")
    whole = train(model_py, data, tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    first = train(model_py, data, tmp_path / "pieces", "--stop-after", "2")
    assert first.returncode == 0 and "stopped after step 2" in first.stdout, first.stderr[-3000:]
    assert not (tmp_path / "pieces" / "final").exists()
    second = train(model_py, data, tmp_path / "pieces")
    assert second.returncode == 0 and "resuming" in second.stdout, second.stderr[-3000:]
    for name in ("final", "early"):
        a = (tmp_path / "whole" / name / "model.safetensors").read_bytes()
        assert a == (tmp_path / "pieces" / name / "model.safetensors").read_bytes(), name
    losses = json.loads((tmp_path / "whole" / "losses.json").read_text())
    assert len(losses) == STEPS and losses == json.loads((tmp_path / "pieces" / "losses.json").read_text())
    assert (tmp_path / "whole" / "loss_curve.png").stat().st_size > 0
    # the checkpoint is one the deployed wrapper loads and serves: a [1, 30, 10] chunk
    load = (
        "import sys, torch; from policy.reference.deploy_policy import get_model\n"
        "m = get_model({'ckpt_path': sys.argv[1], 'action_dim': 10, 'num_actions': 30})\n"
        "a = m.generate_actions('push the cube', torch.zeros(1, 96, 96, 3, dtype=torch.uint8),\n"
        "                       torch.zeros(1, 10), torch.zeros(1, 3))\n"
        "print(tuple(a.shape))\n"
    )
    ckpt = str(tmp_path / "whole" / "final")
    done = subprocess.run([model_py, "-c", load, ckpt], env={"PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=300, cwd=REPO)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "(1, 30, 10)", done.stderr[-3000:]


def test_a_resume_under_other_settings_is_refused(tmp_path: Path, model_py: str) -> None:
    data = make_data(tmp_path / "data")
    first = train(model_py, data, tmp_path / "out", "--stop-after", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    other = train(model_py, data, tmp_path / "out", "--lr", "0.5")
    assert other.returncode == 2, other.stderr[-3000:]
    assert "saved by a run with other arguments" in other.stderr and "Traceback" not in other.stderr


def test_a_stop_that_is_not_a_save_is_refused_before_training(tmp_path: Path, model_py: str) -> None:
    done = train(model_py, tmp_path / "no-data", tmp_path / "out", "--stop-after", "3")
    assert done.returncode == 2
    assert "--stop-after 3 is not a multiple of --save-every 2" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_the_gripper_weight_changes_the_loss_and_is_saved_with_the_checkpoint(
    tmp_path: Path, model_py: str
) -> None:
    data = make_data(tmp_path / "data")
    plain = train(model_py, data, tmp_path / "plain", "--steps", "2")
    weighted = train(model_py, data, tmp_path / "weighted", "--steps", "2", "--gripper-weight", "4")
    assert plain.returncode == 0 and weighted.returncode == 0, weighted.stderr[-3000:]
    config = json.loads((tmp_path / "weighted" / "final" / "config.json").read_text())
    assert config["gripper_loss_weight"] == 4.0
    first = [json.loads((tmp_path / name / "losses.json").read_text())[0] for name in ("plain", "weighted")]
    assert first[0] != first[1]  # same init and batch: only the weighting differs
    refused = train(model_py, data, tmp_path / "bad", "--gripper-weight", "0")
    assert refused.returncode == 2 and "--gripper-weight 0.0: need > 0" in refused.stderr


def test_keypoints_find_a_bright_spot_and_are_saved_with_the_checkpoint(
    tmp_path: Path, model_py: str
) -> None:
    """The spatial softmax puts a channel's keypoint on its peak; a trained checkpoint records the
    keypoints and image side it was trained with, and `--no-keypoints` trains the first model."""
    probe = (
        "import torch; from policy.reference.modeling import spatial_softmax\n"
        "f = torch.zeros(1, 2, 12, 12); f[0, 0, 2, 9] = 50.0; f[0, 1, 11, 0] = 50.0\n"
        "print(' '.join(f'{v:.3f}' for v in spatial_softmax(f, torch.tensor(1.0))[0].tolist()))\n"
    )
    done = subprocess.run([model_py, "-c", probe], env={"PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=300, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    x0, x1, y0, y1 = map(float, done.stdout.split())  # [x of each channel, y of each channel]
    step = 2 / 11
    assert (round(x0, 3), round(y0, 3)) == (round(-1 + 9 * step, 3), round(-1 + 2 * step, 3))
    assert (x1, y1) == (-1.0, 1.0)
    data = make_data(tmp_path / "data")
    for name, extra in (("kp", ()), ("plain", ("--no-keypoints", "--image-res", "64"))):
        assert train(model_py, data, tmp_path / name, "--steps", "2", *extra).returncode == 0
    configs = [json.loads((tmp_path / n / "final" / "config.json").read_text()) for n in ("kp", "plain")]
    assert [(c["keypoints"], c["image_res"]) for c in configs] == [(True, 96), (False, 64)]
    refused = train(model_py, data, tmp_path / "bad", "--image-res", "100")
    assert refused.returncode == 2 and "--image-res 100: need a multiple of 16 in 16..96" in refused.stderr
