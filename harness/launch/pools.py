"""Start node pools on a run dir: one `srun` over Slurm nodes, or N local "nodes" on this machine.

The orchestrators say what to run (a run, a node count, the node scripts' environment); LAUNCHER says
how, so the Slurm and the local path share everything else. Both run the same payload,
`slurm/eval_node.sh`: under `srun` once per allocated node; locally as N processes, each its own
"node" with its own NODE_NAME (as the node-script contract asks of a local pool), so writer ids never
collide, even between two pools on one run. Every pool's output goes to a log under the run's
`logs/`. Each node runs in its own process group, so pools still running when the orchestrator is
stopped are stopped whole (workers, model servers, sim clients), releasing their leases.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.config.rundir import RunDir
from harness.process.failures import Failed

LAUNCHERS = ("local", "srun")
_live: set[Started] = set()
_live_lock = threading.Lock()


class LaunchError(Failed):
    """A pool that could not be started; the message names the launcher and the command."""


@dataclass(frozen=True)
class Pool:
    run: RunDir
    nodes: int
    env: dict[str, str]  # the full environment of the node scripts
    label: str  # names the pool in logs, Slurm job names and local node names


@dataclass(eq=False)
class Started:
    """The processes of one started pool: one `srun`, or one node script per local node."""

    procs: list[subprocess.Popen[bytes]]

    def poll(self) -> int | None:
        """None while any process runs; then 0, or the first non-zero exit status."""
        codes = [proc.poll() for proc in self.procs]
        if any(code is None for code in codes):
            return None
        return next((code for code in codes if code), 0)


def node_commands(
    pool: Pool, launcher: str, eval_root: Path, srun_args: str
) -> list[tuple[list[str], dict[str, str]]]:
    """(command, environment) of each process that runs slurm/eval_node.sh for the pool."""
    payload = ["bash", str(eval_root / "slurm" / "eval_node.sh")]
    if launcher == "srun":
        srun = ["srun", f"--nodes={pool.nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=0"]
        return [([*srun, f"--job-name=eval-{pool.label}", *shlex.split(srun_args), *payload], pool.env)]
    if launcher == "local":
        name = f"{pool.label}-p{os.getpid()}"
        # Local "nodes" share this machine's disk: copying the envs into NODE_CACHE buys nothing.
        env = {"STAGE_ENVS": "none", **pool.env}
        share = {"LOCAL_POOL_NODES": str(pool.nodes)}  # each "node" sizes itself to 1/N of this machine
        return [(payload, {**env, **share, "NODE_NAME": f"{name}-n{i}"}) for i in range(pool.nodes)]
    raise LaunchError(f"LAUNCHER={launcher!r}: expected one of {', '.join(LAUNCHERS)}")


def start(pool: Pool, launcher: str, eval_root: Path, srun_args: str = "") -> Started:
    pool.run.logs.mkdir(parents=True, exist_ok=True)
    log = pool.run.logs / f"pool-{pool.label}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    started = Started([])
    with open(log, "ab") as out:
        for command, env in node_commands(pool, launcher, eval_root, srun_args):
            out.write(f"$ {shlex.join(command)}\n".encode())
            out.flush()
            try:
                proc = subprocess.Popen(
                    command, env=env, cwd=eval_root, stdout=out, stderr=out, start_new_session=True
                )
            except FileNotFoundError as exc:
                _stop(started, 0)
                raise LaunchError(f"LAUNCHER={launcher}: cannot run {command[0]!r} ({exc})") from None
            started.procs.append(proc)
    with _live_lock:
        _live.add(started)
    return started


def finished(started: Started) -> int | None:
    """The pool's exit status once it has ended (and it is forgotten), else None."""
    code = started.poll()
    if code is not None:
        with _live_lock:
            _live.discard(started)
    return code


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group has already exited
        os.killpg(proc.pid, signum)


def _stop(started: Started, grace_s: float) -> None:
    for proc in started.procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in started.procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()


def terminate_all(grace_s: float = 15.0) -> None:
    """Stop every pool this process started: SIGTERM to each node's process group, SIGKILL after `grace_s`."""
    with _live_lock:
        pools = list(_live)
        _live.clear()
    for started in pools:
        _stop(started, grace_s)


def stop_on_signals() -> None:
    """Turn SIGTERM into SystemExit, so `finally: terminate_all()` runs when the orchestrator is stopped.

    The first SIGTERM ignores the ones after it: `scancel` and a supervisor's stop both send more
    than one, and a second SystemExit raised inside `terminate_all` would leave the pools running."""

    def handler(signum: int, _frame: object) -> None:
        signal.signal(signum, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
