"""Helpers for worker and chaos tests: a run dir over the fast test benchmark and the sleep policy,
worker processes started through slurm/eval_worker.sh, the debug launcher's command line, and
checks of a finished run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.config.create import create_run
from harness.config.rundir import RunDir
from harness.config.settings import Settings
from harness.episode.records import read_tree
from harness.episode.serverdial import probe
from harness.queue import owner, reaper
from harness.queue.listing import scan
from harness.runqueue import queue_states

REPO = Path(__file__).resolve().parents[2]
SLEEP_POLICY = str(REPO / "tests" / "policies" / "sleep")


def make_run(root: Path, cells: list[tuple[str, str]]) -> RunDir:
    """A run dir holding only its queue file; `pool_env` creates the run (run.yaml) under its knobs."""
    run = RunDir(root)
    run.root.mkdir(parents=True)
    run.queue.write_text("".join(f"{scene} {task}\n" for scene, task in cells))
    return run


def pool_env(run: RunDir, create: bool = True, **extra: str) -> dict[str, str]:
    """The knobs of a fast pool: fake benchmark, sleep policy, no videos, short timeouts. With `create`
    the run is created from its queue.txt under those knobs, as scripts/new_run.py creates it
    (create_run; the same contract again is a no-op): a worker refuses a run dir without run.yaml.
    A test that raises EVAL_TEST_NUM records the fill-in first (harness.config.manifest_fillin)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(
        RUN_DIR=str(run.root), EVAL_ROOT=str(REPO), PYTHONPATH=str(REPO),
        BENCHMARK="tests.support.fastbench:FastBench", POLICY=SLEEP_POLICY, CKPT_NAME="", RECORD_VIDEO="0",
        USE_EVAL_SEEDS="0", EVAL_TEST_NUM="2", UNIT_SEEDS="0", LEASE_TTL="10", HEARTBEAT_S="0.5",
        LEASE_SKEW_S="1", STALL_TIMEOUT="20", CRASH_LIMIT="3", FASTBENCH_STEPS="2", FASTBENCH_STEP_MS="2",
        CPU_WORKERS="1", SIMS_PER_WORKER="1",
    )  # fmt: skip
    env.update(extra)
    if create:  # an external POLICY_SERVER is dialled for its contract section, as new_run dials it
        dial = probe(Settings.from_env(env)) if env.get("POLICY_SERVER") else None  # bad knobs: the worker's
        create_run(run.root, run.queue, env, probe=dial)
    return env


def debug_worker(tmp_path: Path, run: str, queue_text: str, **knobs: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of scripts/eval_one_worker.py (the debug launcher: the real
    worker in one process) for run `run` under `tmp_path` over the queue `queue_text`; `knobs`
    override the environment's. Real benchmark and policies unless `knobs` say otherwise."""
    queue = tmp_path / "queue.txt"
    queue.write_text(queue_text)
    env = dict(os.environ, PYTHONPATH=str(REPO), EVAL_ROOT=str(REPO), BUNDLE=str(REPO))
    env.update(RUNS_ROOT=str(tmp_path), **knobs)
    env.setdefault("MODEL_PY", str(REPO / "envs" / "model" / "bin" / "python"))
    env.setdefault("SIM_PY", sys.executable)
    argv = [sys.executable, str(REPO / "scripts" / "eval_one_worker.py"), "--run", run, "--queue", str(queue)]
    return argv, env


def start_worker(env: dict[str, str], worker_id: str, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            ["bash", str(REPO / "slurm" / "eval_worker.sh")],
            env={**env, "WORKER_ID": worker_id}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def run_worker(env: dict[str, str], log: Path, timeout: float = 120) -> int:
    """Start worker w0 (start_worker), wait for it, and return its exit status; whatever is left of
    its process group is killed, also when it outlives `timeout` (then TimeoutExpired)."""
    proc = start_worker(env, "w0", log)
    try:
        return proc.wait(timeout)
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen) -> None:
    """Kill what a test started (the worker and anything left of its process group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def wait_for(predicate, timeout: float, what: str, step: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


def check_finished(run: RunDir, env: dict[str, str], crashing_tasks: set[str]) -> None:
    """Every planned (unit, seed) recorded once after dedup, no torn record, no lease left behind,
    and exactly the units of `crashing_tasks` quarantined."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        states = queue_states(run, Settings.from_env(os.environ))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    records = read_tree(run.results)
    assert records.torn_lines == [] and records.bad_lines == []
    quarantined = {s.key for s in states if s.state == "quarantined"}
    assert quarantined == {s.key for s in states if s.unit.task in crashing_tasks}
    assert {s.state for s in states if s.key not in quarantined} == {"done"}
    planned = {(s.unit.task, s.unit.task_config, seed) for s in states for seed in s.unit.seeds}
    assert set(records.records) <= planned
    for state in states:
        for seed in state.unit.seeds:
            record = records.records.get((state.unit.task, state.unit.task_config, seed))
            if state.key not in quarantined:
                assert record is not None and record["error"] is None, (state.key, seed, record)
    for key in quarantined:
        unit = next(s.unit for s in states if s.key == key)
        latest = [records.records.get((unit.task, unit.task_config, seed)) for seed in unit.seeds]
        assert any(r is None or r["error"] for r in latest), f"{key} quarantined without an error"
    # what SIGKILLed processes left (a tomb, a staged claim, a clock probe) goes at the next worker's
    # first listing: sweep once as that worker would, then nothing transient may be left
    reaper.sweep_tombs(run.leases, scan(run.leases).names)
    listing = scan(run.leases)
    transient = [n for n in listing.names if n.startswith(".") and not _of_a_killed_process(n)]
    assert not transient, f"tombstone, staged claim or probe left behind: {transient}"
    for name in listing.leased:  # a finished unit's lease dir stays, holding only its end state
        left = os.listdir(run.leases / name)
        ended = len(left) == 1 and left[0].startswith(("done.", "quarantined."))
        assert ended, f"lease {name} left behind: {left}"


def _of_a_killed_process(name: str) -> bool:
    """A staged claim or clock probe of a process that is gone (named for another hostname, such as
    an NFS test's node, so this process's sweep left it; the next worker of that host sweeps it)."""
    if name.startswith(".claim."):
        pid = name.rsplit(".", 2)[-2]
    elif name.startswith(".probe."):
        pid = name.rsplit(".", 1)[-1]
    else:
        return False
    return pid.isdigit() and owner.start_ticks(int(pid)) is None
