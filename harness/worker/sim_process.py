"""One run of the sim client over some seeds of a unit, watched for stalls, timeouts and fencing.

The sim client replaces its progress file (`{"seed", "step"}`) at every step. A client whose progress
file has not changed for STALL_TIMEOUT is killed; so is one still running at the unit's deadline,
one whose lease was lost, and one the worker is told to stop. The outcome says which seed was
running, so the worker can record that episode as errored.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.worker import children

POLL_S = 0.2


@dataclass
class SimOutcome:
    returncode: int
    killed: str | None  # why the worker killed it: stalled, unit timeout, cancelled, model server died
    seed: int | None  # the seed running at the end (from the progress file), if any


def read_progress(path: Path) -> tuple[bytes, int | None]:
    """The progress file's raw content (for change detection) and its seed."""
    try:
        raw = path.read_bytes()
        seed = json.loads(raw).get("seed")
        return raw, seed if isinstance(seed, int) else None
    except (OSError, ValueError, AttributeError):
        return b"", None


def run_sim(
    argv: list[str],
    env: dict[str, str],
    on_line: Callable[[str], None],
    progress: Path,
    stall_s: float,
    deadline: float,
    cancel: list[threading.Event],
    peer_alive: Callable[[], bool] | None = None,
) -> SimOutcome:
    """Run the client to its end, passing each line it prints to `on_line`; kill it on a stall, at
    `deadline` (monotonic), on any `cancel` event, or as soon as its peer (the model server) is
    dead: a client dialling a dead server's stale ready file would otherwise wait for the stall."""
    progress.unlink(missing_ok=True)
    proc = children.spawn(argv, None, env)
    reader = threading.Thread(target=_relay, args=(proc, on_line), daemon=True)
    reader.start()
    last_raw, seed = b"", None
    last_change = time.monotonic()
    killed = None
    while proc.poll() is None:
        time.sleep(POLL_S)
        raw, now_seed = read_progress(progress)
        now = time.monotonic()
        if raw != last_raw:
            last_raw, last_change = raw, now
            seed = now_seed if now_seed is not None else seed
        if now - last_change > stall_s:
            killed = "stalled"
        elif now > deadline:
            killed = "unit timeout"
        elif any(event.is_set() for event in cancel):
            killed = "cancelled"
        elif peer_alive is not None and not peer_alive():
            killed = "model server died"
        if killed:
            children.stop(proc)
            break
    returncode = proc.wait()
    reader.join()
    _, final_seed = read_progress(progress)
    return SimOutcome(returncode, killed, final_seed if final_seed is not None else seed)


def _relay(proc: subprocess.Popen, on_line: Callable[[str], None]) -> None:
    for raw in proc.stdout:
        on_line(raw.decode(errors="replace").rstrip())
