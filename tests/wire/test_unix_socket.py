"""Same-host clients reach the model server over its abstract Unix socket (harness.wire.local),
served like TCP ones: same answers, same token, TCP when the socket is not this host's."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.config.knobs import DEFAULT_MAX_FRAME
from harness.wire.client import PolicyClient
from harness.wire.codecs import JsonCodec
from harness.wire.errors import WireError
from harness.wire.frames import recv_frame, send_frame
from harness.wire.local import dial_unix
from harness.wire.readyfile import read_ready
from tests.support.wirekit import SPEC, hello_body, obs, running_server, start_server_process, stop_process


def connected(ready: Path, **options: object) -> PolicyClient:
    client = PolicyClient.from_ready_file(
        ready, max_frame=DEFAULT_MAX_FRAME, timeout_s=30, io_timeout_s=30, **options
    )
    client.hello(SPEC)
    client.reset("task", "cfg", "do it", 0)
    return client


def test_a_client_on_the_servers_host_dials_its_unix_socket(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        info = read_ready(server.ready_file)
        assert info["unix"] == server.unix and info["host_id"]
        with connected(server.ready_file) as unix, connected(server.ready_file, unix=False) as tcp:
            assert unix._sock.family == socket.AF_UNIX
            assert tcp._sock.family == socket.AF_INET
            for step in range(3):
                assert np.array_equal(unix.infer(obs(float(step)), step), tcp.infer(obs(float(step)), step))


def test_another_hosts_socket_or_a_dead_one_falls_back_to_tcp(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        info = read_ready(server.ready_file)
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(json.dumps({**info, "host_id": "another-boot:1"}))
        dead = tmp_path / "dead.json"
        dead.write_text(json.dumps({**info, "unix": "harness-model-nobody-listens"}))
        for ready in (elsewhere, dead):
            with connected(ready) as client:
                assert client._sock.family == socket.AF_INET
                assert client.infer(obs(2.0), 0).shape == (30, 10)


def test_an_explicit_host_means_tcp(tmp_path: Path) -> None:
    with running_server(tmp_path) as server, connected(server.ready_file, host="127.0.0.1") as client:
        assert client._sock.family == socket.AF_INET


def test_the_unix_socket_demands_the_token_a_tcp_client_must_show(tmp_path: Path) -> None:
    """A wildcard bind needs the run's token: a hello without it on the Unix socket is refused too."""
    with running_server(tmp_path, bind="0.0.0.0") as server:
        info = read_ready(server.ready_file)
        assert info["token"]
        sock = dial_unix(info["unix"], timeout_s=10)
        try:
            send_frame(sock, hello_body(), DEFAULT_MAX_FRAME)  # no token
            reply = JsonCodec().decode(recv_frame(sock, DEFAULT_MAX_FRAME))
            assert reply["type"] == "error" and "token" in reply["message"]
        finally:
            sock.close()
        with connected(server.ready_file) as client:  # the ready file's token: served
            assert client._sock.family == socket.AF_UNIX
            assert client.infer(obs(1.0), 0).shape == (30, 10)


def test_a_sigkilled_server_leaves_no_socket_and_its_client_is_told(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    proc = start_server_process(sys.executable, ready, ["--policy", "hold"], tmp_path / "server.log")
    try:
        client = connected(ready)
        name = read_ready(ready)["unix"]
        assert client._sock.family == socket.AF_UNIX
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        with pytest.raises(WireError):
            client.infer(obs(), 0)
        client.close()
        with pytest.raises(ConnectionRefusedError):  # the name went with the process: nothing to clean
            dial_unix(name, timeout_s=5)
    finally:
        stop_process(proc)
