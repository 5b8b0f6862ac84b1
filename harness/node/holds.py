"""Holds on node-cache entries: what a node run stages or uses is never pruned while it runs.

Why a lock and not a pid: every job on a node shares its cache, and jobs in containers (Slurm with
pyxis/enroot) run in PID namespaces of their own, where another job's pid means nothing, or another
process. A hold is a shared `flock` on a mark file inside the entry, kept by a small keeper process
for as long as the node script lives; the kernel drops it when the keeper exits, in whichever
namespace that was. `held` asks the kernel, not /proc: an exclusive non-blocking lock on a mark
fails while any hold on it lives. Both run under the node lock, so no hold is taken between a
`held` that found none and the pruning that follows it.

Run as `python -m harness.node.holds <holder pid> <mark>...` it is the keeper.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import select
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path

from harness.process.failures import Failed, run_command
from harness.queue.owner import start_ticks

HOLD_PREFIX = ".held-by."  # + <holder pid>.<token>: a mark a keeper holds a shared lock on
READY = "held"
POLL_S = 2.0  # how often a keeper without pidfd support looks whether its holder still lives
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


class HoldError(Failed):
    """The keeper could not take the holds; the message names the entries."""


def hold(entry_roots: Collection[Path], holder: int) -> None:
    """Hold every entry in `entry_roots` for as long as process `holder` (of this PID namespace)
    lives: returns once the keeper holds them all."""
    if not entry_roots:
        return
    marks = [str(root / f"{HOLD_PREFIX}{holder}.{secrets.token_hex(4)}") for root in entry_roots]
    path = os.pathsep.join([str(_PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")])
    keeper = subprocess.Popen(
        [sys.executable, "-m", "harness.node.holds", str(holder), *marks],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
        env={**os.environ, "PYTHONPATH": path},
        start_new_session=True,  # not in the node script's process group: it outlives a ^C by a moment only
    )
    assert keeper.stdout is not None and keeper.stderr is not None
    answer = keeper.stdout.readline().strip()
    keeper.stdout.close()
    if answer != READY:
        keeper.wait()
        reason = keeper.stderr.read().strip().splitlines()[-1:] or [f"exit {keeper.returncode}"]
        raise HoldError(f"cannot hold the node-cache entries {marks}: {reason[0]}")
    keeper.stderr.close()


def held(entry_root: Path) -> bool:
    """True while some live keeper holds the entry; the marks of keepers that are gone are dropped."""
    alive = False
    for mark in entry_root.glob(f"{HOLD_PREFIX}*"):
        try:
            fd = os.open(mark, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            alive = True
        else:
            mark.unlink(missing_ok=True)  # no keeper holds it: its holder is gone
        finally:
            os.close(fd)
    return alive


def keep(holder: int, marks: list[str]) -> None:
    """The keeper: lock every mark shared, say so on stdout, then wait until `holder` is gone."""
    ticks = start_ticks(holder)
    if ticks is None:
        raise HoldError(f"holder pid {holder} does not exist")
    fds = []
    for mark in marks:
        fd = os.open(mark, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        fds.append(fd)
    print(READY, flush=True)
    sys.stdout.close()  # the caller's read returns: the holds are in place
    _wait_for_exit(holder, ticks)


def _wait_for_exit(pid: int, ticks: int) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel or Python: look now and then
        while start_ticks(pid) == ticks:
            time.sleep(POLL_S)
        return
    if start_ticks(pid) == ticks:  # still the holder, not a process that reused its pid
        select.select([pidfd], [], [])


def main() -> None:
    """`python -m harness.node.holds HOLDER_PID MARK...`: hold MARKs until HOLDER_PID exits."""
    keep(int(sys.argv[1]), sys.argv[2:])


if __name__ == "__main__":
    sys.exit(run_command("holds", main))
