"""Our model server speaking vla-eval's protocol (MODEL_SERVER_PROTOCOL=vlaeval), so that vla-eval's
own runner (`vla-eval run`, its orchestrator) can evaluate any policy of ours.

Why a front end of our server, not a `vla_eval.model_servers.base.ModelServer` subclass: the same
process, wrapper and `Session` as the native server (batching, per-session state, seeding, the
policy's refusals), and the model env needs no vla_eval (the frames are `harness.wire.vlaeval`'s).

The conversation (vla_eval/model_servers/serve.py): HELLO is answered with vla-eval's common fields
and `model_server: harness`; EPISODE_START starts an episode of the session, task = the start's
`task.name` (the instruction too, as vla-eval names a task by it), seed = `task.episode_idx` (LIBERO:
the init-state index), task_config = `task.task_config` or empty, so a wrapper's RNG seed
(`harness.model.seeding`) depends on what is asked, as in our pool; each OBSERVATION is answered by
one ACTION `{"actions": [action_dim] float32}` with its seq, as vla-eval's benchmarks step one action
per observation: a chunk is queried once and its actions sent one per observation (EXEC_ACTIONS k >
0: its first k), as vla-eval's chunking servers do, then the next observation queries again. A
policy's failure on an observation is an ERROR `{"error": ...}` and the connection stays (as
vla-eval's server does); a frame that cannot be decoded ends the connection after an ERROR.

Observation mapping: `images` stay `images`, `task_description` becomes `instruction`, `states`
becomes `proprio`, every other key passes through (e.g. `privileged_state` of
`harness.episode.bench.libero_vlaeval`). Images arrive PNG-encoded (vla-eval's default) and are
decoded with Pillow, refused above MAX_IMAGE_PIXELS before decoding. `GET /health` answers 200
(vla-eval's readiness probe). A non-loopback bind requires the ready file's token as
`?token=<token>` in the URL (`vla-eval run --server-url ws://host:port/?token=...`), as
vla-eval's client sends no headers.
"""

from __future__ import annotations

import hmac
import http
import io
import logging
import urllib.parse
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.sync.server import Request, Response, ServerConnection

from harness.config.settings import Settings
from harness.model.policyload import LoadedPolicy, PolicyCallFailed
from harness.model.session import Drop, Session
from harness.model.wsfront import WebSocketFrontEnd
from harness.wire import protocol, vlaeval
from harness.wire.errors import WireError

log = logging.getLogger("vlaeval_server")

MAX_IMAGE_PIXELS = 4096 * 4096  # a PNG of a few KiB can claim gigapixels: refused before decoding
RENAMED = {"task_description": "instruction", "states": "proprio"}  # vla-eval's key -> ours


def decode_image(fmt: str, data: bytes) -> np.ndarray:
    """A PNG/JPEG image of a vla-eval frame as an HWC uint8 array (WireError if it is not one)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.width * image.height > MAX_IMAGE_PIXELS:
                raise WireError(f"vla-eval {fmt} image of {image.width}x{image.height} refused: too large")
            return np.asarray(image.convert("RGB") if image.mode not in ("RGB", "L") else image, np.uint8)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise WireError(f"vla-eval {fmt} image cannot be decoded: {exc}") from None


def to_wire_obs(obs: Any) -> dict[str, Any]:
    """A vla-eval observation payload → our wire observation."""
    if not isinstance(obs, dict):
        raise WireError(f"OBSERVATION payload must be a map, got {type(obs).__name__}")
    return {RENAMED.get(key, key): value for key, value in obs.items()}


class VlaEvalSession:
    """One vla-eval client's conversation: a `Session` fed the native messages its frames stand for."""

    def __init__(self, policy: LoadedPolicy, exec_actions: int) -> None:
        self.session = Session(policy, None, None)
        self.session.handle(protocol.hello({}, ["msgpack"]))  # vla-eval's HELLO states no spec
        self.exec_actions = exec_actions
        self.step = 0
        self.pending: deque[np.ndarray] = deque()  # the rest of the last chunk, one per observation

    def answer(self, kind: str, payload: Any) -> dict[str, Any] | None:
        """The reply payload to one frame (None: no reply, as for EPISODE_END)."""
        if kind == vlaeval.HELLO:
            return vlaeval.hello_payload("harness", "vlaeval", model_server="harness", capabilities={})
        if kind == vlaeval.EPISODE_START:
            self.start(payload)
            return None
        if kind == vlaeval.OBSERVATION:
            return {"actions": self.act(to_wire_obs(payload))}
        return None  # EPISODE_END, or an ERROR the client reports: nothing to answer

    def start(self, payload: Any) -> None:
        task = payload.get("task") if isinstance(payload, dict) else None
        if not isinstance(task, dict):
            raise WireError("EPISODE_START payload must carry a `task` map (vla-eval's runner sends one)")
        seed = task.get("episode_idx", 0)
        if type(seed) is not int:
            raise WireError(f"EPISODE_START: task.episode_idx must be an integer, got {seed!r:.40}")
        name = str(task.get("name", ""))
        self.session.handle(protocol.reset(name, str(task.get("task_config", "")), name, seed))
        self.step = 0
        self.pending.clear()

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        if self.session.episode is None:
            raise WireError("OBSERVATION before EPISODE_START: start an episode first")
        if not self.pending:
            reply = self.session.handle(protocol.infer(obs, self.step))
            chunk = np.asarray(reply["actions"], dtype=np.float32)
            self.pending.extend(chunk[: self.exec_actions or len(chunk)])
        self.step += 1
        return self.pending.popleft()

    def close(self) -> None:
        self.session.close()


class VlaEvalServer(WebSocketFrontEnd):
    """Our model server to vla-eval's runner (harness.model.wsfront: listening, ready file, limits)."""

    protocol, clients = "vlaeval", "vla-eval clients"

    def __init__(
        self, policy: LoadedPolicy, ready_file: str | Path, settings: Settings, bind: str | None = None
    ) -> None:
        self.exec_actions = settings.exec_actions
        super().__init__(policy, ready_file, settings, bind)

    def admit(self, conn: ServerConnection, request: Request) -> Response | None:
        url = urllib.parse.urlsplit(request.path)
        if url.path == "/health":
            return conn.respond(http.HTTPStatus.OK, '{"status": "ok"}\n')
        if self.token:
            given = urllib.parse.parse_qs(url.query).get("token", [""])[0]
            if not hmac.compare_digest(given, self.token):
                return conn.respond(http.HTTPStatus.UNAUTHORIZED, "needs the run's token as ?token=...\n")
        return None

    def busy(self, conn: ServerConnection) -> None:
        conn.close(CloseCode.TRY_AGAIN_LATER, "server busy: MODEL_SERVER_MAX_CONNS connections open")

    def converse(self, conn: ServerConnection) -> None:
        peer = conn.remote_address
        session = VlaEvalSession(self.policy, self.exec_actions)
        try:
            for body in conn:
                if isinstance(body, str):
                    raise Drop("expected binary msgpack frames, got a text frame")
                try:
                    kind, payload, seq = vlaeval.unpack_message(body, decode_image)
                except WireError as exc:
                    raise Drop(str(exc)) from None
                try:
                    reply = session.answer(kind, payload)
                except (WireError, PolicyCallFailed) as exc:
                    self._refuse(conn, peer, seq, exc)
                    continue
                if reply is not None:
                    conn.send(vlaeval.pack_message(vlaeval.ACTION if kind == vlaeval.OBSERVATION else kind,
                                                   reply, seq))  # fmt: skip
        except ConnectionClosed:
            return
        except Drop as exc:
            log.warning("vla-eval client %s: %s", peer, exc)
            try:
                conn.send(vlaeval.pack_message(vlaeval.ERROR, {"error": f"Drop: {exc}"}, 0))
                conn.close(CloseCode.INTERNAL_ERROR, "bad frame: reason in the ERROR frame")
            except ConnectionClosed:
                pass
        finally:
            session.close()  # the batcher stops waiting for this connection's requests

    @staticmethod
    def _refuse(conn: ServerConnection, peer: Any, seq: int, exc: Exception) -> None:
        """An ERROR for one request; the connection stays, as vla-eval's server keeps it."""
        if isinstance(exc, PolicyCallFailed):  # only the policy's own failure keeps its traceback
            log.error("policy failed for vla-eval client %s: %s", peer, exc, exc_info=exc.__cause__)
        else:
            log.warning("vla-eval client %s: %s", peer, exc)
        conn.send(vlaeval.pack_message(vlaeval.ERROR, {"error": f"{type(exc).__name__}: {exc}"}, seq))
