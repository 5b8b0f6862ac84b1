"""reference: the small visuomotor VLA trained from the expert (scripts/train_reference_policy.py).

The checkpoint dir is what training wrote: config.json + model.safetensors (`ReferenceVLAModel`,
registered with the Auto classes on import of policy.reference.modeling) and a word-level tokenizer.
Every file is checked before the model is built, so a missing or corrupt one is one error naming it,
raised by get_model: the model server refuses to start and no episode runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from policy.reference.features import downsample, goal_of
from policy.reference.modeling import ReferenceVLAConfig

REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


class ReferencePolicy:
    def __init__(self, usr_args: dict[str, Any]) -> None:
        ckpt = usr_args.get("ckpt_path")
        if not ckpt:
            raise ValueError("reference: needs a checkpoint dir (CKPT_NAME, e.g. reference)")
        path = Path(ckpt)
        check_checkpoint(path, int(usr_args["action_dim"]), int(usr_args["num_actions"]))
        torch.set_num_threads(int(usr_args.get("threads", 1)))
        self.noise_std = float(usr_args.get("noise_std", 0.0))
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:
            raise ValueError(f"{path / 'tokenizer.json'}: cannot load the tokenizer: {exc}") from None
        self.model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
        self.image_res = int(self.model.config.image_res)

    @torch.no_grad()
    def generate_actions(
        self, instruction: str, pixel_values: torch.Tensor, proprio: torch.Tensor, goal: torch.Tensor
    ) -> torch.Tensor:
        """[1, num_actions, action_dim] absolute ee6d (+ noise_std · N(0, 1), seeded by the server)."""
        tokens = self.tokenizer(
            [instruction], return_tensors="pt", truncation=True, max_length=self.model.config.max_text_len
        )
        image = torch.from_numpy(downsample(pixel_values[0].numpy(), self.image_res)).permute(2, 0, 1)
        actions = self.model.predict_actions(
            pixel_values=image[None].float() / 255.0, input_ids=tokens["input_ids"],
            attention_mask=tokens["attention_mask"], proprio=proprio, goal=goal,
        )  # fmt: skip
        if self.noise_std > 0:
            actions = actions + self.noise_std * torch.randn(actions.shape)
        return actions


def check_checkpoint(path: Path, action_dim: int, num_actions: int) -> None:
    """Refuse a checkpoint dir with a missing, unreadable or mismatched file, naming the file."""
    if not path.is_dir():
        raise ValueError(f"reference: checkpoint {path} is not a directory")
    for name in REQUIRED:
        if not (path / name).is_file():
            raise ValueError(f"{path / name}: missing (a reference checkpoint needs {', '.join(REQUIRED)})")
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path / 'config.json'}: not valid JSON: {exc}") from None
    if config.get("model_type") != ReferenceVLAConfig.model_type:
        raise ValueError(
            f"{path / 'config.json'}: model_type {config.get('model_type')!r}, expected 'reference_vla'"
        )
    for key, want in (("action_dim", action_dim), ("num_actions", num_actions)):
        if config.get(key) != want:
            raise ValueError(f"{path / 'config.json'}: {key} is {config.get(key)!r}, the policy needs {want}")
    try:
        from safetensors.torch import load_file

        load_file(str(path / "model.safetensors"))
    except Exception as exc:
        raise ValueError(
            f"{path / 'model.safetensors'}: corrupt or truncated safetensors file: {exc}"
        ) from None
    try:
        json.loads((path / "tokenizer.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path / 'tokenizer.json'}: not valid JSON: {exc}") from None


def get_model(usr_args: dict[str, Any]) -> ReferencePolicy:
    return ReferencePolicy(usr_args)


def encode_obs(obs: dict[str, Any]) -> dict[str, Any]:
    """Wire observation → generate_actions inputs: the first (primary) camera's image, proprio, goal."""
    images = list((obs.get("images") or {}).values())
    if not images:
        raise ValueError("reference: the observation has no camera image (it needs the primary camera)")
    if "proprio" not in obs:
        raise ValueError("reference: the observation has no 'proprio'")
    return {
        "instruction": str(obs.get("instruction", "")),
        "pixel_values": torch.from_numpy(downsample(np.asarray(images[0])))[None],
        "proprio": torch.tensor(np.asarray(obs["proprio"], dtype=np.float32).reshape(1, -1)),
        "goal": torch.from_numpy(goal_of(obs.get("state")))[None],
    }


def reset_model(model: ReferencePolicy) -> None:
    """Stateless between steps: every chunk is computed from the observation alone."""
