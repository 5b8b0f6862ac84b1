"""The model server against well-formed and malformed clients, concurrency, tokens, sim-as-server."""

from __future__ import annotations

import json
import os
import stat
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgpack
import numpy as np
import pytest

import harness.model.requests
from harness.config.knobs import DEFAULT_MAX_FRAME
from harness.config.settings import Settings
from harness.model.dialout import connect_out, parse_target
from harness.model.policyload import load_policy
from harness.wire.client import PolicyClient
from harness.wire.codecs import JsonCodec, MsgpackCodec
from harness.wire.errors import RemoteError, WireError
from harness.wire.readyfile import read_ready
from support.wirekit import NOISY, SPEC, client, episode, obs, raw_connect, raw_recv, raw_send, running_server


@pytest.mark.parametrize("codec", ["msgpack", "json"])
def test_hold_round_trip_both_codecs(tmp_path: Path, codec: str) -> None:
    with running_server(tmp_path), client(tmp_path / "ready.json", codec=codec) as c:
        spec = c.hello(SPEC)
        assert spec["policy"] == "hold" and spec["action"] == "any" and spec["chunk_len"] == 30
        assert type(c._codec).__name__.lower().startswith(codec)
        c.ping()
        c.reset("task", "cfg", "pick", 3)
        chunk = c.infer(obs(0.25), 0)
        assert chunk.shape == (30, 10) and chunk.dtype == np.float32
        np.testing.assert_array_equal(chunk, 0.25)


def test_ready_file_contents(tmp_path: Path) -> None:
    with running_server(tmp_path):
        info = read_ready(tmp_path / "ready.json")
        assert info["host"] == "127.0.0.1" and info["pid"] == os.getpid()
        assert info["policy"] == "hold" and "token" not in info
        assert stat.S_IMODE((tmp_path / "ready.json").stat().st_mode) == 0o600
    assert not (tmp_path / "ready.json").exists()


def test_spec_mismatch_names_both_values(tmp_path: Path) -> None:
    with (
        running_server(tmp_path, overrides=["action_dim=10"]),
        client(tmp_path / "ready.json") as c,
        pytest.raises(RemoteError, match="action_dim: policy produces 10, robot takes 20"),
    ):
        c.hello({**SPEC, "action_dim": 20})


def test_camera_and_image_size_mismatch(tmp_path: Path) -> None:
    over = ["cameras=[hand_camera]", "image_size=224"]
    with (
        running_server(tmp_path, overrides=over),
        client(tmp_path / "ready.json") as c,
        pytest.raises(
            RemoteError, match=r"missing \['hand_camera'\].*image_size: policy wants 224, sim renders 128"
        ),
    ):
        c.hello({**SPEC, "image_size": 128})


def good(ready: Path) -> None:
    """A well-formed client still gets served."""
    chunks = episode(ready, seed=1, steps=1)
    assert chunks[0].shape == (30, 10)


def hello_frame(codecs: list[str] | None = None) -> bytes:
    return json.dumps({"type": "hello", "version": 1, "codecs": codecs or ["json"], "spec": SPEC}).encode()


def nd(data: str, dtype: str, shape: list[int]) -> dict:
    return {"__ndarray__": data, "dtype": dtype, "shape": shape}


BAD_AFTER_HELLO = {
    "garbage": (b"\x00\x01garbage", "invalid JSON"),
    "unknown type": (b'{"type": "teleport"}', "unknown message type 'teleport'"),
    "no type": (b'{"obs": {}}', "unknown message type None"),
    "object dtype": (
        json.dumps({"type": "infer", "step": 0, "obs": {"a": nd("AAAA", "O", [1])}}).encode(),
        "refused",
    ),
    "void dtype": (
        json.dumps({"type": "infer", "step": 0, "obs": {"a": nd("AAAA", "V2", [2])}}).encode(),
        "refused",
    ),
    "size mismatch": (
        json.dumps({"type": "infer", "step": 0, "obs": {"a": nd("AAAA", "float32", [2])}}).encode(),
        "need 8",
    ),
    "bad field": (
        b'{"type": "reset", "task": "t", "task_config": "c", "instruction": "i", "seed": "x"}',
        "seed",
    ),
    "bool step": (b'{"type": "infer", "step": true, "obs": {}}', "step"),
    "infer before reset": (b'{"type": "infer", "step": 0, "obs": {}}', "infer before reset"),
    "wrong version": (
        b'{"type": "hello", "version": 99, "codecs": ["json"], "spec": {}}',
        "version mismatch",
    ),
    "no common codec": (
        b'{"type": "hello", "version": 1, "codecs": ["pickle"], "spec": {}}',
        "no common codec",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_AFTER_HELLO))
def test_malformed_request_gets_error_and_server_stays_up(tmp_path: Path, case: str) -> None:
    body, message = BAD_AFTER_HELLO[case]
    ready = tmp_path / "ready.json"
    with running_server(tmp_path):
        sock = raw_connect(ready)
        raw_send(sock, hello_frame())
        assert raw_recv(sock)["type"] == "hello"
        raw_send(sock, body)
        reply = raw_recv(sock)
        assert reply["type"] == "error" and message in reply["message"]
        raw_send(sock, b'{"type": "ping"}')  # the same connection still works
        assert raw_recv(sock) == {"type": "ping"}
        sock.close()
        good(ready)


def test_request_before_hello(tmp_path: Path) -> None:
    with running_server(tmp_path):
        sock = raw_connect(tmp_path / "ready.json")
        raw_send(sock, b'{"type": "reset", "task": "t", "task_config": "c", "instruction": "i", "seed": 1}')
        assert "before hello" in raw_recv(sock)["message"]
        sock.close()


def test_bad_msgpack_after_agreeing_msgpack(tmp_path: Path) -> None:
    with running_server(tmp_path):
        sock = raw_connect(tmp_path / "ready.json")
        raw_send(sock, hello_frame(["msgpack"]))
        assert raw_recv(sock)["codec"] == "msgpack"
        raw_send(sock, b"\xc1\xc1")
        header = sock.recv(4)
        reply = MsgpackCodec().decode(sock.recv(struct.unpack(">I", header)[0]))
        assert reply["type"] == "error" and "invalid msgpack" in reply["message"]
        raw_send(sock, msgpack.packb({"type": "infer", "step": 0, "obs": {"a": msgpack.ExtType(3, b"")}}))
        header = sock.recv(4)
        assert (
            "extension type 3" in MsgpackCodec().decode(sock.recv(struct.unpack(">I", header)[0]))["message"]
        )
        sock.close()
        good(tmp_path / "ready.json")


def test_oversize_frame_is_refused_and_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIRE_MAX_FRAME", str(1 << 20))
    with running_server(tmp_path):
        sock = raw_connect(tmp_path / "ready.json")
        sock.sendall(struct.pack(">I", 0xFFFFFFFF))
        reply = raw_recv(sock)
        assert reply["type"] == "error" and "exceeds the limit" in reply["message"]
        assert raw_recv(sock) is None  # dropped: the stream cannot be resynchronised
        good(tmp_path / "ready.json")


def test_mid_frame_disconnect_and_stall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.model.requests, "FRAME_TIMEOUT_S", 0.3)
    with running_server(tmp_path):
        ready = tmp_path / "ready.json"
        gone = raw_connect(ready)
        gone.sendall(struct.pack(">I", 1000) + b"{")
        gone.close()
        stalled = raw_connect(ready)
        stalled.sendall(struct.pack(">I", 1000) + b"{")
        good(ready)  # served while the stalled client holds its connection
        reply = raw_recv(stalled)
        assert reply["type"] == "error" and "timed out" in reply["message"]
        assert raw_recv(stalled) is None
        good(ready)


def test_policy_exception_is_an_error_reply(tmp_path: Path) -> None:
    with running_server(tmp_path, policy=NOISY), client(tmp_path / "ready.json") as c:
        c.hello(SPEC)
        c.reset("t", "c", "i", 0)
        with pytest.raises(RemoteError, match="RuntimeError: boom"):
            c.infer({**obs(), "explode": True}, 0)
        assert c.infer(obs(), 0).shape == (4, 10)


def test_concurrent_clients_match_solo_runs(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    seeds = [11, 12, 13, 14, 15]
    with running_server(tmp_path, policy=NOISY):
        solo = {seed: episode(ready, seed, steps=6) for seed in seeds}
        with ThreadPoolExecutor(len(seeds)) as pool:
            together = dict(zip(seeds, pool.map(lambda s: episode(ready, s, steps=6), seeds), strict=True))
    for seed in seeds:
        for a, b in zip(solo[seed], together[seed], strict=True):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(solo[11][0], solo[12][0])


def test_reset_of_one_client_leaves_another_alone(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    with running_server(tmp_path, policy=NOISY):
        alone = episode(ready, 21, steps=2)
        with client(ready) as a, client(ready) as b:
            a.hello(SPEC)
            b.hello(SPEC)
            a.reset("task", "cfg", "do it", 21)  # the RNG key includes the task: as episode() does
            first = a.infer(obs(0.0), 0)
            b.reset("t", "cfg", "i", 99)
            b.infer(obs(0.0), 0)
            second = a.infer(obs(1.0), 1)
    np.testing.assert_array_equal(first, alone[0])
    np.testing.assert_array_equal(second, alone[1])


def test_non_loopback_bind_requires_token(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    with running_server(tmp_path, bind="0.0.0.0"):
        info = read_ready(ready)
        assert info["token"] and stat.S_IMODE(ready.stat().st_mode) == 0o600
        import socket

        sock = socket.create_connection(("127.0.0.1", info["port"]), timeout=10)
        with (
            PolicyClient(sock, max_frame=DEFAULT_MAX_FRAME) as anonymous,
            pytest.raises(RemoteError, match="token"),
        ):
            anonymous.hello(SPEC)
        os.environ["MODEL_SERVER_HOST"] = "127.0.0.1"
        try:
            with client(ready) as c:
                assert c.hello(SPEC)["policy"] == "hold"
        finally:
            del os.environ["MODEL_SERVER_HOST"]


def test_token_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_SERVER_TOKEN", "s3cret")
    with running_server(tmp_path, bind="0.0.0.0"):
        assert read_ready(tmp_path / "ready.json")["token"] == "s3cret"


def test_sim_as_server(tmp_path: Path) -> None:
    """The sim side listens (its own ready file), the model side dials it; each new sim client too."""
    sim_ready = tmp_path / "sim.json"
    policy = load_policy("hold")
    stop = threading.Event()
    model_side = threading.Thread(
        target=connect_out, args=(policy, Settings.defaults(), sim_ready, 30, stop), daemon=True
    )
    model_side.start()
    for value in (0.5, 0.75):
        with PolicyClient.listen(sim_ready, max_frame=DEFAULT_MAX_FRAME, timeout_s=30) as c:
            assert read_ready(sim_ready)["role"] == "sim"
            assert c.hello(SPEC)["policy"] == "hold"
            c.reset("t", "cfg", "i", 1)
            np.testing.assert_array_equal(c.infer(obs(value), 0), value)
        assert not sim_ready.exists()
    stop.set()
    model_side.join(5)


def test_sim_as_server_non_loopback_checks_token(tmp_path: Path) -> None:
    sim_ready = tmp_path / "sim.json"
    policy = load_policy("hold")
    stop = threading.Event()
    threading.Thread(
        target=connect_out, args=(policy, Settings.defaults(), sim_ready, 30, stop), daemon=True
    ).start()
    with PolicyClient.listen(sim_ready, max_frame=DEFAULT_MAX_FRAME, timeout_s=30, bind="0.0.0.0") as c:
        assert read_ready(sim_ready)["token"]
        assert c.hello(SPEC)["policy"] == "hold"  # the model side echoed the token from the file
    stop.set()


def test_sim_as_server_host_port(tmp_path: Path) -> None:
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    done = threading.Thread(
        target=connect_out,
        args=(load_policy("hold"), Settings.defaults(), f"127.0.0.1:{port}", 30),
        daemon=True,
    )
    done.start()
    sock, _ = listener.accept()
    listener.close()
    with PolicyClient(sock, max_frame=DEFAULT_MAX_FRAME) as c:
        c.hello(SPEC)
        c.ping()
    done.join(5)
    assert not done.is_alive()


def test_sim_as_server_ipv6_literal(tmp_path: Path) -> None:
    import socket

    listener = socket.create_server(("::1", 0), family=socket.AF_INET6)
    port = listener.getsockname()[1]
    done = threading.Thread(
        target=connect_out, args=(load_policy("hold"), Settings.defaults(), f"[::1]:{port}", 30), daemon=True
    )
    done.start()
    listener.settimeout(30)
    sock, _ = listener.accept()
    listener.close()
    with PolicyClient(sock, max_frame=DEFAULT_MAX_FRAME) as c:
        assert c.hello(SPEC)["policy"] == "hold"
    done.join(5)
    assert not done.is_alive()


@pytest.mark.parametrize("target", ["host:", "host:http", "[::1]:99999", ":5000"])
def test_a_bad_connect_target_is_named(target: str) -> None:
    with pytest.raises(WireError, match=r"--connect .*expected HOST:PORT, \[IPv6\]:PORT or a sim ready file"):
        parse_target(target)


def test_client_waits_for_ready_file_then_times_out(tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(WireError, match=r"did not appear within 0\.3 s"):
        PolicyClient.from_ready_file(tmp_path / "never.json", timeout_s=0.3)
    assert time.monotonic() - start < 10


def test_json_codec_is_readable_by_reference_clients(tmp_path: Path) -> None:
    """A client speaking only the reference JSON (no msgpack) is served."""
    with running_server(tmp_path):
        sock = raw_connect(tmp_path / "ready.json")
        raw_send(sock, hello_frame(["json"]))
        raw_recv(sock)
        raw_send(sock, b'{"type": "reset", "task": "t", "task_config": "c", "instruction": "i", "seed": 1}')
        assert raw_recv(sock) == {"type": "reset"}
        raw_send(sock, JsonCodec().encode({"type": "infer", "step": 0, "obs": obs(2.0)}))
        np.testing.assert_array_equal(raw_recv(sock)["actions"], 2.0)
        sock.close()


def test_the_knob_sets_the_server_frame_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIRE_MAX_FRAME", "1000")
    with running_server(tmp_path):
        sock = raw_connect(tmp_path / "ready.json")
        sock.sendall(struct.pack(">I", 1001))  # announces a body over the limit
        reply = b""
        while chunk := sock.recv(4096):  # an error reply, then the server drops the connection
            reply += chunk
        assert b"limit of 1000 bytes" in reply
        sock.close()
        with client(tmp_path / "ready.json") as c:
            assert c.hello(SPEC)["policy"] == "hold"  # the server itself lives on
