"""vla-eval's wire format: msgpack frames `{type, payload, seq, timestamp}` (vla_eval.protocol).

Compatible with `vla_eval.protocol.messages.pack_message/unpack_message` without importing vla_eval:
arrays travel as `{"__ndarray__": True, "data": <bytes>, "dtype": dtype.str, "shape": [...]}`; an
image the peer sends in vla-eval's raw `__image__` form is rebuilt too; its PNG/JPEG forms (which
vla-eval's own runner sends: PNG by default) only by a caller that passes a `decode_image` (our
vla-eval-protocol server, `harness.model.vlaeval_server`), as decoding needs an image library. The
conversation: HELLO ⇄ HELLO (versions, observation params, action/observation specs), then per
episode EPISODE_START, OBSERVATION → ACTION (same seq) or ERROR, EPISODE_END.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np

from harness.wire import wsconn
from harness.wire.arrays import from_buffer, to_wire
from harness.wire.errors import RemoteError, WireError
from harness.wire.peermsgpack import unpack_map

PROTOCOL_VERSION = 1
HELLO, OBSERVATION, ACTION = "hello", "observation", "action"
EPISODE_START, EPISODE_END, ERROR = "episode_start", "episode_end", "error"
TYPES = (HELLO, OBSERVATION, ACTION, EPISODE_START, EPISODE_END, ERROR)


def _pack_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        arr = to_wire(obj)
        return {"__ndarray__": True, "data": arr.tobytes(), "dtype": arr.dtype.str, "shape": list(arr.shape)}
    if isinstance(obj, np.generic) and obj.dtype.kind in "biuf":
        return obj.item()
    raise WireError(f"cannot encode a {type(obj).__name__} in a vla-eval frame")


ImageDecoder = Callable[[str, bytes], np.ndarray]  # (format, encoded bytes) -> HWC uint8 image


def _unpack_hook(obj: dict[str, Any], decode_image: ImageDecoder | None = None) -> Any:
    if "__ndarray__" in obj:
        data = obj.get("data")
        if not isinstance(data, bytes):
            raise WireError("vla-eval array: `data` must be msgpack bin bytes")
        return from_buffer(data, obj.get("dtype"), obj.get("shape"))
    if "__image__" in obj:
        if obj.get("format") in ("png", "jpeg") and decode_image is not None:
            data = obj.get("data")
            if not isinstance(data, bytes):
                raise WireError("vla-eval image: `data` must be msgpack bin bytes")
            return decode_image(obj["format"], data)
        if obj.get("format") != "raw":
            raise WireError(f"vla-eval image in format {obj.get('format')!r} refused: only raw images")
        data = obj.get("data")
        if not isinstance(data, bytes):
            raise WireError("vla-eval image: `data` must be msgpack bin bytes")
        return from_buffer(data, obj.get("dtype"), obj.get("shape"))
    return obj


def pack_message(kind: str, payload: dict[str, Any], seq: int) -> bytes:
    """One vla-eval frame body."""
    raw = {"type": kind, "payload": payload, "seq": int(seq), "timestamp": time.time()}
    return msgpack.packb(raw, default=_pack_default, use_bin_type=True)


def unpack_message(
    body: bytes | bytearray | memoryview, decode_image: ImageDecoder | None = None
) -> tuple[str, Any, int]:
    """(type, payload, seq) of one vla-eval frame, after checking its fields; PNG/JPEG images are
    refused unless `decode_image` is given."""
    raw = unpack_map(body, "vla-eval frame", functools.partial(_unpack_hook, decode_image=decode_image))
    missing = [k for k in ("type", "payload", "seq") if k not in raw]
    if missing:
        raise WireError(f"vla-eval frame lacks {missing}: got keys {sorted(map(str, raw))[:8]}")
    if raw["type"] not in TYPES:
        raise WireError(f"vla-eval frame of unknown type {raw['type']!r}: expected one of {list(TYPES)}")
    if type(raw["seq"]) is not int:
        raise WireError(f"vla-eval frame: seq must be an integer, got {raw['seq']!r:.40}")
    return raw["type"], raw["payload"], raw["seq"]


def hello_payload(client: str, version: str, **extra: Any) -> dict[str, Any]:
    """Our HELLO: vla-eval's common fields (`harness_version`, `protocol_version`) + ours."""
    return {"harness_version": f"{client} {version}", "protocol_version": PROTOCOL_VERSION, **extra}


class VlaEvalConnection:
    """The client side of one vla-eval model-server connection (as `vla_eval.connection.Connection`,
    blocking): HELLO on connect, then EPISODE_START, OBSERVATION → ACTION, EPISODE_END."""

    def __init__(
        self, address: str, hello: dict[str, Any], *, attempts: int, timeout_s: float, max_size: int
    ) -> None:
        self.url = wsconn.ws_url(address)
        self.timeout_s = timeout_s
        self._seq = 0
        self._ws = wsconn.dial(
            address, attempts=attempts, open_timeout_s=min(timeout_s, 30.0), max_size=max_size
        )
        try:
            seq = self._send(HELLO, hello)
            kind, payload, _ = unpack_message(wsconn.recv(self._ws, timeout_s, "HELLO reply"))
            if kind != HELLO or not isinstance(payload, dict):
                raise WireError(f"expected a HELLO reply to seq {seq}, got a {kind!r} frame")
        except WireError as exc:
            self.close()
            raise WireError(f"vla-eval server {self.url}: {exc} (is it a vla-eval model server?)") from None
        self.server_info: dict[str, Any] = payload

    def _send(self, kind: str, payload: dict[str, Any]) -> int:
        self._seq += 1
        wsconn.send(self._ws, pack_message(kind, payload, self._seq), f"a {kind.upper()} frame")
        return self._seq

    def start_episode(self, payload: dict[str, Any]) -> None:
        self._send(EPISODE_START, payload)

    def end_episode(self, payload: dict[str, Any]) -> None:
        self._send(EPISODE_END, payload)

    def act(self, obs: dict[str, Any]) -> dict[str, Any]:
        """OBSERVATION → its ACTION payload; an ERROR frame (for it, or for the episode start)
        raises RemoteError with the server's text."""
        seq = self._send(OBSERVATION, obs)
        while True:
            kind, payload, got = unpack_message(
                wsconn.recv(self._ws, self.timeout_s, f"ACTION for seq {seq}")
            )
            if kind == ERROR:
                text = payload.get("error", payload) if isinstance(payload, dict) else payload
                raise RemoteError(f"vla-eval server {self.url} answered ERROR: {text!s:.600}")
            if kind == ACTION and got == seq:
                if not isinstance(payload, dict):
                    raise WireError(f"ACTION payload must be a map, got {type(payload).__name__}")
                return payload
            # an ACTION for another seq (a late reply of a timed-out request): not ours, skip it

    def close(self) -> None:
        self._ws.close()
