"""A pool's refusals on the launcher's own output: checked before any node starts, and relayed from
the workers' logs when they refused anyway.

Why apart: every launcher (the local pool, the orchestrators) must say *why* a launch was refused
in one or two lines naming the input, instead of `nodes finished with status 1; logs in …`. The
check is the workers' own (`verify_environment`, the unit plan), run once here; the simulator pin
is left to the nodes, which install it into their staged env.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from harness.config.contract import verify_environment
from harness.config.manifest import ContractMismatch, ManifestError
from harness.config.plan import run_units
from harness.config.rundir import QueueFileError, RunDir
from harness.config.seedbank import SeedBankError

REFUSALS = ("refusing to run:", "cannot run:", "] error:")  # what workers and node scripts log


def check_run(run: RunDir, env: Mapping[str, str] = os.environ) -> str | None:
    """Why no worker could run `run` in this environment, or None when they can."""
    if not run.queue.is_file():
        return f"{run.root} is not a run dir (no queue.txt): create it with scripts/new_run.py"
    try:
        if run.manifest.exists():
            verify_environment(run.root, env, check_pin=False)
        if not run_units(run):
            return f"{run.queue} plans no unit"
    except (ContractMismatch, ManifestError, QueueFileError, SeedBankError, ValueError) as exc:
        return str(exc)
    return None


def first_refusal(logs: Path) -> str | None:
    """The first refusal a worker or node script logged under `logs`, with its detail lines."""
    for log in sorted(logs.glob("worker-*.log")) + sorted(logs.glob("node-*.log")):
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines):
            if any(mark in line for mark in REFUSALS):
                detail = [line.strip()]
                detail += [more.rstrip() for more in lines[i + 1 :] if more.startswith("  ")][:20]
                return f"{log.name}: " + "\n".join(detail)
    return None
