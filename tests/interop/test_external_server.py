"""The sim client against external policy servers (POLICY_SERVER): a real vla-eval model server
(vla-eval's own `run_server`) on the real ManiSkill3 benchmark, our own server in openpi mode, and
every kind of bad server the issue names, each an errored episode or one clear error up front."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from websockets.sync.server import ServerConnection, serve

from harness.config.policymap import parse_policy_map
from harness.config.settings import Settings
from harness.episode.external import ExternalPolicyClient
from harness.wire.errors import WireError
from tests.interop.conftest import OPENPI_MAP, VLA_MAP, free_port, run_client

CAMERA_MAP = VLA_MAP + "cameras: {base_camera: [images, base_camera]}\nimage_size: 64\n"


@pytest.mark.sim
def test_real_maniskill_episode_against_a_real_vla_eval_server(
    tmp_path: Path, vla_server: Callable[..., str]
) -> None:
    address = vla_server("hold", needs_image=True)
    run = run_client(
        tmp_path, address, CAMERA_MAP, [0], task="PickCube", BENCHMARK="maniskill", IMAGE_SIZE="64"
    )
    assert run.rc == 0, run.err
    (record,) = run.records
    assert record["error"] is None and record["policy"] == "vla-hold"
    assert record["steps"] == 200 and record["success"] is False  # hold: stays put for the whole limit
    log = next(tmp_path.glob("vla-hold-*.log")).read_text()
    assert "EPISODE_START" in log and "EPISODE_END" in log


def test_our_server_in_openpi_mode_as_the_policy_server(tmp_path: Path, openpi_mode_server) -> None:
    _, _, info = openpi_mode_server
    mapping = OPENPI_MAP.replace("observation/state", "proprio").replace("prompt", "instruction")
    run = run_client(tmp_path, f"127.0.0.1:{info['port']}", mapping, [0, 1, 2], FASTBENCH_STEPS="5")
    assert run.rc == 0, run.err
    assert [(r["seed"], r["error"], r["policy"], r["steps"]) for r in run.records] == [
        (s, None, "openpi-hold", 5) for s in (0, 1, 2)
    ]


def test_unreachable_server_is_one_clear_error_after_bounded_retries(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    run = run_client(tmp_path, address, VLA_MAP, [0], POLICY_SERVER_RETRIES="3")
    assert run.rc == 2 and not run.records
    assert f"policy server ws://{address}: cannot connect after 3 attempt(s)" in run.err
    assert time.monotonic() - started < 30


def test_openpi_map_against_a_vla_eval_server_is_refused_up_front(
    tmp_path: Path, vla_server: Callable[..., str]
) -> None:
    address = vla_server()
    run = run_client(tmp_path, address, OPENPI_MAP, [0], POLICY_SERVER_TIMEOUT="2")
    assert run.rc == 2 and not run.records
    want = f"openpi server ws://{address}: no metadata frame within 2 s (is it an openpi server?)"
    assert want in run.err


def test_vla_eval_map_against_an_openpi_server_is_refused_up_front(tmp_path: Path) -> None:
    with fake_server(metadata_frame=__import__("msgpack").packb({"policy": "x"})) as address:
        run = run_client(tmp_path, address, VLA_MAP, [0])
    assert run.rc == 2 and not run.records
    assert f"vla-eval server ws://{address}: vla-eval frame lacks ['type', 'payload', 'seq']" in run.err


def test_a_metadata_frame_that_is_not_msgpack_is_refused_up_front(tmp_path: Path) -> None:
    with fake_server(metadata_frame=b"\xc1\xc1 not msgpack") as address:
        run = run_client(tmp_path, address, OPENPI_MAP, [0])
    assert run.rc == 2 and not run.records
    assert f"openpi server ws://{address}: openpi metadata frame is not msgpack" in run.err


def test_a_plain_tcp_server_is_not_a_websocket_server(tmp_path: Path) -> None:
    with socket_that_answers(b"HTTP/1.1 500 nope\r\n\r\n") as address:
        run = run_client(tmp_path, address, OPENPI_MAP, [0], POLICY_SERVER_RETRIES="5")
    assert run.rc == 2 and "cannot connect after 1 attempt(s)" in run.err  # no retries: it answered


def test_a_spec_mismatch_is_refused_before_the_first_episode(
    tmp_path: Path, vla_server: Callable[..., str]
) -> None:
    run = run_client(tmp_path, vla_server("declare_9"), VLA_MAP, [0, 1])
    assert run.rc == 2 and not run.records
    assert "spec mismatch: action_spec: the server declares 9 action dims, the map 10" in run.err
    needs_camera = run_client(tmp_path / "b", vla_server("hold", needs_image=True), VLA_MAP, [0])
    assert (
        needs_camera.rc == 2
        and "the server needs 'image' (rgb_hwc_uint8), the map gives none" in needs_camera.err
    )
    joints = run_client(tmp_path / "d", vla_server("hold"), VLA_MAP + "action_convention: joint_pos\n", [0])
    assert joints.rc == 2, joints.err
    assert "the map says the server emits joint_pos, the sim applies ee6d (ACTION_CONVENTION)" in joints.err
    no_camera = run_client(tmp_path / "c", vla_server("hold"), CAMERA_MAP, [0])
    assert no_camera.rc == 2 and "cameras: the map uses ['base_camera'], the sim offers []" in no_camera.err


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("wrong_shape", "action has shape [7], expected [T, 10] or [10]"),
     ("int_dtype", "action must be a float array, got int64"),
     ("raise", "answered ERROR: observation_failed: RuntimeError: the model fell over"),
     ("stall", "no ACTION for seq 3 within 2 s")],
)  # fmt: skip
def test_a_bad_action_is_an_errored_episode(
    tmp_path: Path, vla_server: Callable[..., str], mode: str, reason: str
) -> None:
    run = run_client(tmp_path, vla_server(mode), VLA_MAP, [0, 1], POLICY_SERVER_TIMEOUT="2")
    assert run.rc == 0, run.err
    assert [r["seed"] for r in run.records] == [0, 1]
    assert all(reason in r["error"] and r["success"] is False for r in run.records), run.records


def test_a_server_gone_mid_episode_errors_that_episode_then_ends_the_unit(
    tmp_path: Path, vla_server: Callable[..., str]
) -> None:
    run = run_client(tmp_path, vla_server("die_at_3"), VLA_MAP, [0, 1], FASTBENCH_STEPS="5")
    assert run.rc == 3, run.err  # the next episode found no server: the unit stops (the worker records it)
    (record,) = run.records
    assert record["seed"] == 0 and "closed the connection mid-episode" in record["error"]
    assert "is gone: policy server ws://" in run.err and "cannot connect after 2 attempt(s)" in run.err


def test_image_size_and_action_dim_mismatches_name_both_values(vla_server: Callable[..., str]) -> None:
    policy_map = parse_policy_map(yaml.safe_load(CAMERA_MAP), "camera-map")
    client = ExternalPolicyClient(
        vla_server("hold", needs_image=True), policy_map, Settings.from_env(os.environ)
    )
    spec = {"action_dim": 20, "cameras": ["base_camera"], "image_size": 128}
    with client, pytest.raises(WireError) as refused:
        client.hello(spec)
    text = str(refused.value)
    assert "image_size: the map says [64, 64], the sim renders [128, 128]" in text
    assert "action_dim: the map says 10, the robot takes 20" in text


class fake_server:
    """A WebSocket server that sends `metadata_frame` on connect, then answers nothing."""

    def __init__(self, metadata_frame: bytes) -> None:
        def handler(conn: ServerConnection) -> None:
            conn.send(metadata_frame)
            for _ in conn:  # then silence, until the client leaves
                pass

        self.server = serve(handler, "127.0.0.1", 0)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"127.0.0.1:{self.server.socket.getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.thread.join(10)


class socket_that_answers:
    """A plain TCP listener that answers every connection with `reply` (not a WebSocket server)."""

    def __init__(self, reply: bytes) -> None:
        import socket

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.reply, self.stop = reply, threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                conn.sendall(self.reply)

    def __enter__(self) -> str:
        self.thread.start()
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()
