"""Processes a test left behind: none of a run's processes may outlive it.

A run's workers, model servers, sim clients and their encoders all carry the run in their command
line or environment (RUN_DIR, the test's tmp dir), so /proc tells which are still there once the
test has stopped its workers: an orphan (ppid 1, still listening) is a lifetime bug, not noise.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def _running(proc: Path) -> bool:
    """Not a zombie (a zombie runs nothing; only its parent's wait removes it)."""
    try:
        return proc.joinpath("stat").read_bytes().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def leftovers(marker: str) -> list[str]:
    """`<pid> <cmdline>` of each live process but this one whose command line or environment
    names `marker`."""
    found = []
    needle = marker.encode()
    for proc in Path("/proc").glob("[0-9]*"):
        if int(proc.name) == os.getpid() or not _running(proc):
            continue
        try:
            cmdline = proc.joinpath("cmdline").read_bytes()
            environ = proc.joinpath("environ").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if needle in cmdline or needle in environ:
            words = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
            found.append(f"{proc.name} {words}")
    return found


def wait_for_no_leftovers(marker: str, timeout: float = 60.0) -> list[str]:
    """Wait (generously: a busy machine is slow to deliver death signals) until no process names
    `marker`; those still there at the deadline."""
    deadline = time.monotonic() + timeout
    while (found := leftovers(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found
