"""A pool's refusals on the launcher's own output: checked before any node starts, and relayed from
the workers' logs when they refused or failed anyway.

Why apart: every launcher (the local pool, the orchestrators) must say *why* a launch was refused
in one or two lines naming the input, instead of `nodes finished with status 1; logs in …`. The
check is the workers' own (every knob against its declaration, `verify_environment`, the unit
plan), run once here; the simulator pin is left to the nodes, which install it into their staged
env. A worker's log tells a refusal (its input: exit 2) from a failure (`cannot run:`, e.g. a model
server that keeps dying: exit 1), so the pool exits with the status that says which.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from harness.config.contract import verify_environment
from harness.config.manifest import ContractMismatch, ManifestError
from harness.config.rundir import QueueFileError, RunDir
from harness.config.seedbank import SeedBankError
from harness.config.settings import Settings
from harness.config.validate import check_node_knobs
from harness.episode.serverdial import probe
from harness.runqueue import run_units

REFUSALS = ("refusing to run:", "] error:")  # what workers and node scripts log when input is refused
FAILURES = ("cannot run:",)  # what a worker logs when the machine or a peer let it down
EXITED = ("worker: ", "node: ")  # how run_command's line starts in these logs (harness.process.failures)
DISK_FULL = "No space left on device"  # named first: the one cause that stops every node at once


def check_run(run: RunDir, env: Mapping[str, str] = os.environ) -> str | None:
    """Why no worker could run `run` in this environment, or None when they can."""
    if not run.queue.is_file():
        return f"{run.root} is not a run dir (no queue.txt): create it with scripts/new_run.py"
    try:
        check_node_knobs(env)
        if run.manifest.exists():
            verify_environment(run.root, env, check_installed=False, probe=probe(Settings.from_env(env)))
        if not run_units(run):
            return f"{run.queue} plans no unit"
    except (ContractMismatch, ManifestError, QueueFileError, SeedBankError, ValueError) as exc:
        return str(exc)
    return None


def first_refusal(logs: Path) -> str | None:
    """The first refusal a worker or node script logged under `logs`, with its detail lines."""
    return _first_logged(logs, REFUSALS)


def first_failure(logs: Path) -> str | None:
    """The first failure (not a refusal) a worker logged under `logs`, with its detail lines."""
    return _first_logged(logs, FAILURES)


def causes(logs: Path) -> list[str]:
    """Each log's last error line (`<log>: <line>`), a full disk first: why nodes exited non-zero.
    Why the last: a worker that failed logs its cause last (run_command's line, or `cannot run:`)."""
    found = []
    for log in sorted(logs.glob("node-*.log")) + sorted(logs.glob("worker-*.log")):
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        marks = REFUSALS + FAILURES
        errors = [line.strip() for line in lines if line.startswith(EXITED) or any(m in line for m in marks)]
        if errors:
            found.append(f"{log.name}: {errors[-1]}")
    return sorted(found, key=lambda cause: DISK_FULL not in cause)


def _first_logged(logs: Path, marks: tuple[str, ...]) -> str | None:
    for log in sorted(logs.glob("worker-*.log")) + sorted(logs.glob("node-*.log")):
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines):
            if any(mark in line for mark in marks):
                detail = [line.strip()]
                detail += [more.rstrip() for more in lines[i + 1 :] if more.startswith("  ")][:20]
                return f"{log.name}: " + "\n".join(detail)
    return None
