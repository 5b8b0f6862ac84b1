"""The behaviour-cloning samples: collected demos loaded into memory, their statistics, seeded batches.

A sample is (primary image at the model's resolution, proprio, goal, instruction, next-`num_actions`
ee6d chunk). Batches are drawn from a generator seeded by (seed, step), so a batch depends only on the
step it is for: a resumed run draws exactly the batches the uninterrupted run would have.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from policy.reference.features import chunk_at, downsample
from policy.reference.modeling import RELATIVE_DIMS
from training.datacard import CARD_NAME, read_card

SHIFT_PX = 3  # random-shift augmentation, pixels each way at the model's resolution


@dataclass
class Samples:
    images: torch.Tensor  # [N, 3, R, R] uint8
    proprio: torch.Tensor  # [N, 10]
    goal: torch.Tensor  # [N, 3]
    actions: torch.Tensor  # [N, T, 10] absolute ee6d
    task_index: torch.Tensor  # [N] index into `tasks`
    tasks: list[str]

    def __len__(self) -> int:
        return len(self.proprio)


def load_samples(data: Path, image_res: int, num_actions: int) -> tuple[Samples, dict]:
    """Every step of every demo the data card lists, in card order (deterministic)."""
    card = read_card(data / CARD_NAME)
    images, proprio, goal, actions, task_index = [], [], [], [], []
    for index, task in enumerate(card["tasks"]):
        for seed in card["demos"][task]:
            path = data / "episodes" / task / f"seed{seed}.npz"
            try:
                with np.load(path) as demo:
                    frames, p, g, trace = demo["images"], demo["proprio"], demo["goal"], demo["trace"]
            except (OSError, KeyError, ValueError) as exc:
                raise ValueError(f"demo {path}: cannot read it: {exc}") from None
            images.append(np.stack([downsample(f, image_res) for f in frames]))
            proprio.append(p)
            goal.append(g)
            actions.append(np.stack([chunk_at(trace, t, num_actions) for t in range(len(p))]))
            task_index.append(np.full(len(p), index))
    if not proprio:
        raise ValueError(f"{data / CARD_NAME}: lists no demos")
    samples = Samples(
        torch.from_numpy(np.concatenate(images)).permute(0, 3, 1, 2).contiguous(),
        torch.from_numpy(np.concatenate(proprio)).float(),
        torch.from_numpy(np.concatenate(goal)).float(),
        torch.from_numpy(np.concatenate(actions)).float(),
        torch.from_numpy(np.concatenate(task_index)),
        list(card["tasks"]),
    )
    return samples, card


def norm_stats(samples: Samples) -> dict[str, list[float]]:
    """Per-dimension mean/std of proprio, goal and the (relative) action targets; std floored."""
    target = samples.actions.clone()
    target[..., :RELATIVE_DIMS] -= samples.proprio[:, None, :RELATIVE_DIMS]
    flat = target.reshape(-1, target.shape[-1])

    def pair(x: torch.Tensor, floor: float) -> tuple[list[float], list[float]]:
        return x.mean(0).tolist(), x.std(0).clamp(min=floor).tolist()

    stats = {}
    for name, x, floor in (
        ("proprio", samples.proprio, 1e-2),
        ("goal", samples.goal, 1e-2),
        ("action", flat, 1e-3),
    ):
        stats[f"{name}_mean"], stats[f"{name}_std"] = pair(x, floor)
    return stats


def batch(
    samples: Samples, token_ids: torch.Tensor, token_mask: torch.Tensor, size: int, seed: int, step: int
) -> dict:
    """The training batch of `step`: indices and shifts drawn from a generator seeded by (seed, step)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    idx = torch.randint(len(samples), (size,), generator=gen)
    shifts = torch.randint(0, 2 * SHIFT_PX + 1, (size, 2), generator=gen)
    images = samples.images[idx].float() / 255.0
    res = images.shape[-1]
    padded = torch.nn.functional.pad(images, [SHIFT_PX] * 4, mode="replicate")
    crops = [padded[i, :, dy : dy + res, dx : dx + res] for i, (dy, dx) in enumerate(shifts.tolist())]
    tasks = samples.task_index[idx]
    return {
        "pixel_values": torch.stack(crops),
        "input_ids": token_ids[tasks],
        "attention_mask": token_mask[tasks],
        "proprio": samples.proprio[idx],
        "goal": samples.goal[idx],
        "labels": samples.actions[idx],
    }
