"""The reference visuomotor policy as a `transformers` model: a config + model pair, Auto-registered.

Why a real `PreTrainedModel`: the checkpoint is then an ordinary `save_pretrained` directory (config.json,
model.safetensors) that `AutoModel.from_pretrained(dir, local_files_only=True)` loads, as any VLA
checkpoint a user brings would. The network is small enough to train on two CPU cores: a 4-layer CNN
over the primary camera (image_res², (image_res/16)² feature tokens), the instruction's tokens, a
proprio token and a goal token go through a 2-layer transformer; a readout token feeds an MLP that
predicts the next `num_actions` ee6d actions. With `keypoints`, a spatial softmax over the third
layer's feature map (image_res/8 a side) adds each channel's expected image position, as one more
token and as a direct input of the MLP: where things are, at a finer grain than the tokens' grid
(a grasp needs the cube's position to a few pixels, which 4×4 tokens of a 64 px image blur).
Targets are normalised: xyz and rot6d relative to the current pose, the
gripper absolute; the statistics live in the config so a checkpoint is self-contained.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel

RELATIVE_DIMS = 9  # xyz + rot6d are predicted relative to the current pose; the gripper (dim 9) absolute


class ReferenceVLAConfig(PretrainedConfig):
    model_type = "reference_vla"

    def __init__(
        self,
        vocab_size: int = 64,
        max_text_len: int = 24,
        image_res: int = 64,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        ff_dim: int = 128,
        head_dim: int = 256,
        action_dim: int = 10,
        num_actions: int = 30,
        proprio_dim: int = 10,
        goal_dim: int = 3,
        norm_stats: dict[str, list[float]] | None = None,
        gripper_loss_weight: float = 1.0,
        keypoints: bool = False,
        **kwargs: Any,
    ) -> None:
        self.vocab_size, self.max_text_len, self.image_res = vocab_size, max_text_len, image_res
        self.d_model, self.n_heads, self.n_layers, self.ff_dim = d_model, n_heads, n_layers, ff_dim
        self.head_dim, self.action_dim, self.num_actions = head_dim, action_dim, num_actions
        self.proprio_dim, self.goal_dim = proprio_dim, goal_dim
        self.keypoints = keypoints  # the spatial-softmax keypoints (off in checkpoints made before them)
        # training only: the gripper channel's weight in the L1 loss. A grasp turns on a few steps
        # where the gripper closes, a small share of an L1 averaged over 10 channels x 30 steps.
        self.gripper_loss_weight = gripper_loss_weight
        self.norm_stats = norm_stats or {
            "proprio_mean": [0.0] * proprio_dim, "proprio_std": [1.0] * proprio_dim,
            "goal_mean": [0.0] * goal_dim, "goal_std": [1.0] * goal_dim,
            "action_mean": [0.0] * action_dim, "action_std": [1.0] * action_dim,
        }  # fmt: skip
        super().__init__(**kwargs)


KEYPOINT_CHANNELS = 64  # the third conv layer's channels: one (x, y) keypoint each


def _conv(cin: int, cout: int, kernel: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, 2, kernel // 2), nn.GroupNorm(8, cout), nn.ReLU())


def spatial_softmax(features: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """[B, C, H, W] → [B, 2C]: each channel's softmax-weighted mean (x, y) position in [-1, 1]."""
    b, c, h, w = features.shape
    weights = torch.softmax(features.flatten(2) / temperature, dim=-1).view(b, c, h, w)
    ys = torch.linspace(-1, 1, h, dtype=features.dtype, device=features.device)
    xs = torch.linspace(-1, 1, w, dtype=features.dtype, device=features.device)
    x = (weights.sum(2) * xs).sum(-1)
    y = (weights.sum(3) * ys).sum(-1)
    return torch.cat([x, y], dim=-1)


class ReferenceVLAModel(PreTrainedModel):
    config_class = ReferenceVLAConfig
    base_model_prefix = "reference_vla"
    main_input_name = "pixel_values"

    def __init__(self, config: ReferenceVLAConfig) -> None:
        super().__init__(config)
        d = config.d_model
        self.image_encoder = nn.Sequential(
            _conv(3, 16, 5), _conv(16, 32, 3), _conv(32, 64, 3), _conv(64, d, 3)
        )
        grid = -(-config.image_res // 16)
        self.image_pos = nn.Parameter(torch.zeros(1, grid * grid, d))
        self.token_embed = nn.Embedding(config.vocab_size, d)
        self.text_pos = nn.Parameter(torch.zeros(1, config.max_text_len, d))
        self.proprio_embed = nn.Linear(config.proprio_dim, d)
        self.goal_embed = nn.Linear(config.goal_dim, d)
        self.readout = nn.Parameter(torch.zeros(1, 1, d))
        kp = 2 * KEYPOINT_CHANNELS if config.keypoints else 0
        if config.keypoints:
            self.keypoint_temperature = nn.Parameter(torch.ones(()))
            self.keypoint_embed = nn.Linear(kp, d)
        layer = nn.TransformerEncoderLayer(
            d, config.n_heads, config.ff_dim, dropout=0.0, batch_first=True, norm_first=True
        )
        self.transformer = nn.TransformerEncoder(layer, config.n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        h = config.head_dim
        self.head = nn.Sequential(
            nn.Linear(d + config.proprio_dim + config.goal_dim + kp, h), nn.ReLU(),
            nn.Linear(h, h), nn.ReLU(), nn.Linear(h, config.num_actions * config.action_dim),
        )  # fmt: skip
        self.post_init()

    def stat(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """A normalisation statistic from the config (not a buffer: the config is its one home)."""
        return torch.tensor(self.config.norm_stats[name], dtype=like.dtype, device=like.device)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Conv2d):
            nn.init.normal_(module.weight, std=0.02 if isinstance(module, nn.Linear) else 0.1)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def forward(
        self,
        pixel_values: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        proprio: torch.Tensor,
        goal: torch.Tensor,
        labels: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """pixel_values [B, 3, R, R] in [0, 1]; proprio [B, 10]; goal [B, 3]; labels [B, T, 10] absolute.

        Returns `pred` (normalised targets [B, T, 10]) and, given labels, the L1 `loss`.
        """
        b = pixel_values.shape[0]
        encoder = self.image_encoder
        fine = encoder[2](encoder[1](encoder[0](pixel_values * 2 - 1)))
        image = encoder[3](fine).flatten(2).transpose(1, 2) + self.image_pos
        ids = input_ids[:, : self.config.max_text_len]
        mask = attention_mask[:, : self.config.max_text_len].bool()
        text = self.token_embed(ids) + self.text_pos[:, : ids.shape[1]]
        p = (proprio - self.stat("proprio_mean", proprio)) / self.stat("proprio_std", proprio)
        g = (goal - self.stat("goal_mean", goal)) / self.stat("goal_std", goal)
        parts = [self.readout.expand(b, -1, -1), self.proprio_embed(p)[:, None], self.goal_embed(g)[:, None]]
        direct = [p, g]
        if self.config.keypoints:
            points = spatial_softmax(fine, self.keypoint_temperature.abs() + 1e-3)
            parts.append(self.keypoint_embed(points)[:, None])
            direct.append(points)
        text_at = len(parts)
        tokens = torch.cat([*parts, text, image], dim=1)
        keep = torch.ones(b, tokens.shape[1], dtype=torch.bool, device=tokens.device)
        keep[:, text_at : text_at + ids.shape[1]] = mask
        hidden = self.norm(self.transformer(tokens, src_key_padding_mask=~keep)[:, 0])
        pred = self.head(torch.cat([hidden, *direct], dim=-1)).view(
            b, self.config.num_actions, self.config.action_dim
        )
        out = {"pred": pred}
        if labels is not None:
            error = (pred - self.normalise_actions(labels, proprio)).abs()
            weight = torch.ones(self.config.action_dim, dtype=error.dtype, device=error.device)
            weight[RELATIVE_DIMS] = self.config.gripper_loss_weight
            out["loss"] = (error * weight).mean() / weight.mean()  # weight 1: the plain mean
        return out

    def normalise_actions(self, actions: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        target = actions.clone()
        target[..., :RELATIVE_DIMS] -= proprio[:, None, :RELATIVE_DIMS]
        return (target - self.stat("action_mean", target)) / self.stat("action_std", target)

    def denormalise_actions(self, pred: torch.Tensor, proprio: torch.Tensor) -> torch.Tensor:
        actions = pred * self.stat("action_std", pred) + self.stat("action_mean", pred)
        actions[..., :RELATIVE_DIMS] += proprio[:, None, :RELATIVE_DIMS]
        return actions

    @torch.no_grad()
    def predict_actions(self, **inputs: torch.Tensor) -> torch.Tensor:
        """Absolute ee6d action chunk [B, num_actions, action_dim]."""
        pred = self(**inputs)["pred"]
        return self.denormalise_actions(pred, inputs["proprio"])


AutoConfig.register(ReferenceVLAConfig.model_type, ReferenceVLAConfig)
AutoModel.register(ReferenceVLAConfig, ReferenceVLAModel)
