"""A worker whose attempts fail for a cause that is not their unit's (issue 20): a node whose
renderer cannot start, an external policy server that hangs. Neither may quarantine a unit or
count a crash; the worker stops itself (exit 1) naming the cause, its leases released."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from harness.config.rundir import RunDir
from harness.queue.listing import scan
from support.poolkit import REPO, make_run, pool_env, start_worker, stop_group, wait_for

VLA_SERVER = REPO / "tests" / "interop" / "vla_hold_server.py"
VLA_MAP = """\
protocol: vla-eval
policy: vla-hold
action_dim: 10
proprio: state
instruction: task_description
action: actions
action_spec: {position: absolute_xyz, rotation: rot6d}
"""


def _wait_worker(proc: subprocess.Popen, timeout: float) -> int | None:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
    finally:
        stop_group(proc)


def _check_nothing_charged(run: RunDir) -> None:
    """No errored attempt counted, no unit quarantined or done, no lease left held (every one released)."""
    assert not list(run.leases.glob("*.crash.*")), "a non-unit fault was counted as an errored attempt"
    listing = scan(run.leases)
    assert not listing.done
    held = {name: os.listdir(run.leases / name) for name in listing.leased}
    assert all(left == [] for left in held.values()), f"lease left behind: {held}"


def test_a_node_whose_renderer_cannot_start_quarantines_nothing_and_stops_the_worker(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", [("s", f"t{i}") for i in range(4)])
    env = pool_env(run, FASTBENCH_NO_RENDERER="1", CRASH_LIMIT="1", WORKER_FAULT_LIMIT="3")
    code = _wait_worker(start_worker(env, "w0", tmp_path / "w0.log"), 120)
    log = (tmp_path / "w0.log").read_text()
    assert code == 1, log
    assert "cannot run: 3 attempts in a row failed for a cause other than their unit" in log, log
    assert "node: the benchmark or its renderer cannot start on this node (exit 4)" in log, log
    assert "no Vulkan device" in log  # the sim's own line names what broke
    assert "quarantined" not in log and "errored attempt" not in log
    _check_nothing_charged(run)


def _answers(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def test_a_units_own_fault_is_counted_and_its_crash_record_names_the_cause(tmp_path: Path) -> None:
    """The control: a unit whose episodes crash is the unit's fault, counted and quarantined, and
    the quarantine reason (the errored attempt `status` shows) says so; the worker runs on (exit 0)."""
    run = make_run(tmp_path / "run", [("s", "ok"), ("s", "crashes")])
    env = pool_env(run, FASTBENCH_CRASH="crashes", CRASH_LIMIT="1", WORKER_FAULT_LIMIT="1")
    code = _wait_worker(start_worker(env, "w0", tmp_path / "w0.log"), 120)
    assert code == 0, (tmp_path / "w0.log").read_text()
    crashes = list(run.leases.glob("*.crash.*"))
    assert [p.name.split(".crash.")[0] for p in crashes] == ["s__crashes__0-2"]
    assert crashes[0].read_text() == "unit: 2 seeds errored"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_external_server_that_hangs_is_caught_by_its_health_check_not_charged_to_units(
    tmp_path: Path,
) -> None:
    port = _free_port()
    server_log = tmp_path / "vla.log"
    argv = [sys.executable, str(VLA_SERVER), "--address", f"127.0.0.1:{port}", "--args.needs_image", "false"]
    server = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=server_log.open("w"),
                              stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    worker = None
    try:
        wait_for(lambda: _answers(port), 90, "the vla-eval server")
        (tmp_path / "map.yaml").write_text(VLA_MAP)
        run = make_run(tmp_path / "run", [("s", "t0"), ("s", "t1")])
        env = pool_env(
            run, POLICY_SERVER=f"127.0.0.1:{port}", POLICY_SERVER_MAP=str(tmp_path / "map.yaml"),
            EVAL_TEST_NUM="4", FASTBENCH_STEPS="30", FASTBENCH_STEP_MS="100",  # 3 s episodes
            STALL_TIMEOUT="120", CRASH_LIMIT="1",
        )  # fmt: skip
        worker = start_worker(env, "w0", tmp_path / "w0.log")
        wait_for(lambda: " seed 0: " in (tmp_path / "w0.log").read_text(), 90, "the first episode")
        os.kill(server.pid, signal.SIGSTOP)  # hung: its listen backlog still completes TCP connects
        stopped = time.monotonic()
        code = _wait_worker(worker, 90)
        took = time.monotonic() - stopped
    finally:
        if worker is not None:
            stop_group(worker)
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    log = (tmp_path / "w0.log").read_text()
    assert code == 1, log
    assert took < 60, f"not caught before the stall timeout: {took:.0f} s"
    assert "missed 2 health checks" in log and "no answer to GET /health" in log, log
    assert "cannot run: 3 attempts in a row failed for a cause other than their unit" in log, log
    assert "the last: model server:" in log, log
    assert "quarantined" not in log and "errored attempt" not in log and "stalled" not in log
    _check_nothing_charged(run)
