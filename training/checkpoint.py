"""A training checkpoint on disk: what `policy/reference` loads, plus the model card and the state to resume.

Each checkpoint dir is complete on its own (config.json + model.safetensors, the tokenizer, the data
card, a README.md model card) and is written beside its destination, then renamed into place, so an
interrupted save never leaves a half-written checkpoint where the wrapper or a resume would read it.
`<out>/last/` also holds the trainer's state (`STATE`: step, optimizer, losses, arguments).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from policy.reference.modeling import ReferenceVLAModel
from training.datacard import CARD_NAME, write_card

STATE = "trainer_state.pt"


def save_checkpoint(
    dest: Path,
    model: ReferenceVLAModel,
    tokenizer: Any,
    card: dict[str, Any],
    info: dict[str, Any] | None = None,
    state: dict[str, Any] | None = None,
) -> None:
    """A complete checkpoint dir at `dest`: `info` goes into its model card, `state` (what a resume
    needs) into STATE."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_card(tmp / CARD_NAME, card)
    (tmp / "README.md").write_text(model_card(card, info or {}, model.config))
    if state is not None:
        torch.save(state, tmp / STATE)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def load_state(last: Path) -> dict[str, Any] | None:
    """The trainer state saved in `last`, or None when there is none to resume from."""
    path = last / STATE
    if not path.is_file():
        return None
    return torch.load(path, weights_only=False)


def model_line(config: Any) -> str:
    """What the model is, from its config: the model card's line (its input and loss settings)."""
    keypoints = "spatial-softmax keypoints" if getattr(config, "keypoints", False) else "no keypoints"
    return (
        f"- Model: {config.image_res} px primary camera ({config.image_res // 16}x{config.image_res // 16} "
        f"image tokens), {keypoints}, d_model {config.d_model}, {config.n_layers} layers, a "
        f"{config.num_actions}-action chunk; gripper loss weight {config.gripper_loss_weight:g}."
    )


def model_card(card: dict[str, Any], info: dict[str, Any], config: Any) -> str:
    """The checkpoint's README.md: the data it learned from (the data card), the model and how it
    was trained."""
    demos = card["demos"]
    rows = "\n".join(f"| {t} | {len(demos[t])} | {card['samples'][t]} |" for t in card["tasks"])
    return f"""# reference policy checkpoint

A small language-conditioned visuomotor policy (policy/reference/modeling.py, `model_type: reference_vla`)
trained by behaviour cloning on ManiSkill3 expert demos (scripts/train_reference_policy.py).

- Data: {card["num_demos"]} expert demos (scripts/collect_training_data.py), seeds in
  [{card["seed_range"][0]}, {card["seed_range"][1]}) (disjoint from the eval bank seeds/maniskill),
  `{card["scene"]}_{card["bench_config"]}`, camera `{card["camera"]}` rendered at {card["render_size"]} px
  (`{card["shader"]}` shader), area-downsampled to {card["image_res"]} px then to the model's resolution.
{model_line(config)}
- Training: step {info.get("step")} of {info.get("steps")}, batch {info.get("batch")}, lr {info.get("lr")},
  seed {info.get("seed")}; final L1 loss (normalised targets, mean of the last 100 steps)
  {info.get("loss", float("nan")):.4f}; {info.get("wall_min", 0):.1f} min of training on
  {info.get("threads")} CPU threads.

| task | demos | samples |
| --- | --- | --- |
{rows}
"""
