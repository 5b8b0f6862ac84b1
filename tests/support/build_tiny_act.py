"""A tiny randomly initialised LeRobot ACT checkpoint for MetaWorld (run with $LEROBOT_PY): what
`lerobot-eval --env.type=metaworld` feeds a policy (observation.image [3, 480, 480], observation.state
[4]) to 4 actions, small transformer, no pretrained backbone weights, with invented dataset stats
saved as its pre/post-processors. It moves the arm somewhere: for exercising the paths that load and
run a checkpoint (scripts/lerobot_eval_reference.py), not for succeeding.

Usage: $LEROBOT_PY tests/support/build_tiny_act.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.factory import make_pre_post_processors


def build(out: Path) -> None:
    torch.manual_seed(0)
    config = ACTConfig(
        input_features={
            "observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 480, 480)),
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(4,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(4,))},
        pretrained_backbone_weights=None, dim_model=32, n_heads=2, dim_feedforward=64,
        n_encoder_layers=1, n_decoder_layers=1, latent_dim=8, use_vae=False, chunk_size=10,
        n_action_steps=10, device="cpu", push_to_hub=False,
    )  # fmt: skip
    stats = {  # invented: about where MetaWorld's hand is, and actions of a fair size
        "observation.image": {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)},
        "observation.state": {"mean": torch.tensor([0.0, 0.6, 0.2, 0.5]), "std": torch.full((4,), 0.1)},
        "action": {"mean": torch.zeros(4), "std": torch.full((4,), 0.5)},
    }
    policy = ACTPolicy(config)
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=stats)
    out.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(out)
    preprocessor.save_pretrained(out)
    postprocessor.save_pretrained(out)


if __name__ == "__main__":
    build(Path(sys.argv[1]))
