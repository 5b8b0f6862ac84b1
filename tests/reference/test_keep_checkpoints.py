"""`train_reference_policy.py --keep-checkpoints`: every save is also kept as
`<out>/checkpoints/step_<N>/`, a complete checkpoint the reference policy's creation check accepts
(what orchestrators/watch.sh evaluates), and the flag may change between the pieces of one run."""

from __future__ import annotations

from pathlib import Path

import yaml
from test_training import make_data, train

from harness.config.checkpoint import checkpoint_problems
from support.wirekit import REPO


def test_kept_checkpoints_are_complete_and_the_flag_leaves_a_resume_alone(
    tmp_path: Path, model_py: str
) -> None:
    data = make_data(tmp_path / "data")
    first = train(model_py, data, tmp_path / "out", "--stop-after", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    assert not (tmp_path / "out" / "checkpoints").exists()  # off unless asked
    second = train(model_py, data, tmp_path / "out", "--keep-checkpoints")
    assert second.returncode == 0 and "resuming" in second.stdout, second.stderr[-3000:]
    kept = sorted(p.name for p in (tmp_path / "out" / "checkpoints").iterdir())
    assert kept == ["step_4"]  # the save after the resume (save-every 2, 4 steps)
    needs = yaml.safe_load((REPO / "policy" / "reference" / "deploy_policy.yml").read_text())[
        "needs_checkpoint"
    ]
    ckpt = tmp_path / "out" / "checkpoints" / "step_4"
    assert checkpoint_problems("kept", ckpt, needs) == []
    final = (tmp_path / "out" / "final" / "model.safetensors").read_bytes()
    assert (ckpt / "model.safetensors").read_bytes() == final  # the last save is the final model
