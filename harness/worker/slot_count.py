"""SIMS_PER_WORKER: how many sim slots a worker runs against its one model server.

An integer 1..MAX_SLOTS is taken as given (1 is one sim per model server). `auto` (the default;
a CPU-only node's sizing turns it into 1, `harness.node.sizing`) lets the worker's first unit run
alone on slot 0 and then picks K from what that unit measured, as the smallest of three bounds,
and logs them:
- the model: a slot waits for the model `model_s` of every `sim_s + model_s` second, so an
  unbatched server is busy all the time at K = (sim_s + model_s) / model_s slots (rounded up);
- the cores: each slot steps its simulator on about one core: the node's cores less its load, and
  at most this worker's share of the node (EVAL_WORKER_CORES, set by the node script's sizing);
- the GPU, where there is one: SLOT_GPU_GIB of free GPU memory per slot for the model's batch.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from dataclasses import dataclass

MAX_SLOTS = 64
SLOT_GPU_GIB = 1.0  # free GPU memory kept per slot (one more batch item of activations)


@dataclass(frozen=True)
class Measured:
    sim_s: float  # simulator seconds of the measured episodes
    model_s: float  # policy round trips of the same episodes
    steps: int
    free_cores: float
    gpu_free_gib: float | None  # None: no GPU visible


def measure(records: list[dict]) -> Measured:
    """Sums over the trial records of the first unit, and what the node has free now."""
    trials = [r for r in records if r.get("error") is None and r.get("steps")]
    sim_s = sum(float(r["sim_s"]) for r in trials)
    model_s = sum(float(r["model_s"]) for r in trials)
    steps = sum(int(r["steps"]) for r in trials)
    cores = len(os.sched_getaffinity(0))
    free = max(1.0, cores - os.getloadavg()[0] + 1)  # + 1: our own slot's load is in the average
    share = os.environ.get("EVAL_WORKER_CORES", "").strip()
    if share.isdigit() and int(share) > 0:  # the node's other workers will load the rest soon
        free = min(free, float(share))
    return Measured(sim_s, model_s, steps, free, gpu_free_gib())


def gpu_free_gib() -> float | None:
    """Free memory of the first visible GPU (nvidia-smi), None without one."""
    if shutil.which("nvidia-smi") is None:
        return None
    device = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    argv = ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits", "-i", device]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=True)
        return float(done.stdout.split()[0]) / 1024
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def choose(m: Measured) -> tuple[int, str]:
    """The slot count for `m`, and a line saying why."""
    if m.steps == 0:
        return 1, "SIMS_PER_WORKER=auto: 1 (the first unit had no trial episode to measure)"
    per_step = f"sim {m.sim_s / m.steps * 1000:.1f} ms/step, model {m.model_s / m.steps * 1000:.1f} ms/step"
    by_model = math.ceil((m.sim_s + m.model_s) / m.model_s) if m.model_s > 0 else MAX_SLOTS
    bounds = {"model": by_model, "cores": math.floor(m.free_cores)}
    if m.gpu_free_gib is not None:
        bounds["GPU memory"] = math.floor(m.gpu_free_gib / SLOT_GPU_GIB)
    count = max(1, min(MAX_SLOTS, *bounds.values()))
    gpu = f", {m.gpu_free_gib:.1f} GiB GPU free" if m.gpu_free_gib is not None else ", no GPU"
    said = ", ".join(f"{name} {value}" for name, value in bounds.items())
    return count, (
        f"SIMS_PER_WORKER=auto: {count} ({per_step}; {m.free_cores:.1f} free cores{gpu}; bounds: {said})"
    )
