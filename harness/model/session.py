"""One connection's conversation with the model server: the hello, episodes, and whose fault a
failure is.

A `Session` turns each decoded request into its reply; what it raises decides what the server does
and logs. `WireError` (or any other exception while a request is checked) is the client's fault:
answered, logged in one throttled line. `PolicyCallFailed` (`harness.model.policyload`) is a
policy call that failed on a well-formed request: answered, and the only failure logged with its
traceback (the policy's, when it raised). `Drop` ends the connection after its error reply. A
token-protected server (`token` set) is `locked` until a hello with the token: it answers nothing
else before that, so an anonymous peer learns nothing.

Every session of one `LoadedPolicy` shares its batcher (`harness.model.batcher`): `handle` blocks
until the batched model call that carries its request is done. A front end calls `close()` when
its connection ends. The session holds the wrapper's per-session state (`init_state`), so one
session's reset or history never touches another's.

After its hello a session's frames are bounded by the observation its hello declares
(`observation_frame_limit`: the cameras and image size of the specs), so a greeted client cannot
send frames of WIRE_MAX_FRAME unless its contract needs them.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.model.policyload import LoadedPolicy, PolicyCallFailed, SessionState
from harness.wire import protocol
from harness.wire.codecs import CODECS, Codec, JsonCodec, get_codec
from harness.wire.errors import WireError

T = TypeVar("T")

OBS_FACTOR = 4  # an observation's frame over its RGB bytes: JSON's base64 (4/3), depth or extra arrays
OBS_SLACK = 1 << 20  # and bytes for proprio, camera parameters, state, the instruction, the encoding


class Drop(Exception):
    """End this connection (after an error reply, when one could be sent)."""


@dataclass
class SessionEpisode:
    """The episode this session's client started with its last reset: what each infer of it is
    answered for (the benchmark's episode is `harness.episode.bench.Episode`, on the sim side)."""

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
        self.sim_spec: dict[str, Any] = {}  # the sim's side of the hello: its action convention, dims
        self.frame_limit: int | None = None  # after the hello: the observation bound (None: none declared)
        self.episode: SessionEpisode | None = None
        self.state: SessionState | None = None  # the wrapper's per-session state (made at the first reset)
        self.member = policy.batcher.join()

    def close(self) -> None:
        """The connection is gone: the batcher stops expecting this session's requests."""
        self.policy.batcher.leave(self.member)

    def switch_codec(self) -> None:
        """Once the hello reply went out (in the old codec), the agreed codec replaces it."""
        if self.pending_codec is not None:
            self.codec, self.pending_codec = self.pending_codec, None

    @property
    def locked(self) -> bool:
        """True until a token-protected server has seen a hello with its token."""
        return bool(self.token) and not self.greeted

    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self.locked and msg.get("type") != "hello":
            raise Drop("refused: this server needs a hello with the run's token first (see its ready file)")
        kind = protocol.check_request(msg)
        if kind == "hello":
            return self._hello(msg)
        if kind == "ping":  # {"type": "ping", "stats": true} also gets the batch statistics
            if msg.get("stats") is True:
                return {"type": "ping", "stats": self.policy.batcher.stats().as_dict()}
            return {"type": "ping"}
        if not self.greeted:
            raise WireError(f"{kind} before hello: send a hello first")
        if kind == "reset":
            return self._reset(msg)
        return self._infer(msg)

    def _hello(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self.token and not hmac.compare_digest(str(msg.get("token", "")), self.token):
            raise Drop("hello refused: this server needs the run's token (see its ready file)")
        if msg["version"] != protocol.PROTOCOL_VERSION:
            raise WireError(
                f"protocol version mismatch: client speaks {msg['version']}, "
                f"server speaks {protocol.PROTOCOL_VERSION}"
            )
        protocol.check_specs(self.policy.spec, msg["spec"])
        frame_limit = observation_frame_limit(msg["spec"], self.policy.spec)
        name = next((c for c in msg["codecs"] if isinstance(c, str) and c in CODECS), None)
        if name is None:
            raise WireError(
                f"no common codec: client offers {msg['codecs']!r:.120}, server speaks {sorted(CODECS)}"
            )
        reply = {
            "type": "hello",
            "version": protocol.PROTOCOL_VERSION,
            "codec": name,
            "spec": self.policy.spec,
        }
        if self.reply_token:
            reply["token"] = self.reply_token
        self.greeted = True
        self.sim_spec = msg["spec"]
        self.frame_limit = frame_limit
        self.pending_codec = get_codec(name)
        return reply

    def _reset(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.episode = SessionEpisode(msg["task"], msg["task_config"], msg["instruction"], msg["seed"])
        if self.state is None:
            self.state = _policy(self.policy.new_state)
        _policy(self.policy.reset, self.state)
        self.policy.batcher.start_episode(self.member)
        return {"type": "reset"}

    def _infer(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self.episode is None:
            raise WireError("infer before reset: start an episode with reset first")
        ep, step = self.episode, msg["step"]
        obs = dict(msg["obs"])
        obs.setdefault("instruction", ep.instruction)
        obs["episode"] = {
            "task": ep.task, "task_config": ep.task_config, "seed": ep.seed, "step": step,
            "action": self.sim_spec.get("action"), "action_dim": self.sim_spec.get("action_dim"),
        }  # fmt: skip
        actions = _policy(self.policy.act, obs, ep.seed, step, self.state, self.member)
        return {"type": "infer", "actions": actions}


def observation_frame_limit(client: dict[str, Any], server: dict[str, Any]) -> int | None:
    """The largest frame an observation of the hello's specs can need: OBS_FACTOR x cameras x
    height x width x 3 bytes + OBS_SLACK, the sim's cameras and image size where it declares them,
    else the policy's; None when neither declares an image size. A malformed field is a WireError
    naming it."""
    cameras = client.get("cameras", server.get("cameras"))
    size = client.get("image_size", server.get("image_size"))
    if size is None:
        return None
    if not isinstance(cameras, list | tuple):
        raise WireError(f"hello spec: cameras must be a list of camera names, got {cameras!r:.80}")
    dims = [size, size] if type(size) is int else size
    if not (
        isinstance(dims, list | tuple) and len(dims) == 2 and all(type(d) is int and d > 0 for d in dims)
    ):
        raise WireError(
            f"hello spec: image_size must be a positive integer or [height, width], got {size!r:.80}"
        )
    return OBS_FACTOR * len(cameras) * dims[0] * dims[1] * 3 + OBS_SLACK


def _policy(call: Callable[..., T], *args: Any) -> T:
    try:
        return call(*args)
    except PolicyCallFailed:
        raise
    except Exception as exc:
        raise PolicyCallFailed(f"{type(exc).__name__}: {exc}") from exc
