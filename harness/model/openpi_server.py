"""Our model server speaking openpi's protocol (MODEL_SERVER_PROTOCOL=openpi), for openpi client loops.

Same process, same wrapper, same `Session` as the native server, so batching, per-session state and
seeding are the same. The openpi conversation (openpi's `serving/websocket_policy_server.py`): on
connect the server sends its metadata map; each binary frame is then an observation map answered
by an action map; on an error the server sends the reason as a text frame and closes with 1011
(`WebsocketClientPolicy` raises it as `RuntimeError("Error in inference server: ...")`).
`GET /healthz` answers 200. openpi has no episode message, so: an observation
`{"__ctrl__": "episode_start", "__task__": ..., "__episode_id__": <seed>}` (the extension some
openpi forks send; `__task_config__` too, ours) starts an episode seeded as a native one
(answered `{"__ack__": "episode_start"}`); otherwise a connection's first observation starts one
with seed 0. The step counter of the seeding runs per
episode. Observations use our key names (`images.<camera>`, `proprio`, `instruction`, or openpi's
`prompt`) unless MODEL_SERVER_MAP names a mapping YAML (harness.config.policymap) saying which
openpi keys carry them; the reply is `{"actions": [chunk_len, action_dim] float32}` (or the map's
`action` key). A non-loopback bind requires `Authorization: Api-Key <token>` (the ready file's token).
"""

from __future__ import annotations

import hmac
import http
import logging
from pathlib import Path
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.sync.server import Request, Response, ServerConnection

from harness.config.policymap import PolicyMap, get_path, put_path
from harness.config.settings import Settings
from harness.model.policyload import LoadedPolicy, PolicyCallFailed, PolicyRefused
from harness.model.session import Drop, Session
from harness.model.wsfront import WebSocketFrontEnd
from harness.wire import openpi, protocol
from harness.wire.errors import WireError

log = logging.getLogger("openpi_server")


def metadata(policy: LoadedPolicy) -> dict[str, Any]:
    """The first frame of every connection: what an openpi client needs to know about the policy."""
    return {**policy.spec, "server": "harness", "protocol": "openpi"}


def check_map(policy_map: PolicyMap, policy: LoadedPolicy) -> None:
    dim = policy.spec.get("action_dim")  # None: the policy acts in the sim's (hold)
    if policy_map.protocol != "openpi" or (dim is not None and policy_map.action_dim != dim):
        raise PolicyRefused(
            f"MODEL_SERVER_MAP={policy_map.source}: needs protocol openpi and action_dim "
            f"{dim} (the policy's), "
            f"got {policy_map.protocol} and {policy_map.action_dim}"
        )


def to_wire_obs(obs: dict[str, Any], policy_map: PolicyMap | None) -> dict[str, Any]:
    """An openpi observation map → our wire observation (images, proprio, instruction)."""
    if policy_map is None:
        out = {k: v for k, v in obs.items() if k != "prompt"}
        if isinstance(obs.get("prompt"), str):
            out.setdefault("instruction", obs["prompt"])
        return out
    out: dict[str, Any] = {"images": {}}
    try:
        for cam, key in policy_map.cameras.items():
            out["images"][cam] = get_path(obs, key, "the observation")
        if policy_map.proprio is not None:
            out["proprio"] = get_path(obs, policy_map.proprio, "the observation")
        if policy_map.instruction is not None:
            out["instruction"] = str(get_path(obs, policy_map.instruction, "the observation"))
    except KeyError as exc:
        raise WireError(f"{exc.args[0]} (MODEL_SERVER_MAP={policy_map.source})") from None
    return out


class OpenpiSession:
    """One openpi client's conversation: a `Session` fed the native messages its openpi frames stand
    for (the client side of an openpi connection is `harness.wire.openpi.OpenpiConnection`)."""

    def __init__(self, policy: LoadedPolicy, policy_map: PolicyMap | None) -> None:
        self.session = Session(policy, None, None)
        self.session.handle(protocol.hello({}, ["msgpack"]))  # openpi clients state no spec
        self.policy_map = policy_map
        self.step = 0

    def answer(self, body: bytes) -> dict[str, Any]:
        obs = openpi.unpackb(body, "observation frame")
        ctrl = obs.get("__ctrl__")
        if ctrl == "episode_start":
            task, task_config = str(obs.get("__task__", "")), str(obs.get("__task_config__", ""))
            self._start(task, task_config, obs.get("__episode_id__", 0), "")
            return {"__ack__": "episode_start"}
        if ctrl is not None:
            return {"__ack__": "episode_end" if ctrl == "episode_end" else "ignored"}
        wire_obs = to_wire_obs(obs, self.policy_map)
        if self.session.episode is None:
            self._start("", "", 0, str(wire_obs.get("instruction", "")))
        reply = self.session.handle(protocol.infer(wire_obs, self.step))
        self.step += 1
        key = ("actions",) if self.policy_map is None else self.policy_map.action
        out: dict[str, Any] = {}
        put_path(out, key, np.asarray(reply["actions"], dtype=np.float32))
        return out

    def close(self) -> None:
        """The connection ended: its session leaves the batcher."""
        self.session.close()

    def _start(self, task: str, task_config: str, seed: Any, instruction: str) -> None:
        if type(seed) is not int:
            raise WireError(f"episode_start: __episode_id__ must be an integer seed, got {seed!r:.40}")
        self.session.handle(protocol.reset(task, task_config, instruction, seed))
        self.step = 0


class OpenpiServer(WebSocketFrontEnd):
    """Our model server to openpi clients (harness.model.wsfront: listening, ready file, limits)."""

    protocol, clients = "openpi", "openpi clients"

    def __init__(
        self, policy: LoadedPolicy, ready_file: str | Path, settings: Settings, bind: str | None = None,
        policy_map: PolicyMap | None = None,
    ) -> None:  # fmt: skip
        if policy_map is not None:
            check_map(policy_map, policy)
        self.policy_map = policy_map
        super().__init__(policy, ready_file, settings, bind)

    def admit(self, conn: ServerConnection, request: Request) -> Response | None:
        if request.path == "/healthz":
            return conn.respond(http.HTTPStatus.OK, "OK\n")
        if self.token:
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given, f"Api-Key {self.token}"):
                return conn.respond(http.HTTPStatus.UNAUTHORIZED, "needs the run's token as Api-Key\n")
        return None

    def busy(self, conn: ServerConnection) -> None:
        conn.send("server busy: MODEL_SERVER_MAX_CONNS connections open")
        conn.close(CloseCode.TRY_AGAIN_LATER)

    def converse(self, conn: ServerConnection) -> None:
        peer = conn.remote_address
        session = OpenpiSession(self.policy, self.policy_map)
        try:
            conn.send(openpi.packb(metadata(self.policy)))
            for body in conn:
                if isinstance(body, str):
                    raise WireError("expected binary msgpack frames, got a text frame")
                conn.send(openpi.packb(session.answer(body)))
        except ConnectionClosed:
            return
        except (WireError, Drop, PolicyCallFailed) as exc:
            if isinstance(exc, PolicyCallFailed):  # only the policy's own failure keeps its traceback
                log.error("policy failed for openpi client %s: %s", peer, exc, exc_info=exc.__cause__)
            else:
                log.warning("openpi client %s: %s", peer, exc)
            try:
                conn.send(f"{type(exc).__name__}: {exc}")
                conn.close(CloseCode.INTERNAL_ERROR, "Internal server error. Reason in previous frame.")
            except ConnectionClosed:
                pass
        finally:
            session.close()  # the batcher stops waiting for this connection's requests
