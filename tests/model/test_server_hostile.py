"""The model server against hostile clients: memory held before a hello and after it (the frame
bound of a hello's observation, the bytes-in-flight budget, shared-memory arrays), connection
floods and descriptor exhaustion, IPv6 binds, the log cost of bad requests, the token before any message, and
a seeded wire fuzzer that must leave the server up and serving."""

from __future__ import annotations

import logging
import os
import random
import resource
import socket
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.config.knobs import DEFAULT_MAX_FRAME
from harness.config.settings import Settings
from harness.model.dialout import connect_out
from harness.model.policyload import load_policy
from harness.model.server import ModelServer
from harness.wire.client import PolicyClient
from harness.wire.codecs import JsonCodec
from harness.wire.errors import WireError
from harness.wire.frames import recv_frame
from harness.wire.readyfile import read_ready
from support.wirefuzz import WireFuzzer
from support.wirekit import (
    NOISY,
    REPO,
    SPEC,
    client,
    hello_body,
    model_python,
    obs,
    raw_connect,
    raw_recv,
    raw_send,
    rss_bytes,
    running_server,
    serving,
    start_server_process,
    stop_process,
    wait_for,
)

HELLO_LIMIT = 1 << 20  # what a connection may send in one frame before its hello succeeded


def header(size: int) -> bytes:
    return struct.pack(">I", size)


def session_works(ready: Path, **options: Any) -> bool:
    try:
        with PolicyClient.from_ready_file(ready, timeout_s=10, io_timeout_s=10, **options) as c:
            c.hello(SPEC)
            c.reset("t", "cfg", "i", 5)
            np.testing.assert_array_equal(c.infer(obs(0.5), 0), 0.5)
    except (WireError, OSError):
        return False
    return True


def server_python() -> str:
    return model_python() or sys.executable


# 1. memory held before (and after) authentication


def test_body_buffer_grows_with_arrived_bytes_not_the_announced_size(pair) -> None:
    a, b = pair
    a.sendall(header(60 << 20) + b"x" * 1000)
    tracemalloc.start()
    try:
        with pytest.raises(WireError, match=r"timed out reading a frame \(1000/62914560 bytes\)"):
            recv_frame(b, limit=64 << 20, body_timeout_s=0.3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated for 1000 bytes received"
    body = bytes(random.Random(1).randbytes(3 << 20))  # grown in steps, still read whole
    sender = threading.Thread(target=a.sendall, args=(header(len(body)) + body,))
    sender.start()
    assert recv_frame(b, DEFAULT_MAX_FRAME) == body
    sender.join()


def test_body_timeout_bounds_the_whole_body_not_each_read(pair) -> None:
    a, b = pair
    stop = threading.Event()

    def dribble() -> None:  # a byte every 50 ms: each read is quick, the frame never ends in time
        a.sendall(header(100))
        for _ in range(100):
            if stop.wait(0.05):
                return
            a.sendall(b"x")

    thread = threading.Thread(target=dribble)
    thread.start()
    start = time.monotonic()
    try:
        with pytest.raises(WireError, match="timed out reading a frame"):
            recv_frame(b, DEFAULT_MAX_FRAME, body_timeout_s=0.5)
        assert time.monotonic() - start < 2
    finally:
        stop.set()
        thread.join()


def test_frame_before_hello_is_capped_far_below_the_frame_limit(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    with running_server(tmp_path):
        sock = raw_connect(ready)
        sock.settimeout(5)
        sock.sendall(header(HELLO_LIMIT + 1))
        reply = raw_recv(sock)
        assert reply["type"] == "error" and f"limit of {HELLO_LIMIT} bytes" in reply["message"]
        assert "hello" in reply["message"]
        assert raw_recv(sock) is None  # dropped
        with client(ready) as c:  # after a hello, the same size is an ordinary frame
            c.hello(SPEC)
            c.reset("t", "cfg", "i", 1)
            big = {**obs(0.5), "extra": np.zeros(2 * HELLO_LIMIT, np.uint8)}
            np.testing.assert_array_equal(c.infer(big, 0), 0.5)


def test_header_flood_keeps_server_memory_bounded(tmp_path: Path) -> None:
    """12 connections announce the largest frame before a hello, 12 more after one; none sends it."""
    ready = tmp_path / "ready.json"
    proc = start_server_process(server_python(), ready, ["--policy", "hold"], tmp_path / "server.log")
    socks: list[socket.socket] = []
    try:
        assert session_works(ready), (tmp_path / "server.log").read_text()
        base = rss_bytes(proc.pid)
        for _ in range(12):
            sock = raw_connect(ready)
            sock.sendall(header(DEFAULT_MAX_FRAME))
            socks.append(sock)
        for _ in range(12):
            sock = raw_connect(ready)
            raw_send(sock, hello_body())
            assert raw_recv(sock)["type"] == "hello"
            sock.sendall(header(DEFAULT_MAX_FRAME) + b"{" * 1000)
            socks.append(sock)
        peak = base
        for _ in range(15):
            time.sleep(0.1)
            peak = max(peak, rss_bytes(proc.pid))
        assert peak - base < 50 << 20, f"RSS grew by {(peak - base) >> 20} MiB"
        assert session_works(ready) and proc.poll() is None
    finally:
        for sock in socks:
            sock.close()
        stop_process(proc)


def greeted(ready: Path, spec: dict[str, Any] | None = None) -> socket.socket:
    """A raw connection after a JSON hello (the codec stays JSON) and a reset."""
    sock = raw_connect(ready)
    sock.settimeout(30)
    raw_send(sock, hello_body(spec=spec or SPEC))
    assert raw_recv(sock)["type"] == "hello"
    raw_send(sock, b'{"type": "reset", "task": "t", "task_config": "c", "instruction": "i", "seed": 1}')
    assert raw_recv(sock) == {"type": "reset"}
    return sock


def infer_body(extra_bytes: int) -> bytes:
    return JsonCodec().encode(
        {"type": "infer", "step": 0, "obs": {**obs(0.5), "x": np.zeros(extra_bytes, np.uint8)}}
    )


def test_frames_after_the_hello_are_bounded_by_the_observation_it_declares(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    spec = {**SPEC, "image_size": 64}  # one 64x64 camera: 4 x 64 x 64 x 3 + 1 MiB
    bound = 4 * 64 * 64 * 3 + (1 << 20)
    with running_server(tmp_path):
        sock = greeted(ready, spec)
        raw_send(sock, infer_body(bound // 2))  # what such an observation (and then some) needs
        assert raw_recv(sock)["type"] == "infer"
        sock.sendall(header(bound + 1))
        reply = raw_recv(sock)
        assert reply["type"] == "error", reply
        assert f"limit of {bound} bytes" in reply["message"] and "observation" in reply["message"]
        assert raw_recv(sock) is None  # dropped: its body was never read
        sock = raw_connect(ready)
        raw_send(sock, hello_body(spec={**SPEC, "image_size": "huge"}))
        reply = raw_recv(sock)
        assert reply["type"] == "error" and "hello spec: image_size must be" in reply["message"], reply
        sock.close()
        assert session_works(ready)


def test_requests_over_the_budget_wait_then_are_refused_and_the_connection_lives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODEL_SERVER_INFLIGHT_BYTES", str(8 << 20))
    monkeypatch.setattr("harness.model.inflight.WAIT_S", 1.0)
    ready = tmp_path / "ready.json"
    with running_server(tmp_path):
        hog, other = greeted(ready), greeted(ready)
        hog.sendall(header(3 << 20) + b"{")  # holds 6 MiB of the budget (3 MiB, twice) while it stalls
        time.sleep(0.3)
        raw_send(other, b'{"type": "ping"}')  # a small request never waits for the budget
        assert raw_recv(other) == {"type": "ping"}
        start = time.monotonic()
        raw_send(other, infer_body(2 << 20))
        reply = raw_recv(other)
        assert reply["type"] == "error" and "server busy" in reply["message"], reply
        assert "MODEL_SERVER_INFLIGHT_BYTES" in reply["message"] and time.monotonic() - start >= 0.9
        raw_send(other, b'{"type": "ping"}')  # its body was read away: the stream is in step
        assert raw_recv(other) == {"type": "ping"}
        hog.close()  # the budget frees up: the same request now goes through
        wait_for(lambda: _infers(other, 2 << 20), timeout=30)
        other.sendall(header(5 << 20))  # more than the whole budget: refused at once, naming it
        reply = raw_recv(other)
        assert reply["type"] == "error" and "(MODEL_SERVER_INFLIGHT_BYTES / 2)" in reply["message"], reply
        other.close()


def _infers(sock: socket.socket, extra_bytes: int) -> bool:
    raw_send(sock, infer_body(extra_bytes))
    return raw_recv(sock)["type"] == "infer"


# 2. connection floods


def test_connections_over_the_cap_are_closed_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_SERVER_MAX_CONNS", "4")
    ready = tmp_path / "ready.json"
    with running_server(tmp_path):
        held = [raw_connect(ready) for _ in range(4)]
        for sock in held:  # served: each holds a slot
            raw_send(sock, b'{"type": "ping"}')
            assert raw_recv(sock) == {"type": "ping"}
        extra = raw_connect(ready)
        extra.settimeout(5)
        reply = raw_recv(extra)
        assert reply["type"] == "error" and "server busy: 4 connections" in reply["message"]
        assert raw_recv(extra) is None
        extra.close()
        held.pop().close()  # a slot frees up
        wait_for(lambda: session_works(ready), timeout=10)
        for sock in held:
            sock.close()


def test_connection_without_hello_is_closed_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_SERVER_HELLO_TIMEOUT", "0.5")
    ready = tmp_path / "ready.json"
    with running_server(tmp_path), client(ready) as greeted:
        greeted.hello(SPEC)
        idle, chatty = raw_connect(ready), raw_connect(ready)
        start = time.monotonic()
        idle.settimeout(5)
        reply = raw_recv(idle)
        assert reply["type"] == "error" and "no hello within 0.5 s" in reply["message"]
        assert raw_recv(idle) is None and time.monotonic() - start < 3
        chatty.settimeout(5)
        closed = False  # answered pings (loopback) do not stand in for a hello
        while not closed and time.monotonic() - start < 4:
            try:
                raw_send(chatty, b'{"type": "ping"}')
                answer = raw_recv(chatty)
                closed = answer is None or answer["type"] == "error"
            except ConnectionError:
                closed = True
            time.sleep(0.1)
        assert closed and time.monotonic() - start < 3
        time.sleep(0.3)
        greeted.ping()  # a greeted connection idles as long as it likes


def test_accept_survives_running_out_of_descriptors(tmp_path: Path) -> None:
    ready, log = tmp_path / "ready.json", tmp_path / "server.log"
    proc = start_server_process(server_python(), ready, ["--policy", "hold"], log)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (48, hard))  # a server with few descriptors
    socks: list[socket.socket] = []
    try:
        assert session_works(ready), log.read_text()
        time.sleep(0.3)  # that connection's descriptor is closed on the server's side too
        for _ in range(80):  # more than the server can hold descriptors for
            socks.append(raw_connect(ready))
        time.sleep(1.5)
        assert proc.poll() is None, log.read_text()
        assert ready.exists()
        for sock in socks:
            sock.close()
        wait_for(lambda: session_works(ready), timeout=20)
        assert proc.poll() is None
    finally:
        for sock in socks:
            sock.close()
        stop_process(proc)
    text = log.read_text()
    assert text.count("Too many open files") == 1, text  # logged once, not once per retry


# 3. IPv6


def ipv6_loopback_or_skip() -> None:
    if not socket.has_ipv6:
        pytest.skip("this Python has no IPv6 support (socket.has_ipv6 is False)")
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError as exc:
        pytest.skip(f"cannot bind the IPv6 loopback ::1 on this machine: {exc}")


def test_ipv6_loopback_bind_serves_a_real_client(tmp_path: Path) -> None:
    ipv6_loopback_or_skip()
    ready = tmp_path / "ready.json"
    with running_server(tmp_path, bind="::1"):
        info = read_ready(ready)
        assert info["host"] == "::1" and "token" not in info
        assert session_works(ready)


def test_ipv6_wildcard_bind_needs_the_token(tmp_path: Path) -> None:
    ipv6_loopback_or_skip()
    ready = tmp_path / "ready.json"
    with running_server(tmp_path, bind="::"):
        info = read_ready(ready)
        assert info["token"] and info["host"] == socket.getfqdn()
        assert session_works(ready, host="::1")
        if socket.has_dualstack_ipv6():  # `::` takes IPv4 clients too where the system allows it
            assert session_works(ready, host="127.0.0.1")
        sock = socket.create_connection(("::1", info["port"]), timeout=10)
        with (
            PolicyClient(sock, max_frame=DEFAULT_MAX_FRAME) as anonymous,
            pytest.raises(WireError, match="token"),
        ):
            anonymous.hello(SPEC)


def test_sim_side_listens_on_ipv6(tmp_path: Path) -> None:
    ipv6_loopback_or_skip()
    sim_ready, stop = tmp_path / "sim.json", threading.Event()
    model_side = threading.Thread(
        target=connect_out, args=(load_policy("hold"), Settings.defaults(), sim_ready, 30, stop), daemon=True
    )
    model_side.start()
    with PolicyClient.listen(sim_ready, max_frame=DEFAULT_MAX_FRAME, timeout_s=30, bind="::1") as c:
        assert read_ready(sim_ready)["host"] == "::1"
        assert c.hello(SPEC)["policy"] == "hold"
    stop.set()
    model_side.join(5)


def test_unusable_bind_is_one_line_naming_the_knob(tmp_path: Path) -> None:
    script = str(REPO / "scripts" / "policy_model_server.py")
    env = {**os.environ, "PYTHONPATH": str(REPO), "EVAL_ROOT": str(REPO)}
    done = subprocess.run(
        [server_python(), script, "--policy", "hold", "--ready-file", str(tmp_path / "r")],
        env={**env, "MODEL_SERVER_BIND": "192.0.2.1"},  # TEST-NET-1: not an address of this host
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "MODEL_SERVER_BIND=192.0.2.1" in done.stderr


# 4. the log cost of bad requests


def test_bad_requests_log_one_line_policy_failures_keep_their_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="model_server")
    ready = tmp_path / "ready.json"
    bad = [
        b'{"type": ["x"]}',
        b'{"type": {"a": 1}}',
        hello_body([["msgpack"]]),
        hello_body([{}]),
        hello_body(["json"], spec={**SPEC, "cameras": 5}),
    ]
    with running_server(tmp_path, policy=NOISY, overrides=["cameras=[base_camera]"]):
        sock = raw_connect(ready)
        raw_send(sock, hello_body())
        assert raw_recv(sock)["type"] == "hello"
        for i in range(300):
            raw_send(sock, bad[i % len(bad)])
            assert raw_recv(sock)["type"] == "error"
        raw_send(sock, b'{"type": "ping"}')
        assert raw_recv(sock) == {"type": "ping"}
        sock.close()
        with client(ready) as c:
            c.hello(SPEC)
            c.reset("t", "c", "i", 0)
            with pytest.raises(WireError, match="RuntimeError: boom"):
                c.infer({**obs(), "explode": True}, 0)
    records = [r for r in caplog.records if r.name == "model_server"]
    tracebacks = [r for r in records if r.exc_info]
    assert len(tracebacks) == 1 and "boom" in str(tracebacks[0].exc_info[1])
    assert 1 <= sum("bad request" in r.getMessage() for r in records) <= 2
    assert len(records) < 20, [r.getMessage() for r in records]


# 5. the token before anything else


def test_token_server_refuses_every_message_before_the_hello(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    reset = b'{"type": "reset", "task": "t", "task_config": "c", "instruction": "i", "seed": 1}'
    with running_server(tmp_path, bind="0.0.0.0"):
        info = read_ready(ready)
        for body in (b'{"type": "ping"}', reset, b"\x00garbage", hello_body(token="wrong")):
            sock = socket.create_connection(("127.0.0.1", info["port"]), timeout=5)
            raw_send(sock, body)
            reply = raw_recv(sock)
            assert reply["type"] == "error", (body, reply)
            assert raw_recv(sock) is None, body  # and dropped
            sock.close()
        sock = socket.create_connection(("127.0.0.1", info["port"]), timeout=5)
        raw_send(sock, hello_body(token=info["token"]))
        assert raw_recv(sock)["type"] == "hello"
        raw_send(sock, b'{"type": "ping"}')
        assert raw_recv(sock) == {"type": "ping"}
        sock.close()


# 6. the wire fuzzer


@pytest.mark.parametrize("bind", ["127.0.0.1", "0.0.0.0"])
def test_wire_fuzz_leaves_the_server_up_and_serving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bind: str
) -> None:
    caplog.set_level(logging.INFO, logger="model_server")
    ready = tmp_path / "ready.json"
    with serving(ModelServer(load_policy("hold"), ready, Settings.defaults(), bind=bind)) as thread:
        info = read_ready(ready)
        fuzzer = WireFuzzer(("127.0.0.1", info["port"]), info.get("token"), f"fuzz-{bind}", HELLO_LIMIT)
        start = time.monotonic()
        fuzzer.run(3000)
        assert time.monotonic() - start < 60
        assert thread.is_alive()
        assert session_works(ready, host="127.0.0.1")
    records = [r for r in caplog.records if r.name == "model_server"]
    assert all(r.getMessage().startswith("policy failed") for r in records if r.exc_info)
    loud = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert len(loud) <= 20, loud
