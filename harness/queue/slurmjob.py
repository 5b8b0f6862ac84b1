"""What Slurm says about jobs: is a job still alive, and when does this allocation end.

The reaper asks whether a lease owner's job still runs (a dead job frees its leases at once instead
of after LEASE_TTL); the worker asks when its own allocation ends so it never claims a unit it
cannot finish. Both answer "unknown" (None) when Slurm is not there or does not answer, and callers
then fall back to heartbeats and to claiming freely.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from datetime import datetime

_ALIVE = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING",
          "STAGE_OUT", "SIGNALING", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "STOPPED"}  # fmt: skip


def _run(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def job_alive(job_id: str) -> bool | None:
    """True/False when squeue (or sacct, for a purged job) knows; None when nobody can say."""
    out = _run(["squeue", "-h", "-j", job_id, "-o", "%T"])
    if out is not None and out.returncode == 0:
        states = out.stdout.split()
        if states:
            return any(state in _ALIVE for state in states)
    elif out is None or "invalid job id" not in out.stderr.lower():
        return None
    acct = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"])
    if acct is not None and acct.returncode == 0 and acct.stdout.strip():
        return acct.stdout.split()[0].upper() in _ALIVE
    return False if out is not None else None


def allocation_end() -> float | None:
    """Epoch seconds at which this process's Slurm allocation ends, if inside one and known."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    env_end = os.environ.get("SLURM_JOB_END_TIME")
    if env_end and env_end.isdigit():
        return float(env_end)
    out = _run(["squeue", "-h", "-j", job, "-o", "%e"])
    if out is None or out.returncode != 0:
        return None
    text = out.stdout.strip()
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None  # "N/A" or "UNLIMITED"


def time_for_another(end: float | None, unit_times: list[float]) -> bool:
    """Whether a unit can still finish before the allocation ends at `end`, by the mean of the
    `unit_times` so far (with a 20% margin); always outside an allocation or before any unit ran."""
    if end is None or not unit_times:
        return True
    return time.time() + 1.2 * sum(unit_times) / len(unit_times) < end
