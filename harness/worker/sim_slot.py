"""A worker's sim slot: one persistent sim process with its own lease queue, progress file and writer id.

A worker runs SIMS_PER_WORKER slots against its one model server. Each slot claims, heartbeats and
releases its own leases (its own `LeaseQueue`, so a stalled slot loses only its own unit), writes
its own record file (`writer_id`: no two writers ever append to one file) and is watched through
its own progress file. Slot 0's writer id is the worker's id, so one slot is exactly the shape of a
worker before slots existed.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.queue.leases import LeaseQueue
from harness.queue.units import Unit
from harness.runqueue import open_queue
from harness.worker.model_server_process import ModelServerProcess
from harness.worker.sim_process import SimOutcome, SimProcess, read_progress
from harness.worker.unit_records import record_errored
from harness.worker.worklog import WorkerLog

SEED_IN_LINE = re.compile(r"\bseed (\d+)\b")


def episode_wall_s(progress: Path, seed: int, assignment_wall_s: float) -> float:
    """How long `seed`'s episode ran: from the `started_at` its progress file gives to now, within
    the assignment's wall time (a clock step cannot stretch it). `assignment_wall_s` when the file
    names no start of this seed: the episode never began, so the attempt's time is all the assignment's."""
    raw, named = read_progress(progress)
    started = json.loads(raw).get("started_at") if named == seed else None
    if not isinstance(started, int | float) or isinstance(started, bool):
        return assignment_wall_s
    return round(min(max(time.time() - started, 0.0), assignment_wall_s), 3)


def writer_id(worker_id: str, index: int) -> str:
    """Slot `index`'s writer id: the worker's own for slot 0, `<worker>-s<index>` for the others."""
    return worker_id if index == 0 else f"{worker_id}-s{index}"


def serve_argv(
    env: dict[str, str], ready_file: Path, run: Path | None = None, progress: Path | None = None
) -> list[str]:
    """The persistent sim process: the sim client, given assignment lines on stdin; with `run`, it runs that
    run's canary in its warm-up (overlapping the model server's load), replacing `progress`."""
    root = Path(env.get("EVAL_ROOT", "."))
    argv = [
        env.get("SIM_PY", sys.executable), str(root / "scripts" / "eval_policy_client.py"),
        "--ready-file", str(ready_file), "--worker-pid", str(os.getpid()),
    ]  # fmt: skip
    if run is not None:
        argv += ["--canary-run", str(run)]
    if progress is not None:
        argv += ["--progress-file", str(progress)]
    return argv


@dataclass
class SimSlot:
    index: int
    writer_id: str
    queue: LeaseQueue
    progress: Path
    sim: SimProcess
    log: WorkerLog
    settings: Settings  # the worker's; its contract is set once verified
    # (task, task_config) of the units its current process ran: its claims prefer those (affinity)
    ran: set[tuple[str, str]] = field(default_factory=set)

    def has_run(self, unit: Unit) -> bool:
        """True when this slot's sim process already ran `unit`'s task and config (its env is kept)."""
        return (unit.task, unit.task_config) in self.ran

    def settle(
        self, run: RunDir, unit: Unit, outcome: SimOutcome, todo: list[int], recorded: set[int],
        info: dict, wall_s: float,
    ) -> str | None:  # fmt: skip
        """Log how the sim process ended `todo`; record the running episode as errored when it was
        killed or exited mid-episode, with that episode's wall time (`wall_s` is the whole assignment's).
        What went wrong (None when the unit ran or was cancelled)."""
        if outcome.returncode == 0 and outcome.killed is None:
            self.log(f"sim client finished {len(todo)} seeds", unit)
            return None
        if outcome.worker_stopped:
            self.log("sim client ended early: this worker was stopped; the seeds left run again", unit)
            return None
        why = outcome.killed or f"sim client exited with {outcome.returncode}"
        if outcome.killed == "cancelled":
            self.log("sim client stopped", unit, outcome.seed)
            return None
        seed = outcome.seed
        if seed is None:  # killed before its first step: the first seed without a record was running
            seed = next((s for s in todo if s not in recorded), None)
        if seed is not None and seed not in recorded:
            episode_s = episode_wall_s(self.progress, seed, wall_s)
            record_errored(run, unit, seed, why, info, self.writer_id, episode_s, self.settings)
            self.log(f"{why}: episode recorded as errored", unit, seed)
        else:
            self.log(f"{why}: no episode was running, nothing recorded", unit, seed)
        return why

    def line_logger(self, unit: Unit) -> Callable[[str], None]:
        """The sim process's output goes into the worker's log, each line tagged with unit and seed
        (the seed the line names, else the one the progress file says is running)."""

        def relay(line: str) -> None:
            seed = SEED_IN_LINE.search(line)
            self.log(f"sim: {line}", unit, int(seed.group(1)) if seed else read_progress(self.progress)[1])

        return relay

    def assignment(self, run_dir: Path, unit: Unit, seeds: list[int]) -> dict:
        """The assignment line of `seeds` of `unit` (harness/episode/simserver.py reads it)."""
        return {
            "run_dir": str(run_dir), "scene": unit.scene, "task": unit.task, "seeds": list(seeds),
            "writer_id": self.writer_id, "progress_file": str(self.progress),
        }  # fmt: skip


def open_slot(
    run: RunDir, index: int, worker_log: WorkerLog, units: list[Unit], env: dict[str, str],
    server: ModelServerProcess, tmp: Path, settings: Settings,
) -> SimSlot:  # fmt: skip
    """Slot `index` of the worker that logs to `worker_log`: its lease queue over `units`, its
    progress file in `tmp`, its sim process (started at its first unit, or by `start()`) dialling
    `server`."""
    wid = writer_id(worker_log.worker_id, index)
    log = worker_log if index == 0 else WorkerLog(wid)
    ran: set[tuple[str, str]] = set()

    def started(pid: int) -> None:
        ran.clear()  # a new process has run nothing yet
        log(f"sim process pid {pid} started")

    progress = tmp / f"progress-{index}.json"
    sim = SimProcess(serve_argv(env, server.client_ready_file, run.root, progress), env, started)
    queue = open_queue(run, wid, settings, units)
    return SimSlot(index, wid, queue, progress, sim, log, settings, ran)
