"""One connection's conversation with the model server: the hello, episodes, and whose fault a
failure is.

A `Session` turns each decoded request into its reply; what it raises decides what the server does
and logs. `WireError` (or any other exception while a request is checked) is the client's fault:
answered, logged in one throttled line. `PolicyFailed` wraps an exception the policy raised on a
well-formed request: answered, and the only failure logged with its traceback. `Drop` ends the
connection after its error reply. A token-protected server (`token` set) is `locked` until a hello
with the token: it answers nothing else before that, so an anonymous peer learns nothing.

Every session of one `LoadedPolicy` shares its batcher (`harness.model.batcher`): `handle` blocks
until the batched model call that carries its request is done. A front end calls `close()` when
its connection ends. The session holds the wrapper's per-session state (`init_state`), so one
session's reset or history never touches another's.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.model.policyload import LoadedPolicy, SessionState
from harness.wire import protocol
from harness.wire.codecs import CODECS, Codec, JsonCodec, get_codec
from harness.wire.errors import WireError

T = TypeVar("T")


class Drop(Exception):
    """End this connection (after an error reply, when one could be sent)."""


class PolicyFailed(Exception):
    """The policy raised on a well-formed request; the policy's exception is the `__cause__`."""


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
        self.state: SessionState | None = None  # the wrapper's per-session state (made at the first reset)
        self.member = policy.batcher.join()

    def close(self) -> None:
        """The connection is gone: the batcher stops expecting this session's requests."""
        self.policy.batcher.leave(self.member)

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
        codec = next((c for c in msg["codecs"] if isinstance(c, str) and c in CODECS), None)
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
        obs["episode"] = {"task": ep.task, "task_config": ep.task_config, "seed": ep.seed, "step": step}
        actions = _policy(self.policy.act, obs, ep.seed, step, self.state, self.member)
        return {"type": "infer", "actions": actions}


def _policy(call: Callable[..., T], *args: Any) -> T:
    try:
        return call(*args)
    except Exception as exc:
        raise PolicyFailed(f"{type(exc).__name__}: {exc}") from exc
