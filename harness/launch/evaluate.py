"""`harness.evaluate(ckpt_dir, benchmark=..., episodes=...)`: a training script's one call to evaluate a
checkpoint on the pool, without waiting for it.

Why a process and not a thread or an in-process loop: the eval must never stall or slow the trainer
(LeRobot's in-process eval stops training while it runs). The call checks what it can at once (the
checkpoint and the queue exist), then starts `harness.launch.evaljob` in the sim env as a background
process in its own session, at a lower CPU priority (`niceness`), and returns. The eval process creates the
run (the same checks as new_run.py), runs it on a pool (LAUNCHER=local here, srun inside a Slurm
allocation, submitit on Slurm: one job of `nodes` nodes), and writes its tables. The handle answers
`done()`, `wait()`, `result()` (a pandas DataFrame of the per-task table: SR and HSR with their
intervals), `episodes()` (the records) and `cancel()` (which cancels a submitit job too).

This module imports nothing beyond the standard library and the config paths, so it runs in either
env; `result()` needs pandas, which the sim env has and the model env does not (install it there, or
read `results_csv`). A checkpoint whose name ends in its step (`step_4000`) is evaluated as the run
`<its directory's name>_step<N>`, the name the checkpoint watcher gives it, so both feed one
learning curve (`<runs>/<prefix>_curve/`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config.paths import CODE_ROOT
from harness.config.settings import Settings
from harness.launch.ckptscan import run_name, series_prefix, step_of
from harness.process.failures import Failed, Refused

DEFAULT_QUEUES = {"maniskill": "seeds/maniskill_queue.txt"}


class EvaluateRefused(Refused, ValueError):
    """The input cannot work (a missing checkpoint, a checkpoint the policy cannot load, a bad knob);
    the message is one line naming it."""


class EvaluateFailed(Failed):
    """The eval did not complete (a pool failed); the message names the log."""


def names_for(ckpt: Path) -> tuple[str, str | None]:
    """(run name, series prefix or None): the watcher's `<dir>_step<N>` for a step checkpoint, else
    `eval_<name>`."""
    step = step_of(ckpt.name)
    if step is not None:
        prefix = series_prefix(ckpt.parent)
        return run_name(prefix, step), prefix
    return f"eval_{series_prefix(ckpt)}", None


@dataclass
class Evaluation:
    """A running (or finished) background eval of one checkpoint."""

    run_dir: Path
    out: Path
    log: Path
    proc: subprocess.Popen[bytes]

    def done(self) -> bool:
        return self.proc.poll() is not None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the eval process (TimeoutError after `timeout` s); its exit status."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(
                f"the eval of {self.run_dir.name} is still running after {timeout} s"
            ) from None

    def _check(self, timeout: float | None) -> None:
        code = self.wait(timeout)
        if code == 0:
            return
        lines = [s for s in self.log.read_text(errors="replace").splitlines() if s.startswith("evaluate: ")]
        why = lines[-1].removeprefix("evaluate: ") if lines else f"exit status {code}, see {self.log}"
        raise (EvaluateRefused if code == 2 else EvaluateFailed)(why)

    @property
    def results_csv(self) -> Path:
        return self.out / "results.csv"

    def result(self, timeout: float | None = None, level: str = "task") -> Any:
        """The per-task table as a pandas DataFrame (one row per task: n, sr, sr_lo, sr_hi, sr_k,
        hsr..., errored), waiting for the eval; `level="all"` adds the scene and total rows."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "Evaluation.result() returns a pandas DataFrame and this Python has no pandas: install "
                f"it, or read {self.results_csv} (written once the eval is done)"
            ) from None
        self._check(timeout)
        table = pd.read_csv(self.results_csv)
        return table if level == "all" else table[table["level"] == level].reset_index(drop=True)

    def episodes(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every episode record of the run (the latest per seed), waiting for the eval."""
        from harness.episode.records import read_tree

        self._check(timeout)
        return list(read_tree(self.run_dir / "eval_result").records.values())

    def cancel(self) -> None:
        """Stop the eval process and its pool (workers release their leases; re-running resumes)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)


def _sim_python(env: Mapping[str, str]) -> str:
    root = Path(env.get("EVAL_ROOT") or CODE_ROOT)
    return env.get("SIM_PY") or str(root / "envs" / "sim" / "bin" / "python")


def evaluate(
    ckpt_dir: str | os.PathLike[str],
    benchmark: str | None = None,
    episodes: int | None = None,
    *,
    policy: str | None = None,
    queue: str | os.PathLike[str] | None = None,
    bench_config: str | None = None,
    nodes: int | None = None,
    run: str | None = None,
    runs_root: str | os.PathLike[str] | None = None,
    knobs: Mapping[str, str] | None = None,
    tensorboard: str | os.PathLike[str] | None = None,
    wandb_project: str | None = None,
    wandb_run_id: str | None = None,
    wandb_mode: str = "offline",
    niceness: int = 10,
) -> Evaluation:
    """Start the eval of the checkpoint `ckpt_dir` in the background and return its handle at once.

    `episodes` is EVAL_TEST_NUM (seeds per task), `benchmark` BENCHMARK, `policy` POLICY; every
    other knob comes from `knobs`, then the environment. `queue` defaults to the benchmark's queue
    file (seeds/maniskill_queue.txt for ManiSkill3). Raises EvaluateRefused at once when the
    checkpoint or the queue does not exist, or a knob is refused; the rest is checked by the eval
    process and raised by `result()`."""
    env = dict(os.environ)
    env.update(knobs or {})
    ckpt = Path(ckpt_dir).resolve()
    if not ckpt.exists():
        raise EvaluateRefused(f"checkpoint {ckpt_dir} does not exist")
    root = Path(env.get("EVAL_ROOT") or CODE_ROOT)
    given = (("BENCHMARK", benchmark), ("EVAL_TEST_NUM", episodes), ("POLICY", policy),
             ("BENCH_CONFIG", bench_config), ("POOL_NODES", nodes))  # fmt: skip
    env.update({k: str(v) for k, v in given if v is not None})
    try:  # every knob checked here, once: a bad one is refused before anything starts
        bench = Settings.from_env(env).benchmark
    except ValueError as exc:
        raise EvaluateRefused(" ".join(str(exc).split())) from None
    if queue is None and bench not in DEFAULT_QUEUES:
        raise EvaluateRefused(f"benchmark {bench}: no default queue file, pass queue=...")
    queue_file = Path(queue) if queue is not None else root / DEFAULT_QUEUES[bench]
    if not queue_file.is_file():
        raise EvaluateRefused(f"queue file {queue_file} does not exist")
    name, prefix = names_for(ckpt)
    name = run or name
    runs = Path(runs_root or env.get("RUNS_ROOT") or root / "runs").resolve()
    env.update(CKPT_NAME=str(ckpt), RUNS_ROOT=str(runs), STUDY_RUN=name)
    env.setdefault("PYTHONPATH", str(root))
    curve = runs / f"{prefix or name}_curve"
    out = curve / name
    out.mkdir(parents=True, exist_ok=True)
    argv = [
        _sim_python(env),
        "-P",
        "-m",
        "harness.launch.evaljob",
        str(runs / name),
        "--queue",
        str(queue_file),
    ]
    argv += ["--out", str(out)] + (["--series", prefix] if prefix else [])
    for flag, value in (("--tensorboard", tensorboard), ("--wandb-project", wandb_project),
                        ("--wandb-run-id", wandb_run_id), ("--wandb-mode", wandb_mode)):  # fmt: skip
        argv += [flag, str(value)] if value else []
    log = out / f"evaluate-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    with open(log, "ab") as sink:
        sink.write(f"$ {json.dumps(argv)}\n".encode())
        sink.flush()
        proc = subprocess.Popen(
            argv, env=env, cwd=root, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=(lambda: os.nice(niceness)) if niceness else None,
        )  # fmt: skip
    return Evaluation(runs / name, out, log, proc)
