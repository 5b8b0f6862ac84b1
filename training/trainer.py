"""The reference policy's behaviour-cloning loop: set up, resume, step, save.

Deterministic given the seed: torch threads fixed, deterministic algorithms, the init seeded, and
each step's batch drawn from a generator seeded by (seed, step) (`training.dataset.batch`). So a run
resumed from `<out>/last/` draws exactly the batches the uninterrupted run would have, and ends
byte-identical to it. `<out>/last/` is saved every `save_every` steps (with the loss curve, and with
`keep_checkpoints` a copy kept as `<out>/checkpoints/step_<N>/`, which a checkpoint watcher
evaluates), `<out>/early/` at `early_fraction` of the steps, `<out>/final/` at the end.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from harness.episode.bench.maniskill_config import load_table
from policy.reference.modeling import ReferenceVLAConfig, ReferenceVLAModel
from training.checkpoint import load_state, save_checkpoint
from training.curves import plot_losses
from training.dataset import batch, load_samples, norm_stats
from training.tokenizer import train_tokenizer

LOSS_WINDOW = 100  # the loss a checkpoint reports: the mean of this many last steps
WEIGHT_DECAY = 1e-4
CLIP_NORM = 1.0


@dataclass(frozen=True)
class TrainSettings:
    """What one training run is asked to do (the script's arguments)."""

    data: Path
    out: Path
    steps: int = 6000
    batch: int = 64
    lr: float = 1e-3
    seed: int = 0
    save_every: int = 500
    early_fraction: float = 0.2
    gripper_weight: float = 1.0  # the gripper channel's weight in the loss (ReferenceVLAConfig)
    image_res: int = 96  # the model's image side (the collector's images are 96 px)
    keypoints: bool = True  # the spatial-softmax keypoints (ReferenceVLAConfig)
    threads: int = 2
    log_every: int = 25  # how often it prints: does not change the result
    stop_after: int = 0  # train in pieces: does not change the result
    keep_checkpoints: bool = False  # also keep every save as <out>/checkpoints/step_<N>/: does not change it

    def check(self) -> None:
        """Refuse settings no run could use, naming the argument, before any data is read."""
        if self.steps < 1 or self.batch < 1 or not 0 < self.early_fraction < 1 or self.save_every < 1:
            raise ValueError("need --steps >= 1, --batch >= 1, 0 < --early-fraction < 1, --save-every >= 1")
        if self.gripper_weight <= 0:
            raise ValueError(f"--gripper-weight {self.gripper_weight}: need > 0")
        if not 16 <= self.image_res <= 96 or self.image_res % 16:
            raise ValueError(f"--image-res {self.image_res}: need a multiple of 16 in 16..96 (data: 96 px)")
        if self.log_every < 1:
            raise ValueError(f"--log-every {self.log_every}: need >= 1")
        if 0 < self.stop_after < self.steps and self.stop_after % self.save_every:
            raise ValueError(
                f"--stop-after {self.stop_after} is not a multiple of --save-every {self.save_every}: "
                "a stop must fall on a save to resume from"
            )

    def identity(self) -> dict[str, Any]:
        """The settings that decide the result, saved with the trainer state: a resume under other
        ones is refused (log_every, stop_after and keep_checkpoints may change between pieces)."""
        return {
            k: str(v) if isinstance(v, Path) else v
            for k, v in asdict(self).items()
            if k not in ("log_every", "stop_after", "keep_checkpoints")
        }


def lr_at(step: int, total: int, base: float, warmup: int = 100) -> float:
    """Linear warm-up, then cosine decay to 5% of the base rate."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return base * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def _optimizer(model: ReferenceVLAModel, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)


def say_now(line: str) -> None:
    """Print a progress line at once (a log file or pipe sees it while training runs)."""
    print(line, flush=True)


def _mean_tail(values: list[float], n: int) -> float:
    tail = values[-n:]
    return sum(tail) / max(1, len(tail))


class Trainer:
    """One training run: data, tokenizer and model set up (or resumed from `<out>/last/`) on creation;
    `run()` trains to the end or to `stop_after`."""

    def __init__(self, settings: TrainSettings, say: Callable[[str], None] = say_now) -> None:
        self.settings, self.say = settings, say
        torch.set_num_threads(settings.threads)
        torch.use_deterministic_algorithms(True)
        torch.manual_seed(settings.seed)
        base = ReferenceVLAConfig(image_res=settings.image_res, keypoints=settings.keypoints)
        self.samples, self.card = load_samples(settings.data, base.image_res, base.num_actions)
        table = load_table()
        self.tokenizer = train_tokenizer([t.instruction for t in table.tasks.values()])
        instructions = [table.task(t).instruction for t in self.samples.tasks]
        self.tokens = self.tokenizer(
            instructions, padding="longest", max_length=base.max_text_len, truncation=True,
            return_tensors="pt",
        )  # fmt: skip
        config = ReferenceVLAConfig(
            vocab_size=len(self.tokenizer), norm_stats=norm_stats(self.samples),
            gripper_loss_weight=settings.gripper_weight, image_res=settings.image_res,
            keypoints=settings.keypoints,
        )  # fmt: skip
        self.model = ReferenceVLAModel(config)
        self.optimizer = _optimizer(self.model, settings.lr)
        self.last = settings.out / "last"
        self.start, self.losses, self.wall_s = 0, [], 0.0  # wall_s: training time before this process
        self._resume()

    def _resume(self) -> None:
        state = load_state(self.last)
        if state is None:
            return
        if state["args"] != self.settings.identity():
            raise ValueError(
                f"{self.last}: saved by a run with other arguments {state['args']}; use another --out"
            )
        self.model = ReferenceVLAModel.from_pretrained(self.last, local_files_only=True)
        self.optimizer = _optimizer(self.model, self.settings.lr)
        self.optimizer.load_state_dict(state["optimizer"])
        self.start, self.losses, self.wall_s = state["step"], state["losses"], state["wall_s"]
        self.say(f"resuming {self.last} at step {self.start}")

    def step(self, step: int) -> float:
        """One optimizer step on `step`'s batch; its loss."""
        s = self.settings
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(step, s.steps, s.lr)
        ids, mask = self.tokens["input_ids"], self.tokens["attention_mask"]
        loss = self.model(**batch(self.samples, ids, mask, s.batch, s.seed, step))["loss"]
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP_NORM)
        self.optimizer.step()
        return loss.item()

    def run(self) -> bool:
        """Train from the resumed step; True when it reached the last step, False at `stop_after`."""
        s = self.settings
        early_step = max(1, round(s.steps * s.early_fraction))
        params = sum(p.numel() for p in self.model.parameters())
        self.say(
            f"{len(self.samples)} samples, {self.card['num_demos']} demos, {params} parameters, "
            f"steps {self.start}..{s.steps}"
        )
        s.out.mkdir(parents=True, exist_ok=True)
        self.model.train()
        began = time.monotonic()
        loss = _mean_tail(self.losses, LOSS_WINDOW)
        info = {"step": self.start, "loss": loss, "wall_min": self.wall_s / 60}
        for step in range(self.start, s.steps):
            self.losses.append(self.step(step))
            done = step + 1
            if done % s.log_every == 0 or done == s.steps:
                self._progress_line(done, began)
            info = self._info(done, began)
            if done == early_step:
                save_checkpoint(s.out / "early", self.model, self.tokenizer, self.card, info)
                self.say(f"wrote {s.out / 'early'} (step {done})")
            if done % s.save_every == 0 or done == s.steps:
                self._save_last(done, info, began)
            if done == s.stop_after and done < s.steps:
                self.say(f"stopped after step {done}: rerun the same command to resume")
                return False
        save_checkpoint(s.out / "final", self.model, self.tokenizer, self.card, info)
        (s.out / "losses.json").write_text(json.dumps(self.losses))
        self.say(f"wrote {s.out / 'final'}: loss {info['loss']:.4f}, {info['wall_min']:.1f} min")
        return True

    def _progress_line(self, done: int, began: float) -> None:
        s = self.settings
        rate = (done - self.start) / (time.monotonic() - began)
        recent = _mean_tail(self.losses, s.log_every)
        eta = (s.steps - done) / rate / 60
        lr = lr_at(done - 1, s.steps, s.lr)
        line = f"step {done}/{s.steps} loss {recent:.4f} lr {lr:.2e} {rate * s.batch:.0f} samples/s"
        self.say(f"{line} ETA {eta:.1f} min")

    def _info(self, done: int, began: float) -> dict[str, Any]:
        """What the model card says about the training so far."""
        s = self.settings
        return {
            "step": done, "steps": s.steps, "batch": s.batch, "lr": s.lr, "seed": s.seed,
            "threads": s.threads, "loss": _mean_tail(self.losses, LOSS_WINDOW),
            "wall_min": (self.wall_s + time.monotonic() - began) / 60,
        }  # fmt: skip

    def _save_last(self, done: int, info: dict[str, Any], began: float) -> None:
        """The resumable checkpoint `<out>/last/` and the loss curve."""
        state = {
            "step": done, "optimizer": self.optimizer.state_dict(), "losses": self.losses,
            "args": self.settings.identity(), "wall_s": self.wall_s + time.monotonic() - began,
        }  # fmt: skip
        save_checkpoint(self.last, self.model, self.tokenizer, self.card, info, state)
        plot_losses(self.losses, self.settings.out / "loss_curve.png")
        if self.settings.keep_checkpoints:  # for a checkpoint watcher (orchestrators/watch.sh)
            save_checkpoint(
                self.settings.out / "checkpoints" / f"step_{done}",
                self.model,
                self.tokenizer,
                self.card,
                info,
            )
