"""Helpers for the wire/server tests: an in-process model server, raw frames, subprocess servers, and
a seeded wire fuzzer."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from harness.config.knobs import DEFAULT_MAX_FRAME
from harness.config.settings import Settings
from harness.model.policyload import load_policy
from harness.model.server import ModelServer
from harness.wire.client import PolicyClient
from harness.wire.codecs import JsonCodec
from harness.wire.readyfile import read_ready

REPO = Path(__file__).resolve().parents[2]
NOISY = str(REPO / "tests" / "policies" / "noisy")
SPEC = {"benchmark": "test", "robot": "panda", "action_dim": 10, "cameras": ["base_camera"]}


def obs(value: float = 0.0, size: int = 8) -> dict[str, Any]:
    return {
        "images": {"base_camera": np.full((size, size, 3), 7, np.uint8)},
        "proprio": np.full(10, value, np.float32),
    }


@contextmanager
def running_server(
    tmp_path: Path, policy: str = "hold", overrides: list[str] | None = None, bind: str = "127.0.0.1"
) -> Iterator[ModelServer]:
    """A ModelServer serving in a thread of this process, with the settings of this process's
    environment (as its entry point would build them); shut down on exit."""
    settings = Settings.from_env(os.environ)
    server = ModelServer(
        load_policy(policy, "", overrides, settings), tmp_path / "ready.json", settings, bind
    )
    with serving(server):
        yield server


@contextmanager
def serving(server: ModelServer) -> Iterator[threading.Thread]:
    """Serve `server` in a thread once its ready file is out; yields the thread; shut down on exit."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    wait_for(lambda: server.ready_file.exists())
    try:
        yield thread
    finally:
        server.shutdown()
        thread.join(5)


def wait_for(cond: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def client(ready: Path, codec: str = "msgpack", unix: bool = True) -> PolicyClient:
    return PolicyClient.from_ready_file(
        ready, max_frame=DEFAULT_MAX_FRAME, timeout_s=120, io_timeout_s=60, codec=codec, unix=unix
    )


def episode(ready: Path, seed: int, steps: int = 4, codec: str = "msgpack") -> list[np.ndarray]:
    """One client's episode: hello, reset, `steps` infers; returns the chunks."""
    with client(ready) as c:
        c.hello(SPEC)
        c.reset("task", "cfg", "do it", seed)
        return [c.infer(obs(float(s)), s) for s in range(steps)]


def raw_connect(ready: Path) -> socket.socket:
    info = read_ready(ready)
    sock = socket.create_connection((info["host"], info["port"]), timeout=10)
    return sock


def raw_send(sock: socket.socket, body: bytes) -> None:
    sock.sendall(struct.pack(">I", len(body)) + body)


def raw_recv(sock: socket.socket) -> dict[str, Any] | None:
    """One JSON reply, or None when the server closed the connection."""
    header = exact_bytes(sock, 4)
    if header is None:
        return None
    body = exact_bytes(sock, struct.unpack(">I", header)[0])
    return None if body is None else JsonCodec().decode(body)


def exact_bytes(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def model_python() -> str | None:
    exe = os.environ.get("MODEL_PY") or str(REPO / "envs" / "model" / "bin" / "python")
    return exe if Path(exe).exists() else None


def start_server_process(
    python: str, ready: Path, args: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "EVAL_ROOT": str(REPO), **(env or {})}
    cmd = [python, str(REPO / "scripts" / "policy_model_server.py"), "--ready-file", str(ready), *args]
    return subprocess.Popen(cmd, env=full_env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def rss_bytes(pid: int) -> int:
    """The resident set size of process `pid` (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def stop_process(proc: subprocess.Popen) -> int:
    proc.terminate()
    try:
        return proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(5)


def hello_body(codecs: list[Any] | None = None, token: str | None = None, **fields: Any) -> bytes:
    """A JSON hello (the hello is always JSON) with SPEC, `token` when given, `fields` on top."""
    msg: dict[str, Any] = {"type": "hello", "version": 1, "codecs": codecs or ["json"], "spec": SPEC}
    if token is not None:
        msg["token"] = token
    return json.dumps({**msg, **fields}).encode()
