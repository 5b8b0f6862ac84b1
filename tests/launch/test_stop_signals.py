"""An orchestrator stopped by SIGTERM stops its pools, even when a second SIGTERM lands while it
does (`harness.launch.pools.stop_on_signals`): the second one must not cut `terminate_all` short
and leave a node's processes running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Starts a process group that ignores SIGTERM (a node still draining: SIGKILL after the grace),
# registers it as a pool, and sits in `finally: terminate_all()` once SIGTERM arrives.
ORCHESTRATOR = """
import subprocess, sys, time
from harness.launch import pools
pools.stop_on_signals()
node = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(600)"],
    start_new_session=True, stdout=subprocess.PIPE)
node.stdout.readline()  # its SIGTERM handler is in place
started = pools.Started([node])
with pools._live_lock:
    pools._live.add(started)
try:
    print(node.pid, flush=True)  # inside the try: a SIGTERM from here on lands in it
    time.sleep(600)
finally:
    print("stopping", flush=True)
    pools.terminate_all(grace_s=2.0)
    print("stopped", flush=True)
"""


def test_a_second_sigterm_does_not_leave_the_pools_running() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", ORCHESTRATOR], env=env, stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    assert proc.stdout is not None
    node = int(proc.stdout.readline())
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout.readline().strip() == "stopping"
        proc.send_signal(signal.SIGTERM)  # while terminate_all waits out the node's grace
        out, _ = proc.communicate(timeout=30)
        assert "stopped" in out, f"terminate_all was cut short (exit {proc.returncode})"
        assert proc.returncode == 128 + signal.SIGTERM
        deadline = time.monotonic() + 5
        while _alive(node) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(node), "the node's process outlived its orchestrator"
    finally:
        proc.kill()
        if _alive(node):
            os.kill(node, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
