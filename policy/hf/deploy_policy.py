"""hf: any transformers encoder + tokenizer from a local checkpoint dir, with a small action head.

The checkpoint dir is what `save_pretrained` wrote for a model and its tokenizer (no hub access:
`local_files_only=True`). The action head maps [mean text hidden state, mean image colour,
proprio] to an offset chunk around the current pose; real VLA wrappers replace the head and
`encode_obs`, the serving path stays the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

IMAGE_FEATURES = 3  # mean R, G, B over all cameras


class HFPolicy:
    def __init__(self, usr_args: dict[str, Any]) -> None:
        ckpt = usr_args.get("ckpt_path")
        if not ckpt:
            raise ValueError("hf: needs a checkpoint dir (--ckpt / CKPT_NAME)")
        self.action_dim = int(usr_args["action_dim"])
        self.num_actions = int(usr_args["num_actions"])
        self.max_length = int(usr_args.get("max_length", 64))
        self.scale = float(usr_args.get("action_scale", 0.01))
        self.noise_std = float(usr_args.get("noise_std", 0.0))
        device = str(usr_args.get("device", "auto"))
        self.device = torch.device(
            "cuda"
            if device == "auto" and torch.cuda.is_available()
            else "cpu"
            if device == "auto"
            else device
        )
        self.tokenizer = AutoTokenizer.from_pretrained(ckpt, local_files_only=True)
        self.backbone = AutoModel.from_pretrained(ckpt, local_files_only=True).to(self.device).eval()
        self.head = self._head(Path(ckpt), int(usr_args.get("head_seed", 0))).to(self.device).eval()

    def _head(self, ckpt: Path, seed: int) -> torch.nn.Linear:
        features = self.backbone.config.hidden_size + IMAGE_FEATURES + self.action_dim
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            head = torch.nn.Linear(features, self.num_actions * self.action_dim)
        weights = ckpt / "action_head.safetensors"
        if weights.is_file():
            from safetensors.torch import load_file

            head.load_state_dict(load_file(str(weights)))
        return head

    @torch.no_grad()
    def generate_actions(
        self,
        instruction: list[str],
        image_input: torch.Tensor,
        proprio: torch.Tensor,
        rng_seeds: list[int],
    ) -> torch.Tensor:
        """[B, num_actions, action_dim]: proprio + scale · head(features) (+ noise seeded per request)."""
        batch = len(instruction)
        tokens = self.tokenizer(
            list(instruction), return_tensors="pt", truncation=True, max_length=self.max_length, padding=True
        )
        ids = tokens["input_ids"].to(self.device)
        mask = tokens["attention_mask"].to(self.device)
        hidden = self.backbone(input_ids=ids, attention_mask=mask).last_hidden_state
        text = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        image = image_input.to(self.device)
        colour = (
            image.mean(dim=(1, 3, 4))
            if image.shape[1]
            else torch.zeros(batch, IMAGE_FEATURES, device=self.device)
        )
        proprio = proprio.to(self.device)
        delta = self.head(torch.cat([text, colour, proprio], dim=-1)).view(
            batch, self.num_actions, self.action_dim
        )
        actions = proprio[:, None, :] + self.scale * delta
        if self.noise_std > 0:  # one generator per request: its draw never depends on the batch
            shape = (self.num_actions, self.action_dim)
            noise = [torch.randn(shape, generator=torch.Generator().manual_seed(s)) for s in rng_seeds]
            actions = actions + self.noise_std * torch.stack(noise).to(self.device)
        return actions


def get_model(usr_args: dict[str, Any]) -> HFPolicy:
    return HFPolicy(usr_args)


def encode_obs(obs: dict[str, Any]) -> dict[str, Any]:
    """Wire observation → one request's inputs: images [1, V, 3, H, W] in [0, 1], proprio [1, D]
    (the server concatenates requests along the first axis; the instruction becomes a list)."""
    images = [np.asarray(img) for img in (obs.get("images") or {}).values()]
    if len({img.shape for img in images}) > 1:
        raise ValueError(f"hf: cameras differ in image shape {[img.shape for img in images]}")
    stack = np.stack(images)[None] if images else np.zeros((1, 0, 1, 1, 3), np.uint8)
    image_input = torch.from_numpy(stack.astype(np.float32) / 255.0).permute(0, 1, 4, 2, 3)
    if "proprio" not in obs:
        raise ValueError("hf: the observation has no 'proprio'")
    proprio = torch.tensor(np.asarray(obs["proprio"], dtype=np.float32).reshape(1, -1))
    return {"instruction": str(obs.get("instruction", "")), "image_input": image_input, "proprio": proprio}


def reset_model(model: HFPolicy) -> None:
    """Stateless between steps: every chunk is computed from the observation alone."""
