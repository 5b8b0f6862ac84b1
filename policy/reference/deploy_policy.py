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
        self.device = pick_device(str(usr_args.get("device", "auto")))
        self.model = AutoModel.from_pretrained(str(path), local_files_only=True).eval().to(self.device)
        self.image_res = int(self.model.config.image_res)

    @torch.no_grad()
    def generate_actions(
        self,
        instruction: str | list[str],
        pixel_values: torch.Tensor,
        proprio: torch.Tensor,
        goal: torch.Tensor,
        rng_seeds: list[int] | None = None,
    ) -> torch.Tensor:
        """[B, num_actions, action_dim] absolute ee6d for B observations: one, or (with `max_batch`
        set) the up to max_batch the server collated. noise_std > 0 adds noise_std · N(0, 1), drawn
        per request from its `rng_seeds` entry when batched, else from the RNG the server seeded."""
        texts = [instruction] if isinstance(instruction, str) else list(instruction)
        limit = self.model.config.max_text_len
        tokens = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=limit)
        images = [downsample(row.numpy(), self.image_res) for row in pixel_values]
        pixels = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).to(self.device)
        actions = self.model.predict_actions(
            pixel_values=pixels.float() / 255.0, input_ids=tokens["input_ids"].to(self.device),
            attention_mask=tokens["attention_mask"].to(self.device), proprio=proprio.to(self.device),
            goal=goal.to(self.device),
        ).cpu()  # fmt: skip
        if self.noise_std > 0:
            actions = actions + self.noise_std * noise(actions.shape, rng_seeds)
        return actions


def pick_device(device: str) -> torch.device:
    """The `device` setting: auto (the GPU a worker was given, else the CPU), cpu, or cuda[:n]."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except RuntimeError:
        raise ValueError(f"reference: setting 'device' is auto, cpu or cuda[:n], not {device!r}") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"reference: device {device!r} asked for, but torch sees no CUDA GPU")
    return chosen


def noise(shape: torch.Size, rng_seeds: list[int] | None) -> torch.Tensor:
    """N(0, 1) of `shape`: the global RNG's draw (one request, seeded by the server), or one
    generator per request seeded from `rng_seeds`, which draws what the global RNG seeded with the
    same seed would: a request's noise never depends on what it was batched with."""
    if rng_seeds is None:
        return torch.randn(shape)
    rows = [torch.randn(shape[1:], generator=torch.Generator().manual_seed(seed)) for seed in rng_seeds]
    return torch.stack(rows)


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
