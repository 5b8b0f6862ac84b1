"""The shared-memory transport between real clients and model servers: the hello negotiation (either
end can refuse), drops on a broken stream, and chaos: a SIGKILLed or SIGSTOPped peer never leaves
the other blocked, and once either side is gone no process holds the regions any more."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from harness.model.policyload import load_policy
from harness.model.server import ModelServer
from harness.wire.client import PolicyClient
from harness.wire.codecs import MsgpackCodec
from harness.wire.errors import PeerClosed, WireError
from harness.wire.frames import recv_frame, send_frame
from harness.wire.shm import INITIAL_SIZE
from harness.wire.shmcodec import ShmCodec
from tests.support.wirekit import (
    REPO,
    SPEC,
    hello_body,
    model_python,
    obs,
    raw_connect,
    raw_recv,
    raw_send,
    running_server,
    shm_holders,
    start_server_process,
    stop_process,
    wait_for,
)

SLEEP = str(REPO / "tests" / "policies" / "sleep")


def connect(ready: Path, shm: str, **options: object) -> PolicyClient:
    client = PolicyClient.from_ready_file(ready, timeout_s=30, io_timeout_s=30, shm=shm, **options)
    client.hello(SPEC)
    client.reset("task", "cfg", "do it", 0)
    return client


def test_same_host_client_and_server_agree_on_shared_memory(tmp_path: Path) -> None:
    with running_server(tmp_path) as server, connect(server.ready_file, "auto") as client:
        assert isinstance(client._codec, ShmCodec)
        chunk = client.infer(obs(3.0), 0)
        assert chunk.shape == (30, 10) and np.allclose(chunk, 3.0)  # hold: the proprio, repeated
        big = obs(4.0, size=2 * int((INITIAL_SIZE / 3) ** 0.5))  # larger than a region's first size
        assert np.allclose(client.infer(big, 1), 4.0)


def test_results_match_the_socket_codec(tmp_path: Path) -> None:
    noisy = ["noise=0.5"]
    with running_server(tmp_path, str(REPO / "tests" / "policies" / "noisy"), noisy) as server:
        chunks = {}
        for shm in ("1", "0"):
            with connect(server.ready_file, shm) as client:
                assert isinstance(client._codec, ShmCodec) == (shm == "1")
                chunks[shm] = [client.infer(obs(float(s)), s) for s in range(3)]
        for a, b in zip(chunks["1"], chunks["0"], strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_policy_that_keeps_its_observations_answers_as_over_the_socket(tmp_path: Path) -> None:
    """The server reads lent observations as views of the client's region: a policy that keeps the
    arrays it was given (a frame stack of 5) must see them unchanged however many frames follow,
    so its answers are those it gives over the socket, step by step, and the region stays small."""
    framestack = str(REPO / "tests" / "policies" / "framestack")
    with running_server(tmp_path, framestack) as server:
        answers = {}
        for shm in ("1", "0"):
            with connect(server.ready_file, shm) as client:
                assert isinstance(client._codec, ShmCodec) == (shm == "1")
                answers[shm] = [float(client.infer(obs(float(s), size=64), s)[0, 0]) for s in range(30)]
                if shm == "1":
                    assert os.fstat(client._codec._out.fd).st_size <= INITIAL_SIZE  # 3 frames of ~12 KB
    assert answers["1"] == answers["0"]
    assert len(set(answers["1"])) == 30  # each answer counts what the stack holds: all differ


def test_a_server_with_shm_off_refuses_and_the_client_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WIRE_SHM", "0")
    with running_server(tmp_path) as server:
        with connect(server.ready_file, "auto") as client:
            assert isinstance(client._codec, MsgpackCodec)
            assert client.infer(obs(1.0), 0).shape == (30, 10)
        with pytest.raises(WireError, match=r"WIRE_SHM=1 but the model server did not take shared memory: "
                           r"this model server does not take shared memory \(WIRE_SHM=0\)"):  # fmt: skip
            connect(server.ready_file, "1")


def test_a_server_that_cannot_map_the_offer_says_why(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        sock = raw_connect(server.ready_file)
        offer = {"pid": os.getpid(), "request_fd": 0, "reply_fd": 1, "nonce": "0" * 32}
        raw_send(sock, hello_body(["shm", "msgpack"], shm=offer))
        reply = raw_recv(sock)
        sock.close()
    assert reply is not None and reply["codec"] == "msgpack"
    assert "is not this connection's shared memory" in reply["shm_refused"]


def test_the_client_offers_only_when_asked_or_on_the_same_host(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        with connect(server.ready_file, "0") as client:
            assert isinstance(client._codec, MsgpackCodec)
        with pytest.raises(WireError, match=r"WIRE_SHM='yes': expected one of auto, 0, 1"):
            PolicyClient.from_ready_file(server.ready_file, timeout_s=5, shm="yes")


def test_a_bad_knob_value_stops_the_server_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIRE_SHM", "maybe")
    with pytest.raises(ValueError, match=r"knob WIRE_SHM='maybe': expected one of auto, 0, 1"):
        ModelServer(load_policy("hold"), tmp_path / "ready.json")


def test_a_frame_out_of_sequence_drops_the_connection(tmp_path: Path) -> None:
    with running_server(tmp_path) as server, connect(server.ready_file, "1") as client:
        codec, sock = client._codec, client._sock
        body = codec.encode({"type": "infer", "obs": obs(), "step": 0})
        send_frame(sock, body)
        codec.decode(recv_frame(sock))
        send_frame(sock, body)  # the same frame again (frame 1 was the reset): out of step
        reply = codec.decode(recv_frame(sock))
        assert reply["type"] == "error" and "out of sequence: expected 3, got 2" in reply["message"]
        with pytest.raises(PeerClosed):
            recv_frame(sock)


CLIENT = """
import os
import sys
from harness.wire.client import PolicyClient
from tests.support.wirekit import SPEC, obs
client = PolicyClient.from_ready_file(sys.argv[1], timeout_s=30, shm="1")
client.hello(SPEC)
client.reset("task", "cfg", "do it", 0)
client.infer(obs(), 0)
print(os.readlink(f"/proc/self/fd/{client._codec._out.fd}"), flush=True)
step = 1
while True:
    client.infer(obs(), step)
    step += 1
"""


def server_python() -> str:
    return model_python() or sys.executable


def test_sigkill_of_the_client_mid_stream_frees_the_regions_in_the_server(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    server = start_server_process(server_python(), ready, ["--policy", "hold"], tmp_path / "server.log")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, str(ready)], env=env, stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert client.stdout is not None
        link = client.stdout.readline().strip()  # /memfd:harness-wire-<nonce>-request (deleted)
        nonce = link.split("harness-wire-")[1].split("-")[0]
        wait_for(lambda: str(server.pid) in shm_holders(nonce))  # the server mapped them: the test sees it
        client.kill()  # SIGKILL, mid-stream: a frame may be half written
        client.wait(10)
        wait_for(lambda: not shm_holders(nonce), timeout=60)
        assert not [name for name in os.listdir("/dev/shm") if "harness" in name]
        with PolicyClient.from_ready_file(ready, timeout_s=10, shm="1") as again:  # still serving
            again.hello(SPEC)
            again.reset("task", "cfg", "do it", 1)
            assert again.infer(obs(2.0), 0).shape == (30, 10)
    finally:
        client.kill()
        client.wait(10)
        stop_process(server)


def test_sigkill_of_the_server_mid_call_never_leaves_the_client_blocked(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    env = {"SLEEP_POLICY_MS": "30000"}
    server = start_server_process(server_python(), ready, ["--policy", SLEEP], tmp_path / "server.log", env)
    try:
        client = PolicyClient.from_ready_file(ready, timeout_s=60, io_timeout_s=600, shm="1")
        client.hello({**SPEC, "cameras": []})
        client.reset("task", "cfg", "do it", 0)
        nonce = os.readlink(f"/proc/self/fd/{client._codec._out.fd}").split("harness-wire-")[1][:32]
        outcome: list[BaseException] = []

        def call() -> None:
            try:
                client.infer(obs(), 0)
            except BaseException as exc:
                outcome.append(exc)

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        wait_for(lambda: str(server.pid) in shm_holders(nonce))
        server.kill()  # while the reply is pending
        caller.join(60)
        assert not caller.is_alive(), "the client is still blocked on a dead server"
        assert outcome and isinstance(outcome[0], PeerClosed)
        client.close()
        wait_for(lambda: not shm_holders(nonce), timeout=60)
    finally:
        server.kill()
        server.wait(10)


def test_a_stopped_server_times_the_client_out(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    server = start_server_process(server_python(), ready, ["--policy", "hold"], tmp_path / "server.log")
    try:
        with PolicyClient.from_ready_file(ready, timeout_s=60, io_timeout_s=2, shm="1") as client:
            client.hello(SPEC)
            client.reset("task", "cfg", "do it", 0)
            server.send_signal(signal.SIGSTOP)
            wait_for(lambda: _state(server.pid) == "T")  # stopped, not about to be
            with pytest.raises(WireError, match="timed out"):
                client.infer(obs(), 0)
    finally:
        server.send_signal(signal.SIGCONT)
        stop_process(server)


def _state(pid: int) -> str:
    """The process's state letter in /proc/<pid>/stat (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
