"""lerobot: a LeRobot policy checkpoint served by our model server, in the LeRobot env (LEROBOT_PY).

LeRobot loads it: its factory picks the policy class from config.json's `type`, `from_pretrained`
reads the weights, and `make_pre_post_processors(pretrained_path=...)` rebuilds the saved
normalisation (the checkpoint's own statistics), as `lerobot-eval` does. Each request's observation
becomes what LeRobot's `preprocess_observation` makes of its env's: a camera [1, 3, H, W] float in
[0, 1], the proprio float32, the instruction as `task`; the feature map (check.py) says which of
ours feeds which of the policy's input features. The answer is the first `n_action_steps` actions of
`predict_action_chunk`, unnormalised: what LeRobot's own `select_action` plays, one per step, before
it asks the policy again, so a session plays the same actions as `lerobot-eval` would.

Batching: ACT draws nothing at inference, so the requests of a batch go in one call; a policy that
samples (pi0's flow noise, ...) is called one request at a time with torch's RNG seeded from that
request's seed, so an episode's actions depend on its (task, seed, step) alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from policy.lerobot.check import DETERMINISTIC_TYPES, action_shape, map_path, problems, read_config, read_map

HERE = Path(__file__).resolve().parent


class LeRobotPolicy:
    def __init__(self, usr_args: dict[str, Any]) -> None:
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        if not usr_args.get("ckpt_path"):
            raise ValueError("lerobot needs a checkpoint: set CKPT_NAME to a LeRobot pretrained_model dir")
        ckpt = Path(usr_args["ckpt_path"])
        refused = problems(ckpt, usr_args, HERE, None)
        if refused:
            raise ValueError("; ".join(refused))
        config = read_config(ckpt)
        self.chunk_len, self.action_dim = action_shape(config)
        for key, value in (("num_actions", self.chunk_len), ("action_dim", self.action_dim)):
            if usr_args.get(key) not in ("checkpoint", value):
                raise ValueError(f"setting {key}={usr_args.get(key)!r}, but the checkpoint's is {value}")
            usr_args[key] = value  # the server's spec: what this checkpoint answers with
        device = str(usr_args.get("device", "cpu"))
        device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        cfg = PreTrainedConfig.from_pretrained(ckpt)
        cfg.pretrained_path, cfg.device = ckpt, device
        self.policy = get_policy_class(cfg.type).from_pretrained(ckpt, config=cfg).eval()
        self.preprocess, self.postprocess = make_pre_post_processors(
            policy_cfg=cfg,
            pretrained_path=str(ckpt),
            preprocessor_overrides={"device_processor": {"device": device}},
        )
        inputs = set(config["input_features"])
        self.sources = {feature: source for feature, source in read_map(map_path(usr_args, HERE)).items()
                        if feature in inputs}  # fmt: skip
        self.deterministic = cfg.type in DETERMINISTIC_TYPES

    def generate_actions(
        self, rng_seeds: list[int], instruction: list[str], **sources: torch.Tensor
    ) -> np.ndarray:
        """[B, n_action_steps, action_dim] for B requests (`sources`: images/<camera>, proprio)."""
        missing = sorted({s for s in self.sources.values() if s not in sources})
        if missing:
            raise ValueError(f"lerobot: the observation lacks {missing} (the feature map reads them)")
        batch = {feature: sources[source] for feature, source in self.sources.items()}
        rows = [(batch, instruction, None)] if self.deterministic else [
            ({k: v[i : i + 1] for k, v in batch.items()}, instruction[i : i + 1], seed)
            for i, seed in enumerate(rng_seeds)
        ]  # fmt: skip
        return np.concatenate([self._chunk(b, tasks, seed) for b, tasks, seed in rows], axis=0)

    def _chunk(self, batch: dict[str, torch.Tensor], tasks: list[str], seed: int | None) -> np.ndarray:
        if seed is not None:
            torch.manual_seed(seed)
        with torch.inference_mode():
            chunk = self.policy.predict_action_chunk(self.preprocess({**batch, "task": list(tasks)}))
            actions = self.postprocess(chunk[:, : self.chunk_len])
        return actions.float().cpu().numpy()


def get_model(usr_args: dict[str, Any]) -> LeRobotPolicy:
    return LeRobotPolicy(usr_args)


def encode_obs(obs: dict[str, Any]) -> dict[str, Any]:
    """Every source the feature map may read, as LeRobot's preprocess_observation makes them."""
    inputs: dict[str, Any] = {"instruction": str(obs.get("instruction", ""))}
    for camera, image in (obs.get("images") or {}).items():
        frame = torch.from_numpy(np.ascontiguousarray(image))[None]  # [1, H, W, 3] uint8
        inputs[f"images/{camera}"] = frame.permute(0, 3, 1, 2).contiguous().type(torch.float32) / 255
    if "proprio" in obs:
        inputs["proprio"] = torch.from_numpy(np.asarray(obs["proprio"])).float().reshape(1, -1)
    return inputs


def reset_model(model: LeRobotPolicy) -> None:
    """Nothing per episode: a served policy answers from the current observation alone."""
