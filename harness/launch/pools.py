"""Start node pools on a run dir: one `srun` over Slurm nodes, one submitit Slurm job, or N local
"nodes" on this machine.

The orchestrators say what to run (a run, a node count, the node scripts' environment); LAUNCHER says
how, so the Slurm and the local path share everything else. All run the same payload,
`slurm/eval_node.sh`: under `srun` once per allocated node; under submitit as one batch job of N
nodes x 1 task, each task running `node_task` (the node script with the pool's environment); locally
as N processes, each its own "node" with its own NODE_NAME (as the node-script contract asks of a
local pool), so writer ids never collide, even between two pools on one run. Every pool's output goes
to a log under the run's `logs/` (a submitit job's task logs under `logs/submitit/`). Each node runs in
its own process group, and a submitit job is cancelled, so pools still running when the orchestrator
is stopped are stopped whole (workers, model servers, sim clients), releasing their leases.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.config.rundir import RunDir
from harness.process.failures import Failed

if TYPE_CHECKING:
    import submitit

LAUNCHERS = ("local", "srun", "submitit")
# Slurm states of a job that has not ended yet
UNFINISHED = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "UNKNOWN", "REQUEUED"}
# the paths env.sh sets, passed to each node task with the knobs
PASSED = (
    "EVAL_ROOT", "BUNDLE", "RUNS_ROOT", "ENVS_ROOT", "SIM_PY", "MODEL_PY", "LEROBOT_PY", "HF_HOME",
    "PYTHONPATH",
)  # fmt: skip
# what Slurm sets per job, step and node: a node task keeps its own, never the submitter's
_PER_NODE = ("SLURM_", "SLURMD_", "SBATCH_", "SRUN_", "SALLOC_", "SUBMITIT_", "PMI_", "PMIX_")
_PER_NODE_NAMES = {
    "NODE_NAME",
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
}
# SRUN_ARGS' short options a submitit job takes, as the sbatch option each stands for
_SHORT = {
    "-p": "partition",
    "-t": "time",
    "-A": "account",
    "-q": "qos",
    "-C": "constraint",
    "-c": "cpus_per_task",
    "-w": "nodelist",
    "-x": "exclude",
    "-J": "job_name",
}
_live: set[Started] = set()
_live_lock = threading.Lock()
# submitit's job state watcher is shared by every job and not thread-safe: pools started by threads
# (the parallel-models orchestrator) submit, poll and cancel their jobs one at a time
_submitit_lock = threading.RLock()


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
    """One started pool: its processes (one `srun`, or one node script per local node), or its
    submitit job."""

    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    job: submitit.Job | None = None
    _code: int | None = None

    def poll(self) -> int | None:
        """None while any process runs (the job is unfinished); then 0, or the first non-zero exit
        status (of a job: a node's, else 1 when a node left no result or the job did not complete)."""
        if self.job is not None:
            with _submitit_lock:
                if self._code is None and self.job.done():
                    self._code = job_code(self.job)
            return self._code
        codes = [proc.poll() for proc in self.procs]
        if any(code is None for code in codes):
            return None
        return next((code for code in codes if code), 0)


def node_task(env: dict[str, str], node_script: str) -> dict[str, object]:
    """Runs on each node (one submitit task per node): the node script, with the submitter's knobs."""
    os.environ.update(env)
    done = subprocess.run(["bash", node_script], env=os.environ.copy())
    return {"node": os.environ.get("SLURMD_NODENAME", ""), "rc": done.returncode}


def final_state(job: submitit.Job, timeout_s: float = 30.0) -> str:
    """Slurm's final state of the job (its tasks' results can exist while it is still COMPLETING)."""
    deadline = time.monotonic() + timeout_s
    state = job.state
    while state in UNFINISHED and time.monotonic() < deadline:
        time.sleep(0.5)
        state = job.get_info(mode="force").get("State", state)
    return state


def node_results(job: submitit.Job) -> list[dict[str, object]]:
    """Each node task's result; a task that died without one is reported with its error."""
    out: list[dict[str, object]] = []
    for task_id in range(job.num_tasks):
        try:
            out.append(job.task(task_id).result())
        except Exception as exc:  # a killed node: submitit raises its failure, the pool result stands
            out.append({"task": task_id, "rc": None, "error": str(exc).strip().splitlines()[0][:200]})
    return out


def job_code(job: submitit.Job) -> int:
    """A finished job's exit status: the first non-zero node status, else 1 when a node left no
    result or Slurm says the job did not complete (cancelled, failed, timed out), else 0."""
    codes = [result.get("rc") for result in node_results(job)]
    if code := next((c for c in codes if isinstance(c, int) and c), 0):
        return code
    if None in codes or final_state(job) != "COMPLETED":
        return 1
    return 0


def node_env(env: dict[str, str]) -> dict[str, str]:
    """The pool's environment less what Slurm (or the submitter's own allocation) sets per node."""
    return {
        k: v
        for k, v in env.items()
        if k == "SLURM_CONF" or not (k.startswith(_PER_NODE) or k in _PER_NODE_NAMES)
    }


def sbatch_options(srun_args: str) -> dict[str, str | bool]:
    """SRUN_ARGS as a submitit job's sbatch options: `--name=value`, `--name value`, `--flag`, or one
    of the short options -p -t -A -q -C -c -w -x -J; {"partition": "gpu", "exclusive": True}."""
    words = shlex.split(srun_args)
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word[2:].partition("=")
            if not eq:
                if i < len(words) and not words[i].startswith("-"):
                    value, i = words[i], i + 1
                else:
                    out[name.replace("-", "_")] = True
                    continue
            out[name.replace("-", "_")] = value
        elif word[:2] in _SHORT:
            value = word[2:]
            if not value:
                if i >= len(words):
                    raise LaunchError(f"LAUNCHER=submitit: SRUN_ARGS {word!r} has no value")
                value, i = words[i], i + 1
            out[_SHORT[word[:2]]] = value
        else:
            short = " ".join(sorted(_SHORT))
            raise LaunchError(
                f"LAUNCHER=submitit: SRUN_ARGS {word!r}: expected sbatch options --name=value, --flag "
                f"or one of {short}"
            )
    return out


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
    if launcher == "submitit":
        raise LaunchError("LAUNCHER=submitit: a submitit job runs no commands here (see start)")
    raise LaunchError(f"LAUNCHER={launcher!r}: expected one of {', '.join(LAUNCHERS)}")


def submit_job(pool: Pool, eval_root: Path, srun_args: str, log: Path) -> Started:
    """Submit the pool as one submitit Slurm job: N nodes x 1 task, each running `node_task`; SRUN_ARGS
    are its sbatch options. The job's task logs go to the run's logs/submitit/."""
    import submitit  # only the submitit launcher needs it
    from submitit.core.utils import FailedJobError

    executor = submitit.SlurmExecutor(folder=pool.run.logs / "submitit")
    executor.update_parameters(
        nodes=pool.nodes,
        ntasks_per_node=1,
        job_name=f"eval-{pool.label}",
        time=None,  # the partition's limit, as for `srun` (unless SRUN_ARGS gives --time)
        srun_args=["--kill-on-bad-exit=0"],
        additional_parameters={"chdir": str(eval_root), **sbatch_options(srun_args)},
    )
    script = str(eval_root / "slurm" / "eval_node.sh")
    try:
        with _submitit_lock:
            job = executor.submit(node_task, node_env(pool.env), script)
    except (OSError, FailedJobError) as exc:  # no sbatch, or sbatch refused the job (its stderr)
        why = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:400]
        why = why or type(exc).__name__
        raise LaunchError(f"LAUNCHER=submitit: cannot submit the pool's job ({why})") from None
    with open(log, "a") as out:
        out.write(f"submitit job {job.job_id}: {pool.nodes} node(s) x 1 task, {script}\n")
        out.write(f"task logs: {pool.run.logs / 'submitit'}\n")
    return Started(job=job)


def start(pool: Pool, launcher: str, eval_root: Path, srun_args: str = "") -> Started:
    pool.run.logs.mkdir(parents=True, exist_ok=True)
    log = pool.run.logs / f"pool-{pool.label}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    if launcher == "submitit":
        started = submit_job(pool, eval_root, srun_args, log)
        with _live_lock:
            _live.add(started)
        return started
    started = Started()
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


def _in_queue(job: submitit.Job) -> bool:
    """Whether `squeue` still lists the job (a cancelled job stays while its nodes stop it);
    True when squeue cannot answer, so the caller waits out its grace."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", str(job.job_id), "-o", "%T"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return True
    if out.returncode != 0:  # an unknown job id: it has left the queue (and Slurm's memory)
        return "Invalid job id" not in out.stderr
    return bool(out.stdout.strip())


def _cancel(job: submitit.Job, grace_s: float) -> None:
    """Cancel the job (Slurm sends its node tasks SIGTERM) and wait up to `grace_s` for it to leave
    the queue; then SIGKILL what is left of it."""
    # already ended, or scancel missing: nothing more to stop here
    with contextlib.suppress(Exception), _submitit_lock:
        job.cancel(check=False)
    deadline = time.monotonic() + grace_s
    while _in_queue(job):
        if time.monotonic() >= deadline:
            with contextlib.suppress(OSError):
                subprocess.run(["scancel", "--full", "--signal=KILL", str(job.job_id)], check=False)
            return
        time.sleep(0.5)


def _stop(started: Started, grace_s: float) -> None:
    if started.job is not None:
        _cancel(started.job, grace_s)
        return
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
    """Stop every pool this process started: SIGTERM to each node's process group, SIGKILL after
    `grace_s`; a submitit job is cancelled, and waited for until it leaves the queue (`grace_s`)."""
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
