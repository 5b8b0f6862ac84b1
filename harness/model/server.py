"""The persistent model server: loads a policy once and serves many sim clients at once.

One thread per connection, each with its own episode state, so a reset on one connection never
touches another; model calls go through `LoadedPolicy`'s lock and are seeded from (episode seed,
step), so answers do not depend on how requests from different clients interleave. A bad request
gets an `error` reply and the connection lives on; a broken stream (oversize frame, mid-frame
disconnect or stall, wrong token) drops that one connection. The server itself only stops on
SIGTERM/SIGINT or `shutdown()`.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import knobs
from harness.model.policyload import LoadedPolicy
from harness.wire import protocol
from harness.wire.codecs import CODECS, Codec, JsonCodec, get_codec
from harness.wire.errors import PeerClosed, WireError
from harness.wire.frames import recv_frame, send_frame
from harness.wire.readyfile import advertised_host, read_ready, remove_ready, run_token, write_ready

log = logging.getLogger("model_server")

IDLE_TIMEOUT_S = 3600.0  # a sim client may spend a long time between requests (slow sim steps)
FRAME_TIMEOUT_S = 60.0  # but once a frame has started, the rest must follow


class _Drop(Exception):
    """End this connection (after an error reply, when one could be sent)."""


@dataclass
class Episode:
    task: str
    task_config: str
    instruction: str
    seed: int


class Session:
    """One connection's state: agreed codec, authentication, current episode."""

    def __init__(self, policy: LoadedPolicy, token: str | None, reply_token: str | None) -> None:
        self.policy = policy
        self.token = token
        self.reply_token = reply_token
        self.codec: Codec = JsonCodec()
        self.pending_codec: Codec | None = None  # switched to after the hello reply went out in JSON
        self.greeted = False
        self.episode: Episode | None = None

    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        kind = protocol.check_request(msg)
        if kind == "hello":
            return self._hello(msg)
        if kind == "ping":
            return {"type": "ping"}
        if not self.greeted:
            raise WireError(f"{kind} before hello: send a hello first")
        if kind == "reset":
            return self._reset(msg)
        return self._infer(msg)

    def _hello(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self.token and not hmac.compare_digest(str(msg.get("token", "")), self.token):
            raise _Drop("hello refused: this server needs the run's token (see its ready file)")
        if msg["version"] != protocol.PROTOCOL_VERSION:
            raise WireError(
                f"protocol version mismatch: client speaks {msg['version']}, "
                f"server speaks {protocol.PROTOCOL_VERSION}"
            )
        protocol.check_specs(self.policy.spec, msg["spec"])
        codec = next((c for c in msg["codecs"] if c in CODECS), None)
        if codec is None:
            raise WireError(f"no common codec: client offers {msg['codecs']}, server speaks {sorted(CODECS)}")
        reply = {
            "type": "hello",
            "version": protocol.PROTOCOL_VERSION,
            "codec": codec,
            "spec": self.policy.spec,
        }
        if self.reply_token:
            reply["token"] = self.reply_token
        self.greeted = True
        self.pending_codec = get_codec(codec)
        return reply

    def _reset(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.episode = Episode(msg["task"], msg["task_config"], msg["instruction"], msg["seed"])
        self.policy.reset()
        return {"type": "reset"}

    def _infer(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self.episode is None:
            raise WireError("infer before reset: start an episode with reset first")
        ep, step = self.episode, msg["step"]
        obs = dict(msg["obs"])
        obs.setdefault("instruction", ep.instruction)
        obs["episode"] = {"task": ep.task, "task_config": ep.task_config, "seed": ep.seed, "step": step}
        return {"type": "infer", "actions": self.policy.act(obs, ep.seed, step)}


def serve_connection(
    conn: socket.socket, policy: LoadedPolicy, token: str | None = None, reply_token: str | None = None
) -> None:
    """Answer requests on one connection until the peer leaves or the stream breaks."""
    conn.settimeout(IDLE_TIMEOUT_S)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    session = Session(policy, token, reply_token)
    limit = knobs.get_int("WIRE_MAX_FRAME")
    try:
        while True:
            try:
                body = recv_frame(conn, limit, body_timeout_s=FRAME_TIMEOUT_S)
            except PeerClosed:
                return
            except WireError as exc:  # oversize or stalled frame: the stream cannot be trusted any more
                _try_send(conn, session.codec, protocol.error(str(exc)))
                return
            codec = session.codec
            try:
                reply = session.handle(codec.decode(body))
            except _Drop as exc:
                _try_send(conn, codec, protocol.error(str(exc)))
                return
            except WireError as exc:  # a bad request: answer it, keep serving
                reply = protocol.error(str(exc))
            except Exception as exc:  # a policy failure on this request: same, and log the traceback
                log.exception("request failed")
                reply = protocol.error(f"{type(exc).__name__}: {exc}")
            send_frame(conn, codec.encode(reply), limit)
            if session.pending_codec is not None:
                session.codec, session.pending_codec = session.pending_codec, None
    except (WireError, OSError) as exc:
        log.info("connection dropped: %s", exc)
    finally:
        conn.close()


def _try_send(conn: socket.socket, codec: Codec, msg: dict[str, Any]) -> None:
    with contextlib.suppress(WireError, OSError):
        send_frame(conn, codec.encode(msg))


class ModelServer:
    """Listens on (bind, port 0), publishes a ready file, one thread per client."""

    def __init__(self, policy: LoadedPolicy, ready_file: str | Path, bind: str | None = None) -> None:
        self.policy = policy
        self.ready_file = Path(ready_file)
        self.bind = knobs.get("MODEL_SERVER_BIND") if bind is None else bind
        self.token = run_token(self.bind)
        self._stop = threading.Event()
        self._listener = socket.create_server((self.bind, 0), backlog=64)
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]

    def publish(self) -> None:
        info: dict[str, Any] = {
            "host": advertised_host(self.bind),
            "port": self.port,
            "pid": os.getpid(),
            "policy": self.policy.name,
            "ckpt": self.policy.ckpt,
        }
        if self.token:
            info["token"] = self.token
        write_ready(self.ready_file, info)

    def serve_forever(self) -> None:
        """Accept until shutdown(); the ready file goes away on the way out."""
        self.publish()
        log.info("serving %s on %s:%d", self.policy.name, self.bind, self.port)
        try:
            while not self._stop.is_set():
                try:
                    conn, peer = self._listener.accept()
                except TimeoutError:
                    continue
                log.info("client %s connected", peer)
                threading.Thread(
                    target=serve_connection, args=(conn, self.policy, self.token), daemon=True
                ).start()
        finally:
            self._listener.close()
            remove_ready(self.ready_file, os.getpid())

    def shutdown(self) -> None:
        self._stop.set()


def connect_out(
    policy: LoadedPolicy, target: str | Path, timeout_s: float, stop: threading.Event | None = None
) -> None:
    """Sim-as-server: dial the sim side and serve it.

    `target` is HOST:PORT (serve one connection), or a sim ready file: then serve each sim client
    that publishes it, one after another, until `stop` is set (the worker starts one per unit).
    """
    stop = stop or threading.Event()
    if isinstance(target, str) and ":" in target and not Path(target).exists():
        host, _, port = target.rpartition(":")
        serve_connection(_dial(host, int(port), timeout_s, stop), policy)
        return
    served: set[tuple[str, int, int]] = set()
    while not stop.is_set():
        try:
            info = read_ready(target)
        except WireError:
            time.sleep(0.1)
            continue
        key = (info["host"], info["port"], info.get("pid", 0))
        if key in served:
            time.sleep(0.1)
            continue
        try:
            conn = socket.create_connection((info["host"], info["port"]), timeout=5.0)
        except OSError:
            time.sleep(0.1)
            continue
        served.add(key)
        serve_connection(conn, policy, reply_token=info.get("token"))


def _dial(host: str, port: int, timeout_s: float, stop: threading.Event) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((host, port), timeout=5.0)
        except OSError as exc:
            if stop.is_set() or time.monotonic() > deadline:
                raise WireError(f"cannot reach the sim side at {host}:{port}: {exc}") from None
            time.sleep(0.2)
