"""Servers for the interop tests: vla-eval's own `run_server` with the test double in
vla_hold_server.py, our model server in openpi mode, and a sim-client runner that points
POLICY_SERVER at them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.config.create import create_run
from harness.episode.simserver import UNIT_END
from harness.wire.readyfile import read_ready
from tests.support.wirekit import REPO, model_python, start_server_process, stop_process, wait_for

VLA_SERVER = REPO / "tests" / "interop" / "vla_hold_server.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} not healthy in {timeout_s} s: {log.read_text()}")


@pytest.fixture
def vla_server(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """start(mode, needs_image) -> "127.0.0.1:<port>" of a running vla-eval model server; all are
    stopped at the end."""
    procs = []

    def start(mode: str = "hold", needs_image: bool = False) -> str:
        port = free_port()
        log = tmp_path / f"vla-{mode}-{port}.log"
        cmd = [sys.executable, str(VLA_SERVER), "--address", f"127.0.0.1:{port}", "--args.mode", mode]
        cmd += ["--args.needs_image", "true" if needs_image else "false"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        procs.append(proc)
        wait_healthy(f"http://127.0.0.1:{port}/health", proc, log)
        return f"127.0.0.1:{port}"

    yield start
    for proc in procs:
        if proc.poll() is None:
            stop_process(proc)


@pytest.fixture
def openpi_mode_server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path, dict]]:
    """Our model server (in the model env) serving `hold` with MODEL_SERVER_PROTOCOL=openpi:
    (its process, its ready file, the ready file's fields); stopped at the end."""
    python = model_python()
    assert python, "envs/model is missing"
    ready, log = tmp_path / "ready.json", tmp_path / "server.log"
    proc = start_server_process(python, ready, ["--policy", "hold"], log, {"MODEL_SERVER_PROTOCOL": "openpi"})
    try:
        wait_for(lambda: ready.exists() or proc.poll() is not None, 120)
        assert proc.poll() is None, log.read_text()
        yield proc, ready, read_ready(ready)
    finally:
        stop_process(proc)


VLA_MAP = """\
protocol: vla-eval
policy: vla-hold
action_dim: 10
proprio: state
instruction: task_description
action: actions
action_spec: {position: absolute_xyz, rotation: rot6d}
"""

OPENPI_MAP = """\
protocol: openpi
policy: openpi-hold
action_dim: 10
proprio: observation/state
instruction: prompt
action: actions
expect: {policy: hold, action_dim: 10}
"""


class ClientRun:
    """One unit run by a sim process: `rc` is its UNIT_END returncode (the process's exit status
    when it ended before answering), `err` the unit's log and the process's stderr together."""

    def __init__(self, proc: subprocess.CompletedProcess, run_dir: Path) -> None:
        ends = [line for line in proc.stdout.splitlines() if line.startswith(UNIT_END)]
        self.rc = json.loads(ends[-1][len(UNIT_END) :])["returncode"] if ends else proc.returncode
        self.out, self.err = proc.stdout, proc.stdout + proc.stderr
        self.records = [
            json.loads(line) for path in sorted(run_dir.rglob("_metrics*.jsonl")) for line in path.open()
        ]


def run_client(
    tmp_path: Path,
    server: str,
    mapping: str,
    seeds: list[int],
    task: str = "T",
    run_dir: Path | None = None,
    **env: str,
) -> ClientRun:
    """One unit of scripts/eval_policy_client.py with POLICY_SERVER=server (FastBench unless env says
    otherwise)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    map_file = tmp_path / "map.yaml"
    map_file.write_text(mapping)
    run_dir = run_dir or tmp_path / "run"
    full_env = {
        **os.environ, "PYTHONPATH": str(REPO), "EVAL_ROOT": str(REPO), "POLICY_SERVER": server,
        "POLICY_SERVER_MAP": str(map_file), "BENCHMARK": "tests.support.fastbench:FastBench",
        "RECORD_VIDEO": "0", "POLICY_SERVER_RETRIES": "2", "POLICY_SERVER_TIMEOUT": "20", **env,
    }  # fmt: skip
    if not (run_dir / "run.yaml").exists():  # a created run, whose contract names no server: not dialled
        queue = tmp_path / "client-queue.txt"
        queue.write_text(f"table {task}\n")
        plain = {k: v for k, v in full_env.items() if not k.startswith("POLICY_SERVER")}
        create_run(run_dir, queue, {**plain, "USE_EVAL_SEEDS": "0", "EVAL_TEST_NUM": str(max(seeds) + 1)})
    cmd = [
        sys.executable, str(REPO / "scripts" / "eval_policy_client.py"),
        "--ready-file", str(tmp_path / "unused-ready.json"),
    ]  # fmt: skip
    job = {"run_dir": str(run_dir), "scene": "table", "task": task, "seeds": seeds, "writer_id": "w0"}
    proc = subprocess.run(
        cmd, input=json.dumps(job) + "\n", env=full_env, capture_output=True, text=True, timeout=300
    )
    return ClientRun(proc, run_dir)
