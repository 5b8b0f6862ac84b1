"""Our model server speaking vla-eval's protocol (MODEL_SERVER_PROTOCOL=vlaeval), talked to by
vla-eval's own client (`vla_eval.connection.Connection`, as its orchestrator uses it): the HELLO,
episodes, PNG images, one action per observation out of a chunk, errors that keep the connection,
and the readiness probe. The policy is `hold` (a 30-action chunk of the pose it is sent)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from vla_eval.connection import Connection

from harness.wire.readyfile import read_ready
from support.wirekit import model_python, start_server_process, stop_process, wait_for

TASK = {"name": "pick up the bbq sauce", "suite": "libero_object", "task_id": 3, "episode_idx": 4}


@pytest.fixture
def vlaeval_mode_server(tmp_path: Path) -> Iterator[str]:
    """Our server serving `hold` to vla-eval clients, re-querying every 2 actions: its ws:// url."""
    python = model_python()
    assert python, "envs/model is missing"
    ready, log = tmp_path / "ready.json", tmp_path / "server.log"
    env = {"MODEL_SERVER_PROTOCOL": "vlaeval", "EXEC_ACTIONS": "2"}
    proc = start_server_process(python, ready, ["--policy", "hold"], log, env)
    try:
        wait_for(lambda: ready.exists() or proc.poll() is not None, 120)
        assert proc.poll() is None, log.read_text()
        info = read_ready(ready)
        assert info["protocol"] == "vlaeval"
        yield f"ws://{info['host']}:{info['port']}"
    finally:
        stop_process(proc)


def pose(value: float) -> np.ndarray:
    return np.full(10, value, np.float32)


async def converse(url: str) -> dict[str, Any]:
    conn = Connection(url, timeout=30, max_retries=1)
    await conn.connect(benchmark="test")
    try:
        image = np.arange(64 * 64 * 3, dtype=np.uint8).reshape(64, 64, 3)  # sent PNG-encoded
        out: dict[str, Any] = {"hello": conn.server_info, "actions": []}
        with pytest.raises(RuntimeError, match="OBSERVATION before EPISODE_START"):
            await conn.act({"states": pose(0)})
        await conn.start_episode({"task": TASK})
        for value in (1, 2, 3, 4):
            obs = {"images": {"agentview": image}, "states": pose(value), "task_description": TASK["name"]}
            out["actions"].append(np.asarray((await conn.act(obs))["actions"]))
        with pytest.raises(RuntimeError, match="hold: the observation has no 'proprio'"):
            await conn.act({"images": {"agentview": image}})  # a query (2 actions taken): the policy refuses
        out["after_error"] = np.asarray((await conn.act({"states": pose(5)}))["actions"])
        await conn.end_episode({"success": False})
        return out
    finally:
        await conn.close()


def test_vla_eval_client_runs_an_episode_against_our_server(vlaeval_mode_server: str) -> None:
    out = anyio.run(converse, vlaeval_mode_server)
    assert out["hello"]["model_server"] == "harness" and out["hello"]["protocol_version"] == 1
    first = out["actions"][0]
    assert first.shape == (10,) and first.dtype == np.float32  # one action per observation
    # EXEC_ACTIONS=2: a chunk's first two actions, one per observation, then a new query
    np.testing.assert_array_equal(np.stack(out["actions"]), np.stack([pose(1), pose(1), pose(3), pose(3)]))
    np.testing.assert_array_equal(out["after_error"], pose(5))  # the connection outlived the ERROR
    health = vlaeval_mode_server.replace("ws://", "http://") + "/health"
    with urllib.request.urlopen(health, timeout=10) as reply:
        assert reply.status == 200
