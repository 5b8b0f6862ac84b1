"""How many workers and sim slots a node runs when no knob says: sized from what the allocation gives.

A node left at the defaults (`CPU_WORKERS=auto`, `SIMS_PER_WORKER=auto`) should fill itself, not
run one simulator on a 64-core node. The rule, each input read from the allocation, not the machine:
- cores: the smallest of SLURM_CPUS_ON_NODE, this process's CPU affinity (the cgroup cpuset) and
  the cgroup CPU quota (`cpu.max`); memory: the cgroup limit (`memory.max`), else the machine's;
  GPUs: CUDA_VISIBLE_DEVICES, else `nvidia-smi -L` outside Slurm. A local pool's N "nodes" share
  one machine (LOCAL_POOL_NODES, set by `harness.launch.pools`): each takes 1/N of cores and memory.
- the sim budget: one sim per core, and SIM_HOST_GIB of host memory per sim; never more sims than that.
- with GPUs: WORKERS_PER_GPU workers per GPU (one model copy each); `SIMS_PER_WORKER=auto` stays
  the worker's measured choice (`harness.worker.slot_count`), bounded by the worker's share of the
  budget, passed to it as EVAL_WORKER_CORES.
- without GPUs the model shares the sims' cores, so the budget is spent on workers of one sim slot each
  (`CPU_WORKERS=auto`), or of SIMS_PER_WORKER sim slots when that is set.
An explicit knob always wins, even over the budget (the line then says so).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.config.settings import Settings

SIM_HOST_GIB = 2.0  # host memory per sim: its process peaks at 0.9-1.1 GiB RSS, + encoder and worker
CGROUP = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class NodeResources:
    cores: int
    cores_from: str  # which limit bound the count
    gpus: list[str]
    mem_gib: float | None  # None: unknown
    mem_from: str


@dataclass(frozen=True)
class Sizing:
    devices: list[str]  # CUDA_VISIBLE_DEVICES of each worker ("" without a GPU)
    sims_per_worker: str  # what each worker gets as SIMS_PER_WORKER: a count or `auto`
    worker_cores: int  # the cores each worker's sims may use (auto's core bound)
    why: str  # the one log line: the choice and what it came from


def visible_gpus(env: Mapping[str, str] = os.environ) -> list[str]:
    """GPU device ids this node task may use: Slurm's CUDA_VISIBLE_DEVICES, else nvidia-smi outside Slurm."""
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible and visible != "NoDevFiles":
        return [d.strip() for d in visible.split(",") if d.strip()]
    if "SLURM_JOB_ID" not in env and shutil.which("nvidia-smi"):
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        if done.returncode == 0:
            return [str(i) for i, line in enumerate(done.stdout.splitlines()) if line.startswith("GPU ")]
    return []


def _cgroup_cpus(cgroup: Path) -> int | None:
    """The cgroup v2 CPU quota in whole cores (rounded up), None when unlimited or unreadable."""
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        return None


def _memory_gib(cgroup: Path, meminfo: Path) -> tuple[float | None, str]:
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            return int(limit) / 2**30, "cgroup memory.max"
    except (OSError, ValueError):
        pass
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20, "MemTotal"
    except (OSError, ValueError, IndexError):
        pass
    return None, "unknown"


def detect(
    env: Mapping[str, str] = os.environ, cgroup: Path = CGROUP, meminfo: Path = MEMINFO
) -> NodeResources:
    """What this node task's allocation gives it (its share, in a local pool)."""
    limits = {"affinity": len(os.sched_getaffinity(0))}
    slurm = env.get("SLURM_CPUS_ON_NODE", "").strip()
    if slurm.isdigit() and int(slurm) > 0:
        limits["SLURM_CPUS_ON_NODE"] = int(slurm)
    quota = _cgroup_cpus(cgroup)
    if quota is not None:
        limits["cgroup cpu.max"] = quota
    cores_from = min(limits, key=lambda name: limits[name])
    cores = limits[cores_from]
    mem_gib, mem_from = _memory_gib(cgroup, meminfo)
    share = env.get("LOCAL_POOL_NODES", "").strip()
    if share.isdigit() and int(share) > 1:
        cores, cores_from = max(1, cores // int(share)), f"{cores_from} / {share} local nodes"
        mem_gib = None if mem_gib is None else mem_gib / int(share)
    return NodeResources(cores, cores_from, visible_gpus(env), mem_gib, mem_from)


def size_node(res: NodeResources, settings: Settings) -> Sizing:
    """Workers, their devices and their slot counts for `res` under `settings` (SIMS_PER_WORKER,
    WORKERS_PER_GPU, CPU_WORKERS: checked when the settings were built)."""
    by_memory = math.floor(res.mem_gib / SIM_HOST_GIB) if res.mem_gib is not None else res.cores
    budget = max(1, min(res.cores, by_memory))
    slots = settings.sims_per_worker
    if res.gpus:
        per_gpu = settings.workers_per_gpu
        devices = [d for d in res.gpus for _ in range(per_gpu)]
        how = f"{len(res.gpus)} GPUs x WORKERS_PER_GPU={per_gpu}"
    else:
        workers = settings.cpu_workers
        if workers is None:
            slots = slots or 1  # the model shares the sims' cores: the budget goes to whole workers
            workers = max(1, budget // slots)
            how = f"CPU_WORKERS=auto: {workers} (no GPU: the budget in workers of {slots} slot(s))"
        else:
            how = f"CPU_WORKERS={workers}"
        devices = [""] * workers
    share = max(1, budget // len(devices))
    spw = "auto" if slots is None else str(slots)
    total = f"up to {share} sims each (auto)" if slots is None else f"{slots} sim slot(s) each"
    over = (
        f"; explicit knobs exceed the budget of {budget} sims"
        if slots is not None and slots * len(devices) > budget
        else ""
    )
    mem = f"{res.mem_gib:.1f} GiB ({res.mem_from})" if res.mem_gib is not None else "memory unknown"
    why = (
        f"sizing: {len(devices)} workers x {total}; {how}; budget {budget} sims from {res.cores} cores "
        f"({res.cores_from}), {mem} at {SIM_HOST_GIB:g} GiB a sim, "
        f"{len(res.gpus) or 'no'} GPUs{over}"
    )
    return Sizing(devices, spw, share, why)
