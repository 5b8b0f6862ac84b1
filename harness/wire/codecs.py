"""Message bodies: msgpack with raw array bytes, and JSON with numpy (the reference format).

msgpack arrays are `{"__ndarray__": <bin>, "dtype": "<numpy dtype>", "shape": [...]}`; JSON arrays
carry the same keys with the bytes in base64, which is what the reference pipeline sends.
Decoding refuses anything that is not a map of plain values and numeric arrays, and counts a body's
items before it builds any (`harness.wire.bounds`), so no body decodes into much more than itself.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Callable
from typing import Any, Protocol

import msgpack
import numpy as np

from harness.wire.arrays import from_buffer, raw_bytes, to_wire
from harness.wire.bounds import NotMsgpack, json_items_bound, msgpack_items
from harness.wire.errors import WireError

ND_KEY = "__ndarray__"
_ND_KEYS = frozenset((ND_KEY, "dtype", "shape"))


class Codec(Protocol):
    name: str

    def encode(self, msg: dict[str, Any]) -> bytes: ...

    def decode(self, body: bytes | bytearray) -> dict[str, Any]: ...


def plain_scalar(obj: Any) -> Any:
    """A numpy scalar as the plain number msgpack/JSON can carry; anything else is refused."""
    if isinstance(obj, np.generic) and obj.dtype.kind in "biuf":
        return obj.item()
    raise WireError(f"cannot encode a {type(obj).__name__} on the wire")


def _array_fields(obj: dict[str, Any]) -> tuple[Any, Any, Any]:
    if obj.keys() != _ND_KEYS:
        raise WireError(f"array object must have exactly the keys {sorted(_ND_KEYS)}, got {sorted(obj)}")
    return obj[ND_KEY], obj["dtype"], obj["shape"]


def _check_message(msg: Any) -> dict[str, Any]:
    if not isinstance(msg, dict):
        raise WireError(f"a message must be a map, got {type(msg).__name__}")
    return msg


class MsgpackCodec:
    """msgpack with arrays as raw `bin` bytes: no base64, no text parsing of pixels."""

    name = "msgpack"

    def encode(self, msg: dict[str, Any]) -> bytes:
        return msgpack.packb(msg, default=_msgpack_default, use_bin_type=True)

    def decode(self, body: bytes | bytearray) -> dict[str, Any]:
        try:
            msgpack_items(body)
            msg = msgpack.unpackb(body, raw=False, object_hook=_msgpack_hook, strict_map_key=True)
        except NotMsgpack as exc:
            raise WireError(f"invalid msgpack body: {exc}") from None
        except WireError:
            raise
        except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
            raise WireError(f"invalid msgpack body: {exc}") from None
        return _check_message(msg)


def _msgpack_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        arr = to_wire(obj)
        return {ND_KEY: raw_bytes(arr), "dtype": arr.dtype.name, "shape": list(arr.shape)}
    return plain_scalar(obj)


def _msgpack_hook(obj: dict[str, Any]) -> Any:
    if ND_KEY not in obj:
        return obj
    data, dtype, shape = _array_fields(obj)
    if not isinstance(data, bytes):
        raise WireError("array data must be msgpack bin bytes")
    return from_buffer(data, dtype, shape)


class JsonCodec:
    """Reference-compatible JSON: arrays as base64 strings."""

    name = "json"

    def encode(self, msg: dict[str, Any]) -> bytes:
        return json.dumps(msg, default=_json_default, separators=(",", ":"), allow_nan=True).encode()

    def decode(self, body: bytes | bytearray) -> dict[str, Any]:
        json_items_bound(body)
        try:
            return _check_message(json.loads(body, object_hook=_json_hook))
        except WireError:
            raise
        except (ValueError, RecursionError) as exc:
            raise WireError(f"invalid JSON body: {exc}") from None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        arr = to_wire(obj)
        data = binascii.b2a_base64(raw_bytes(arr), newline=False).decode("ascii")
        return {ND_KEY: data, "dtype": arr.dtype.name, "shape": list(arr.shape)}
    return plain_scalar(obj)


def _json_hook(obj: dict[str, Any]) -> Any:
    if ND_KEY not in obj:
        return obj
    data, dtype, shape = _array_fields(obj)
    if not isinstance(data, str):
        raise WireError("array data must be a base64 string")
    try:
        raw = binascii.a2b_base64(data, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise WireError(f"array data is not valid base64: {exc}") from None
    return from_buffer(raw, dtype, shape)


CODECS: dict[str, Callable[[], Codec]] = {"msgpack": MsgpackCodec, "json": JsonCodec}


def get_codec(name: str) -> Codec:
    """The codec called `name`; a clear error lists the known ones."""
    try:
        return CODECS[name]()
    except KeyError:
        raise WireError(f"unknown codec {name!r}: expected one of {sorted(CODECS)}") from None
