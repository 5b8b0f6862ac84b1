"""Start node pools on a run dir: `srun` over Slurm nodes, or N local "nodes" (scripts/run_local.sh).

The orchestrators say what to run (a run, a node count, the node scripts' environment); LAUNCHER says
how, so the Slurm and the local path share everything else. Every pool's output goes to a log under
the run's `logs/`; pools still running when the orchestrator is stopped are terminated with it, so
an interrupted orchestrator leaves no half-owned work behind beyond what lease expiry recovers.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.rundir import RunDir

LAUNCHERS = ("local", "srun")
_live: set[subprocess.Popen[bytes]] = set()
_live_lock = threading.Lock()


class LaunchError(RuntimeError):
    """A pool that could not be started; the message names the launcher and the command."""


@dataclass(frozen=True)
class Pool:
    run: RunDir
    nodes: int
    env: dict[str, str]  # the full environment of the node scripts
    label: str  # names the pool in logs, Slurm job names and local node names


def node_command(pool: Pool, launcher: str, eval_root: Path, srun_args: str) -> list[str]:
    """The command that runs slurm/eval_node.sh once per node of the pool."""
    if launcher == "srun":
        return [
            "srun",
            f"--nodes={pool.nodes}",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=0",
            f"--job-name=eval-{pool.label}",
            *shlex.split(srun_args),
            "bash",
            str(eval_root / "slurm" / "eval_node.sh"),
        ]
    if launcher == "local":
        return ["bash", str(eval_root / "scripts" / "run_local.sh"), str(pool.nodes)]
    raise LaunchError(f"LAUNCHER={launcher!r}: expected one of {', '.join(LAUNCHERS)}")


def start(pool: Pool, launcher: str, eval_root: Path, srun_args: str = "") -> subprocess.Popen[bytes]:
    command = node_command(pool, launcher, eval_root, srun_args)
    pool.run.logs.mkdir(parents=True, exist_ok=True)
    log = pool.run.logs / f"pool-{pool.label}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    env = {**pool.env, "LOCAL_NODE_PREFIX": pool.label}
    with open(log, "ab") as out:
        out.write(f"$ {shlex.join(command)}\n".encode())
        out.flush()
        try:
            proc = subprocess.Popen(command, env=env, cwd=eval_root, stdout=out, stderr=subprocess.STDOUT)
        except FileNotFoundError as exc:
            raise LaunchError(f"LAUNCHER={launcher}: cannot run {command[0]!r} ({exc})") from None
    with _live_lock:
        _live.add(proc)
    return proc


def finished(proc: subprocess.Popen[bytes]) -> int | None:
    """The pool's exit status once it has ended (and it is forgotten), else None."""
    code = proc.poll()
    if code is not None:
        with _live_lock:
            _live.discard(proc)
    return code


def terminate_all(grace_s: float = 10.0) -> None:
    """Stop every pool this process started: SIGTERM, then SIGKILL after `grace_s`."""
    with _live_lock:
        procs = list(_live)
        _live.clear()
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stop_on_signals() -> None:
    """Turn SIGTERM into SystemExit, so `finally: terminate_all()` runs when the orchestrator is stopped."""

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
