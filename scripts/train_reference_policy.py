"""Train the reference policy by behaviour cloning on the CPU (model env: torch + transformers).

Reads the collector's data (<data>/data_card.json + episodes/), trains a tokenizer on the tasks'
instructions and the `ReferenceVLAModel` (policy/reference/modeling.py) with an L1 loss on the
normalised next-`num_actions` ee6d chunk. Deterministic given --seed (torch threads fixed, batches
drawn per step from a seeded generator, deterministic algorithms). Every --save-every steps it writes
<out>/last/ (save_pretrained + optimizer state) and <out>/loss_curve.png (with --keep-checkpoints
also <out>/checkpoints/step_<N>/, for orchestrators/watch.sh); rerunning the same command resumes
from <out>/last/. At --early-fraction of the steps it writes <out>/early/, at the end
<out>/final/: each a complete checkpoint (config, safetensors, tokenizer, README.md model card,
data_card.json) that `policy/reference` loads. The training code is the `training` package, outside
the run contract's code hash.

Example (the shipped checkpoint, docs/reference-policy.md):
  $MODEL_PY scripts/train_reference_policy.py --data data/reference --out data/reference_train \
    --steps 16000 --save-every 1000 --gripper-weight 2
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.process.failures import run_command
from training.trainer import Trainer, TrainSettings


def parse_settings(argv: list[str] | None = None) -> TrainSettings:
    """The command line as TrainSettings; a setting no run could use exits 2 naming it."""
    d = TrainSettings(Path("data/reference"), Path("data/reference_train"))  # the defaults
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=d.data, help="collector output dir")
    p.add_argument("--out", type=Path, default=d.out, help="training output dir")
    p.add_argument("--steps", type=int, default=d.steps, help=f"optimizer steps (default: {d.steps})")
    p.add_argument("--batch", type=int, default=d.batch, help=f"batch size (default: {d.batch})")
    p.add_argument("--lr", type=float, default=d.lr, help=f"peak learning rate (default: {d.lr:g})")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of init, batches and augmentation")
    p.add_argument("--save-every", type=int, default=d.save_every, help="steps between resumable saves")
    p.add_argument(
        "--early-fraction", type=float, default=d.early_fraction, help="early checkpoint at this fraction"
    )
    p.add_argument(
        "--gripper-weight", type=float, default=d.gripper_weight,
        help="weight of the gripper channel in the L1 loss (default: 1, the plain mean)",
    )  # fmt: skip
    p.add_argument(
        "--image-res", type=int, default=d.image_res, help=f"model image side, px (default: {d.image_res})"
    )
    p.add_argument(
        "--no-keypoints", dest="keypoints", action="store_false",
        help="without the spatial-softmax keypoints (the first shipped checkpoint's model)",
    )  # fmt: skip
    p.add_argument("--threads", type=int, default=d.threads, help=f"torch CPU threads (default: {d.threads})")
    p.add_argument("--log-every", type=int, default=d.log_every, help="steps between progress lines")
    p.add_argument(
        "--stop-after", type=int, default=d.stop_after,
        help="save and stop after this step (0: run to --steps); rerun resumes",
    )  # fmt: skip
    p.add_argument(
        "--keep-checkpoints", action="store_true",
        help="also keep each save as <out>/checkpoints/step_<N>/ (for orchestrators/watch.sh)",
    )  # fmt: skip
    settings = TrainSettings(**vars(p.parse_args(argv)))
    try:
        settings.check()
    except ValueError as exc:
        p.error(str(exc))
    return settings


def main(argv: list[str] | None = None) -> int:
    Trainer(parse_settings(argv)).run()
    return 0


if __name__ == "__main__":
    sys.exit(run_command("train_reference_policy", main))
