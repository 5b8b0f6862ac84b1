"""A tiny randomly initialised LeRobot ACT checkpoint, saved as `lerobot-train` saves one (config,
weights, pre/post-processors with normalisation statistics): run with LEROBOT_PY.

    $LEROBOT_PY tests/support/lerobot_tiny_act.py OUT_DIR [--image-size 96]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.factory import make_pre_post_processors


def make(out: Path, image_size: int) -> None:
    torch.manual_seed(0)
    config = ACTConfig(
        input_features={
            "observation.image": PolicyFeature(FeatureType.VISUAL, (3, image_size, image_size)),
            "observation.state": PolicyFeature(FeatureType.STATE, (4,)),
        },
        output_features={"action": PolicyFeature(FeatureType.ACTION, (4,))},
        normalization_mapping=dict.fromkeys(("VISUAL", "STATE", "ACTION"), NormalizationMode.MEAN_STD),
        pretrained_backbone_weights=None, dim_model=32, dim_feedforward=64, n_heads=2,
        n_encoder_layers=1, n_decoder_layers=1, use_vae=False, chunk_size=6, n_action_steps=4,
        device="cpu", push_to_hub=False,
    )  # fmt: skip
    policy = ACTPolicy(config)
    stats = {
        "observation.image": {"mean": torch.full((3, 1, 1), 0.4), "std": torch.full((3, 1, 1), 0.25)},
        "observation.state": {"mean": torch.tensor([0.0, 0.6, 0.2, 0.5]), "std": torch.full((4,), 0.1)},
        "action": {"mean": torch.tensor([0.0, 0.1, -0.1, 0.2]), "std": torch.full((4,), 0.5)},
    }
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--image-size", type=int, default=96)
    args = parser.parse_args()
    make(args.out, args.image_size)
    print(args.out)
