"""Our model server in openpi mode, driven by the real openpi-client (WebsocketClientPolicy,
ActionChunkBroker, msgpack_numpy) from the sim env."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import websockets.sync.client
from openpi_client import msgpack_numpy
from openpi_client.action_chunk_broker import ActionChunkBroker
from openpi_client.websocket_client_policy import WebsocketClientPolicy

from harness.config.policymap import load_policy_map
from harness.config.settings import Settings
from harness.model.openpi_server import OpenpiServer
from harness.model.policyload import load_policy
from harness.wire import openpi
from tests.support.wirekit import (
    NOISY,
    episode,
    obs,
    running_server,
    wait_for,
)


@contextmanager
def openpi_server(tmp_path: Path, policy: str = "hold", policy_map: Path | None = None) -> Iterator[int]:
    """An OpenpiServer in a thread of this process; yields its port."""
    loaded = load_policy(policy)
    policy_map = load_policy_map(policy_map) if policy_map else None
    server = OpenpiServer(loaded, tmp_path / "ready.json", Settings.defaults(), policy_map=policy_map)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    wait_for(lambda: server.ready_file.exists())
    try:
        yield server.port
    finally:
        server.shutdown()
        thread.join(5)


def pose(value: float) -> np.ndarray:
    return np.arange(10, dtype=np.float32) + value


def test_real_openpi_client_against_our_server_in_the_model_env(openpi_mode_server) -> None:
    """The model env has no openpi-client: the server must not need it. Metadata first, then
    `hold` answers each observation with its proprio repeated over the chunk."""
    proc, ready, info = openpi_mode_server
    assert info["protocol"] == "openpi"
    client = WebsocketClientPolicy(host="127.0.0.1", port=info["port"])
    meta = client.get_server_metadata()
    assert meta["policy"] == "hold" and meta["action"] == "any" and meta["chunk_len"] == 30
    reply = client.infer({"proprio": pose(1.0), "prompt": "hold still"})
    assert reply["actions"].shape == (30, 10) and reply["actions"].dtype == np.float32
    np.testing.assert_array_equal(reply["actions"], np.tile(pose(1.0), (30, 1)))
    proc.terminate()  # SIGTERM with a client still connected: a clean, prompt exit
    assert proc.wait(15) == 0
    assert not ready.exists()


def test_action_chunk_broker_queries_once_per_chunk(tmp_path: Path) -> None:
    with openpi_server(tmp_path) as port:
        inner = WebsocketClientPolicy(host="127.0.0.1", port=port)
        calls = []
        real_infer = inner.infer

        def counting(obs: dict) -> dict:
            calls.append(obs["proprio"][0])
            return real_infer(obs)

        inner.infer = counting  # type: ignore[method-assign]
        broker = ActionChunkBroker(inner, action_horizon=30)
        actions = [broker.infer({"proprio": pose(float(step))})["actions"] for step in range(45)]
    assert calls == [0.0, 30.0]  # one query per 30 executed actions
    assert all(a.shape == (10,) for a in actions)
    np.testing.assert_array_equal(actions[29], pose(0.0))  # the first chunk's last action
    np.testing.assert_array_equal(actions[30], pose(30.0))


def test_openpi_mode_seeds_like_the_native_server(tmp_path: Path) -> None:
    """Same wrapper, same Session: the noisy policy's draws for (seed, step) are the native ones."""
    with running_server(tmp_path / "native", NOISY) as native:
        want = episode(native.ready_file, seed=7, steps=3)
    with openpi_server(tmp_path, NOISY) as port:
        client = WebsocketClientPolicy(host="127.0.0.1", port=port)
        start = {
            "__ctrl__": "episode_start",
            "__task__": "task",
            "__task_config__": "cfg",
            "__episode_id__": 7,
        }
        ack = client.infer(start)
        assert ack == {"__ack__": "episode_start"}
        got = [client.infer(obs(float(step)))["actions"] for step in range(3)]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_mapping_yaml_renames_openpi_keys(tmp_path: Path) -> None:
    mapping = tmp_path / "map.yaml"
    mapping.write_text(
        "protocol: openpi\npolicy: hold\naction_dim: 10\nproprio: observation/state\n"
        "instruction: prompt\naction: [out, actions]\n"
    )
    with openpi_server(tmp_path, policy_map=mapping) as port:
        client = WebsocketClientPolicy(host="127.0.0.1", port=port)
        reply = client.infer({"observation/state": pose(2.0), "prompt": "hold"})
        np.testing.assert_array_equal(reply["out"]["actions"][0], pose(2.0))
        bad = WebsocketClientPolicy(host="127.0.0.1", port=port)
        with pytest.raises(RuntimeError, match="observation has no observation/state"):
            bad.infer({"proprio": pose(2.0)})


def test_errors_come_back_as_a_text_frame_then_close(tmp_path: Path) -> None:
    with openpi_server(tmp_path) as port:
        client = WebsocketClientPolicy(host="127.0.0.1", port=port)
        with pytest.raises(RuntimeError, match=r"Error in inference server:\n(?s:.*)no 'proprio'"):
            client.infer({"images": {}})
        with websockets.sync.client.connect(f"ws://127.0.0.1:{port}") as conn:
            msgpack_numpy.unpackb(conn.recv())  # metadata
            conn.send(b"\xc1 not msgpack")
            text = conn.recv()
            assert isinstance(text, str) and "observation frame is not msgpack" in text
            with pytest.raises(websockets.exceptions.ConnectionClosedError) as closed:
                conn.recv()
            assert closed.value.rcvd.code == 1011


def test_openpi_codec_matches_openpi_client_byte_for_byte() -> None:
    obs = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.uint8(3), "c": "text", "d": [1, 2.5]}
    ours, theirs = openpi.packb(obs), msgpack_numpy.packb(obs)
    assert ours == theirs
    back = openpi.unpackb(theirs)
    np.testing.assert_array_equal(back["a"], obs["a"])
    assert back["b"] == 3 and back["b"].dtype == np.uint8 and back["c"] == "text"


def test_openpi_codec_refuses_object_arrays_and_lying_sizes() -> None:
    evil = msgpack_numpy.packb({"x": np.zeros(2, np.float32)}).replace(b"<f4", b"|O8")
    with pytest.raises(Exception, match="refused"):
        openpi.unpackb(evil)
    short = {b"__ndarray__": True, b"data": b"\x00" * 3, b"dtype": "<f4", b"shape": [2]}
    import msgpack

    with pytest.raises(Exception, match="3 bytes"):
        openpi.unpackb(msgpack.packb({"x": short}))
