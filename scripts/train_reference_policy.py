"""Train the reference policy by behaviour cloning on the CPU (model env: torch + transformers).

Reads the collector's data (<data>/data_card.json + episodes/), trains a tokenizer on the tasks'
instructions and the `ReferenceVLAModel` (policy/reference/modeling.py) with an L1 loss on the
normalised next-`num_actions` ee6d chunk. Deterministic given --seed (torch threads fixed, batches
drawn per step from a seeded generator, deterministic algorithms). Every --save-every steps it writes
<out>/last/ (save_pretrained + optimizer state) and <out>/loss_curve.png; rerunning the same command
resumes from <out>/last/. At --early-fraction of the steps it writes <out>/early/, at the end
<out>/final/: each a complete checkpoint (config, safetensors, tokenizer, README.md model card,
data_card.json) that `policy/reference` loads.

Example (the shipped checkpoint, ~40 min on 2 cores):
  $MODEL_PY scripts/train_reference_policy.py --data data/reference --out data/reference_train --steps 6000
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

from harness.config.failures import run_command
from harness.episode.bench.maniskill_config import load_table
from policy.reference.datacard import CARD_NAME, write_card
from policy.reference.dataset import batch, load_samples, norm_stats
from policy.reference.modeling import ReferenceVLAConfig, ReferenceVLAModel
from policy.reference.tokenizer import train_tokenizer

STATE = "trainer_state.pt"


def lr_at(step: int, total: int, base: float, warmup: int = 100) -> float:
    """Linear warm-up, then cosine decay to 5% of the base rate."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def save_checkpoint(
    dest: Path,
    model: ReferenceVLAModel,
    tokenizer: Any,
    card: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> None:
    """A complete checkpoint dir, written beside `dest` and renamed into place."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_card(tmp / CARD_NAME, card)
    (tmp / "README.md").write_text(model_card(card, extra or {}))
    if extra and "state" in extra:
        torch.save(extra["state"], tmp / STATE)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def model_card(card: dict[str, Any], info: dict[str, Any]) -> str:
    demos = card["demos"]
    rows = "\n".join(f"| {t} | {len(demos[t])} | {card['samples'][t]} |" for t in card["tasks"])
    return f"""# reference policy checkpoint

A small language-conditioned visuomotor policy (policy/reference/modeling.py, `model_type: reference_vla`)
trained by behaviour cloning on ManiSkill3 expert demos (scripts/train_reference_policy.py).

- Data: {card["num_demos"]} expert demos (scripts/collect_training_data.py), seeds in
  [{card["seed_range"][0]}, {card["seed_range"][1]}) (disjoint from the eval bank seeds/maniskill),
  `{card["scene"]}_{card["bench_config"]}`, camera `{card["camera"]}` rendered at {card["render_size"]} px
  (`{card["shader"]}` shader), area-downsampled to {card["image_res"]} px then to the model's resolution.
- Training: step {info.get("step")} of {info.get("steps")}, batch {info.get("batch")}, lr {info.get("lr")},
  seed {info.get("seed")}; final L1 loss (normalised targets, mean of the last 100 steps)
  {info.get("loss", float("nan")):.4f}; {info.get("wall_min", 0):.1f} min of training on
  {info.get("threads")} CPU threads.

| task | demos | samples |
| --- | --- | --- |
{rows}
"""


def plot_losses(losses: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    window = 50
    smooth = [
        sum(losses[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1))
        for i in range(len(losses))
    ]
    ax.plot(losses, alpha=0.3, label="L1 loss")
    ax.plot(smooth, label=f"mean of {window}")
    ax.set_xlabel("step"), ax.set_ylabel("loss (normalised targets)"), ax.set_yscale("log"), ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("data/reference"), help="collector output dir")
    parser.add_argument("--out", type=Path, default=Path("data/reference_train"), help="training output dir")
    parser.add_argument("--steps", type=int, default=6000, help="optimizer steps (default: 6000)")
    parser.add_argument("--batch", type=int, default=64, help="batch size (default: 64)")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default: 1e-3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of init, batches and augmentation")
    parser.add_argument("--save-every", type=int, default=500, help="steps between resumable saves")
    parser.add_argument("--early-fraction", type=float, default=0.2, help="early checkpoint at this fraction")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: 2)")
    parser.add_argument("--log-every", type=int, default=25, help="steps between progress lines")
    parser.add_argument(
        "--stop-after",
        type=int,
        default=0,
        help="save and stop after this step (0: run to --steps); rerun resumes",
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or not 0 < args.early_fraction < 1 or args.save_every < 1:
        parser.error("need --steps >= 1, --batch >= 1, 0 < --early-fraction < 1, --save-every >= 1")
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)

    config = ReferenceVLAConfig()
    samples, card = load_samples(args.data, config.image_res, config.num_actions)
    instructions = [load_table().task(t).instruction for t in samples.tasks]
    tokenizer = train_tokenizer([t.instruction for t in load_table().tasks.values()])
    tokens = tokenizer(
        instructions, padding="longest", max_length=config.max_text_len, truncation=True, return_tensors="pt"
    )
    config = ReferenceVLAConfig(vocab_size=len(tokenizer), norm_stats=norm_stats(samples))
    model = ReferenceVLAModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    losses: list[float] = []
    start, wall = 0, 0.0
    last = args.out / "last"
    run_args = {
        k: str(v) if isinstance(v, Path) else v
        for k, v in vars(args).items()
        if k not in ("log_every", "stop_after")
    }
    if (last / STATE).is_file():
        state = torch.load(last / STATE, weights_only=False)
        if state["args"] != run_args:
            raise ValueError(
                f"{last / STATE}: saved by a run with other arguments {state['args']}; use another --out"
            )
        model = ReferenceVLAModel.from_pretrained(last, local_files_only=True)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
        optimizer.load_state_dict(state["optimizer"])
        start, losses, wall = state["step"], state["losses"], state["wall_s"]
        print(f"resuming {last} at step {start}", flush=True)
    early_step = max(1, round(args.steps * args.early_fraction))
    params = sum(p.numel() for p in model.parameters())
    print(
        f"{len(samples)} samples, {card['num_demos']} demos, {params} parameters, steps {start}..{args.steps}"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    model.train()
    began = time.monotonic()
    info = {"step": start, "loss": sum(losses[-100:]) / max(1, len(losses[-100:])), "wall_min": wall / 60}
    for step in range(start, args.steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr)
        loss = model(
            **batch(samples, tokens["input_ids"], tokens["attention_mask"], args.batch, args.seed, step)
        )["loss"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        done = step + 1
        if done % args.log_every == 0 or done == args.steps:
            rate = (done - start) / (time.monotonic() - began)
            recent = sum(losses[-args.log_every :]) / len(losses[-args.log_every :])
            eta = (args.steps - done) / rate / 60
            lr = lr_at(step, args.steps, args.lr)
            speed = rate * args.batch
            line = f"step {done}/{args.steps} loss {recent:.4f} lr {lr:.2e} {speed:.0f} samples/s"
            print(f"{line} ETA {eta:.1f} min", flush=True)
        info = {
            "step": done, "steps": args.steps, "batch": args.batch, "lr": args.lr, "seed": args.seed,
            "threads": args.threads, "loss": sum(losses[-100:]) / len(losses[-100:]),
            "wall_min": (wall + time.monotonic() - began) / 60,
        }  # fmt: skip
        if done == early_step:
            save_checkpoint(args.out / "early", model, tokenizer, card, info)
            print(f"wrote {args.out / 'early'} (step {done})", flush=True)
        if done % args.save_every == 0 or done == args.steps:
            state = {"step": done, "optimizer": optimizer.state_dict(), "losses": losses, "args": run_args,
                     "wall_s": wall + time.monotonic() - began}  # fmt: skip
            save_checkpoint(last, model, tokenizer, card, info | {"state": state})
            plot_losses(losses, args.out / "loss_curve.png")
        if done == args.stop_after and done < args.steps:
            if done % args.save_every:
                raise ValueError(f"--stop-after {done} is not a multiple of --save-every {args.save_every}")
            print(f"stopped after step {done}: rerun the same command to resume", flush=True)
            return 0
    save_checkpoint(args.out / "final", model, tokenizer, card, info)
    (args.out / "losses.json").write_text(json.dumps(losses))
    print(f"wrote {args.out / 'final'}: loss {info['loss']:.4f}, {info['wall_min']:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_command("train_reference_policy", main))
