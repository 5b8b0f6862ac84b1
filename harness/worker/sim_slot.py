"""A worker's sim slot: one persistent sim process with its own lease queue, progress file and writer id.

A worker runs SIMS_PER_WORKER slots against its one model server. Each slot claims, heartbeats and
releases its own leases (its own `LeaseQueue`, so a stalled slot loses only its own unit), writes
its own metrics file (`writer_id`: no two writers ever append to one file) and is watched through
its own progress file. Slot 0's writer id is the worker's id, so one slot is exactly the shape of a
worker before slots existed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness.queue.leases import LeaseQueue
from harness.queue.units import Unit
from harness.worker.sim_process import SimProcess


def writer_id(worker_id: str, index: int) -> str:
    """Slot `index`'s writer id: the worker's own for slot 0, `<worker>-s<index>` for the others."""
    return worker_id if index == 0 else f"{worker_id}-s{index}"


def serve_argv(env: dict[str, str], ready_file: Path) -> list[str]:
    """The persistent sim process: the sim client in `--serve` mode (job lines on stdin)."""
    root = Path(env.get("EVAL_ROOT", "."))
    return [
        env.get("SIM_PY", sys.executable), str(root / "scripts" / "eval_policy_client.py"), "--serve",
        "--ready-file", str(ready_file), "--worker-pid", str(os.getpid()),
    ]  # fmt: skip


@dataclass
class SimSlot:
    index: int
    writer_id: str
    queue: LeaseQueue
    progress: Path
    sim: SimProcess
    # (task, task_config) of the units its current process ran: its claims prefer those (affinity)
    held: set[tuple[str, str]] = field(default_factory=set)

    def holds(self, unit: Unit) -> bool:
        """True when this slot's sim process already ran `unit`'s task and config."""
        return (unit.task, unit.task_config) in self.held

    def job(self, run_dir: Path, unit: Unit, seeds: list[int]) -> dict:
        """The job line of `seeds` of `unit` (harness/episode/simserver.py reads it)."""
        return {
            "run_dir": str(run_dir), "scene": unit.scene, "task": unit.task, "seeds": list(seeds),
            "writer_id": self.writer_id, "progress_file": str(self.progress),
        }  # fmt: skip
