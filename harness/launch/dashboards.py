"""The trainer's dashboards: each finished checkpoint's point logged to TensorBoard event files and to
Weights & Biases, beside the training curves.

Both are optional (off unless asked) and neither may block or fail an eval: every call runs in a
worker thread with a time limit, and any error (the package missing, a network failure, a full disk)
is one warning line, its text scrubbed of every secret-looking value of the environment. The W&B
run is offline unless `--wandb-mode online`, and resumes the trainer's run id when given; the
eval's metrics are keyed by `eval/train_step`, so a checkpoint evaluated out of order (newest first)
still lands at its own step. No key is ever passed to wandb by us: it reads its API key itself.
"""

from __future__ import annotations

import abc
import argparse
import os
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

Say = Callable[[str], None]
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASS|CREDENTIAL", re.IGNORECASE)
LIMIT_S = 120.0


def scrub(text: str, env: Mapping[str, str] = os.environ) -> str:
    """`text` with the value of every secret-looking environment variable replaced by `***`."""
    for name, value in env.items():
        if SECRET_NAME.search(name) and len(value) >= 6:
            text = text.replace(value, "***")
    return text


def scalars(point: dict[str, Any]) -> dict[str, float]:
    """The point as flat scalars: eval/SR, eval/SR_lo, eval/SR_hi (HSR alike), per task and total,
    the paired ΔSR against the best so far, and the step they belong to."""
    out: dict[str, float] = {"eval/train_step": float(point["step"])}
    for prefix, rates in [("eval", point["total"]), *((f"eval/{n}", r) for n, r in point["tasks"].items())]:
        for metric in ("sr", "hsr"):
            rate = rates[metric]
            if rate["rate"] is None:
                continue
            up = metric.upper()
            out.update(
                {
                    f"{prefix}/{up}": rate["rate"],
                    f"{prefix}/{up}_lo": rate["lo"],
                    f"{prefix}/{up}_hi": rate["hi"],
                }
            )
            out[f"{prefix}/{up}_n"] = float(rate["n"])
    if (v := point.get("verdict")) and v["diff_sr"] is not None:
        out.update(
            {
                "eval/dSR_vs_best": v["diff_sr"],
                "eval/dSR_vs_best_lo": v["diff_lo"],
                "eval/dSR_vs_best_hi": v["diff_hi"],
            }
        )
    return out


class Guarded(abc.ABC):
    """A dashboard whose calls can neither raise nor hang the caller: a thread each, `limit_s` at most."""

    name = "dashboard"

    def __init__(self, say: Say, limit_s: float = LIMIT_S) -> None:
        self.say, self.limit_s, self.broken = say, limit_s, False

    def _guard(self, what: str, call: Callable[[], None]) -> None:
        if self.broken:
            return
        errors: list[BaseException] = []

        def run() -> None:
            try:
                call()
            except BaseException as exc:  # a logger must never fail the eval
                errors.append(exc)

        thread = threading.Thread(target=run, name=f"{self.name}-{what}", daemon=True)
        thread.start()
        thread.join(self.limit_s)
        if thread.is_alive():
            self.broken = True
            self.say(
                f"warning: {self.name} logger: {what} took over {self.limit_s:g} s; {self.name} logging off"
            )
        elif errors:
            exc = errors[0]
            self.say(f"warning: {self.name} logger: {what} failed: {scrub(f'{type(exc).__name__}: {exc}')}")

    def log(self, point: dict[str, Any] | None) -> None:
        if point is not None:
            self._guard(f"step {point['step']}", lambda: self._log(point))

    def close(self) -> None:
        self._guard("close", self._close)

    @abc.abstractmethod
    def _log(self, point: dict[str, Any]) -> None:
        """Send one curve point to the dashboard (each dashboard its own way)."""

    def _close(self) -> None:  # noqa: B027 (a default: most dashboards have nothing to flush)
        """Nothing to flush."""


class TensorBoard(Guarded):
    """Event files under `logdir` (tensorboard's own writer, through torch.utils.tensorboard)."""

    name = "tensorboard"

    def __init__(self, logdir: Path, say: Say, limit_s: float = LIMIT_S) -> None:
        super().__init__(say, limit_s)
        self.logdir, self.writer = logdir, None

    def _log(self, point: dict[str, Any]) -> None:
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.logdir))
        step = int(point["step"])
        for tag, value in scalars(point).items():
            if tag != "eval/train_step":
                self.writer.add_scalar(tag, value, global_step=step)
        if (v := point.get("verdict")) is not None:
            self.writer.add_text(
                "eval/verdict", f"{v['verdict']} vs step {v['against_step']}", global_step=step
            )
        self.writer.flush()

    def _close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class WandB(Guarded):
    """One wandb run (the trainer's, resumed when `run_id` is given), offline unless `mode` says
    online; a point is logged with `eval/train_step` as its x axis, plus up to two videos."""

    name = "wandb"

    def __init__(
        self, project: str, run_id: str | None, directory: Path, say: Say, mode: str = "offline",
        limit_s: float = LIMIT_S,
    ) -> None:  # fmt: skip
        super().__init__(say, limit_s)
        self.project, self.run_id, self.directory, self.run = project, run_id, directory, None
        self.mode = mode

    def _start(self) -> Any:
        import wandb

        self.directory.mkdir(parents=True, exist_ok=True)
        run = wandb.init(
            project=self.project, id=self.run_id, resume="allow" if self.run_id else None,
            mode=self.mode, dir=str(self.directory), reinit="create_new",
        )  # fmt: skip
        run.define_metric("eval/train_step")
        run.define_metric("eval/*", step_metric="eval/train_step")
        return run

    def _log(self, point: dict[str, Any]) -> None:
        import wandb

        if self.run is None:
            self.run = self._start()
        data: dict[str, Any] = dict(scalars(point))
        for i, video in enumerate(point.get("videos") or []):
            data[f"eval/video_{i}"] = wandb.Video(video, format="mp4")
        self.run.log(data)

    def _close(self) -> None:
        if self.run is not None:
            self.run.finish()


def dashboards_from_args(args: argparse.Namespace, out: Path, say: Say) -> list[Guarded]:
    """The dashboards the command line asks for (none by default)."""
    boards: list[Guarded] = []
    if args.tensorboard:
        boards.append(TensorBoard(args.tensorboard, say))
    if args.wandb_project:
        mode = getattr(args, "wandb_mode", None) or "offline"
        boards.append(WandB(args.wandb_project, args.wandb_run_id, args.wandb_dir or out, say, mode))
    return boards
