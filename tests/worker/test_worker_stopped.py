"""Stopped processes (SIGSTOP) of a worker's own. A worker stopped mid-episode for less than
LEASE_TTL keeps its lease: the episode that was running when it stopped is not recorded
(harness.episode.simclient: the lease may have been reaped meanwhile), so it must run again, and the
unit must not be charged a crash for it. A model server stopped mid-episode stalls the episode: the
server's fault, not the unit's (no errored attempt counted), and the worker restarts the server."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import time
from pathlib import Path

from harness.worker.loop import TEMP_PREFIX
from support.poolkit import check_finished, make_run, pool_env, start_worker, stop_group, wait_for


def _model_server(run_dir: Path) -> int | None:
    """The pid of the model server serving `run_dir` (its environment names the run), if any."""
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            cmdline = (environ.parent / "cmdline").read_bytes()
            if b"policy_model_server" in cmdline and f"RUN_DIR={run_dir}".encode() in environ.read_bytes():
                return int(environ.parent.name)
    return None


def _running_seed(worker_pid: int) -> int | None:
    """The seed the worker's sim client is stepping now (its progress file, fresh), if any (the
    canary's steps, before the first episode, name no seed)."""
    for path in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}{worker_pid}-*/progress-*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            state = json.loads(path.read_text())
            if time.time() - path.stat().st_mtime < 1.0 and state["step"] > 0 and state["seed"] is not None:
                return int(state["seed"])
    return None


def test_a_brief_stop_mid_episode_reruns_that_episode_and_charges_no_crash(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [("s", "t0")])
    env = pool_env(
        run, EVAL_TEST_NUM="3", FASTBENCH_STEPS="10", FASTBENCH_STEP_MS="150", CRASH_LIMIT="1",
        LEASE_TTL="30", STALL_TIMEOUT="60",
    )  # fmt: skip
    log = tmp_path / "w0.log"
    worker = start_worker(env, "w0", log)
    try:
        wait_for(lambda: _running_seed(worker.pid) is not None, 120, "an episode running")
        worker.send_signal(signal.SIGSTOP)
        time.sleep(2.5)  # the episode (1.5 s) ends while the worker is stopped
        worker.send_signal(signal.SIGCONT)
        code = worker.wait(120)
    finally:
        stop_group(worker)
    text = log.read_text()
    assert code == 0, text
    assert "was stopped during seed" in text, text
    assert not list(run.leases.glob("*.crash.*")), text
    check_finished(run, env, set())


def test_a_model_server_stopped_mid_episode_is_restarted_and_charges_no_crash(tmp_path: Path) -> None:
    """The stall was counted as the unit's (quarantined at CRASH_LIMIT=1), and every later unit
    stalled on the same stopped server: a hung server quarantined the whole run."""
    run = make_run(tmp_path / "run", [("s", "t0"), ("s", "t1")])
    env = pool_env(
        run, EVAL_TEST_NUM="2", FASTBENCH_STEPS="10", FASTBENCH_STEP_MS="150", CRASH_LIMIT="1",
        STALL_TIMEOUT="3",
    )  # fmt: skip
    log = tmp_path / "w0.log"
    worker = start_worker(env, "w0", log)
    try:
        wait_for(lambda: _running_seed(worker.pid) is not None, 120, "an episode running")
        server = _model_server(run.root)
        assert server is not None
        os.kill(server, signal.SIGSTOP)
        code = worker.wait(120)
    finally:
        stop_group(worker)
        with contextlib.suppress(ProcessLookupError):
            os.kill(server, signal.SIGKILL)
    text = log.read_text()
    assert code == 0, text
    assert "stalled on a stopped model server: restarting the server" in text, text
    assert "its process is stopped (SIGSTOP)" in text, text
    assert not list(run.leases.glob("*.crash.*")), text
    check_finished(run, env, set())
