"""Message bodies: JSON with numpy (the reference format) and msgpack with raw array bytes.

JSON arrays are `{"__ndarray__": <base64>, "dtype": "<numpy dtype>", "shape": [...]}`, which is what
the reference pipeline sends. The encoder splices base64 bytes into the JSON text instead of routing
megabytes of base64 through `json.dumps` as a str, which is where the plain way spends its time.
msgpack arrays use the same three keys with the raw bytes as a msgpack `bin`.
Decoding refuses anything that is not a JSON/msgpack map of plain values and numeric arrays.
"""

from __future__ import annotations

import binascii
import json
import re
import secrets
from collections.abc import Callable
from typing import Any, Protocol

import msgpack
import numpy as np

from harness.wire.arrays import from_buffer, raw_bytes, to_wire
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


class JsonCodec:
    """Reference-compatible JSON; arrays as base64 spliced in as bytes."""

    name = "json"

    def __init__(self) -> None:
        # A per-process random marker that no real string can collide with by accident.
        self._marker = "nd" + secrets.token_hex(8)
        self._pattern = re.compile(b'"' + ND_KEY.encode() + b'":"' + self._marker.encode() + b':([0-9]+)"')

    def encode(self, msg: dict[str, Any]) -> bytes:
        blobs: list[bytes] = []

        def default(obj: Any) -> Any:
            if isinstance(obj, np.ndarray):
                arr = to_wire(obj)
                blobs.append(binascii.b2a_base64(raw_bytes(arr), newline=False))
                marker = f"{self._marker}:{len(blobs) - 1}"
                return {ND_KEY: marker, "dtype": arr.dtype.name, "shape": list(arr.shape)}
            return plain_scalar(obj)

        text = json.dumps(msg, default=default, separators=(",", ":"), allow_nan=True).encode()
        if not blobs:
            return text
        prefix = b'"' + ND_KEY.encode() + b'":"'
        return self._pattern.sub(lambda m: prefix + blobs[int(m.group(1))] + b'"', text)

    def decode(self, body: bytes | bytearray) -> dict[str, Any]:
        skeleton, blobs = self._cut_blobs(body)
        marker = self._marker + ":"

        def hook(obj: dict[str, Any]) -> Any:
            if ND_KEY not in obj:
                return obj
            data, dtype, shape = _array_fields(obj)
            if isinstance(data, str) and data.startswith(marker):
                data = blobs[int(data[len(marker) :])]
            elif not isinstance(data, str):
                raise WireError("array data must be a base64 string")
            try:
                raw = binascii.a2b_base64(data, strict_mode=True)
            except (binascii.Error, ValueError) as exc:
                raise WireError(f"array data is not valid base64: {exc}") from None
            return from_buffer(raw, dtype, shape)

        try:
            return _check_message(json.loads(skeleton, object_hook=hook))
        except WireError:
            raise
        except (ValueError, RecursionError) as exc:
            raise WireError(f"invalid JSON body: {exc}") from None

    def _cut_blobs(self, body: bytes | bytearray) -> tuple[bytes, list[memoryview]]:
        """Lift each `"__ndarray__": "<base64>"` payload out before json.loads has to scan it.

        The payload is replaced by this process's private marker + index, which no sender can
        forge. Only an unescaped key matches (an escaped quote inside a string is preceded by a
        backslash), and base64 holds no quote, so the payload ends at the next quote.
        """
        view, parts, blobs = memoryview(body), [], []
        pos = search = 0  # copied up to `pos`; looking for keys from `search`
        size = len(body)
        while (start := body.find(_ND_QUOTED, search)) >= 0:
            search = start + len(_ND_QUOTED)
            k = _skip_ws(body, start + len(_ND_QUOTED), size)
            k = _skip_ws(body, k + 1, size) if k < size and body[k] == _COLON else size
            end = body.find(b'"', k + 1) if k < size and body[k] == _QUOTE else -1
            if end < 0 or (start > 0 and body[start - 1] == _BACKSLASH):
                continue
            parts += [view[pos : k + 1], f"{self._marker}:{len(blobs)}".encode()]
            blobs.append(view[k + 1 : end])
            pos = search = end
        if not blobs:
            return bytes(body), blobs
        parts.append(view[pos:])
        return b"".join(parts), blobs


_ND_QUOTED = b'"' + ND_KEY.encode() + b'"'
_COLON, _QUOTE, _BACKSLASH = ord(":"), ord('"'), ord("\\")
_WS = frozenset(b" \t\r\n")


def _skip_ws(body: bytes | bytearray, k: int, size: int) -> int:
    while k < size and body[k] in _WS:
        k += 1
    return k


class MsgpackCodec:
    """msgpack with arrays as raw `bin` bytes: no base64, no text parsing of pixels."""

    name = "msgpack"

    def encode(self, msg: dict[str, Any]) -> bytes:
        return msgpack.packb(msg, default=_msgpack_default, use_bin_type=True)

    def decode(self, body: bytes | bytearray) -> dict[str, Any]:
        try:
            msg = msgpack.unpackb(
                body, raw=False, object_hook=_msgpack_hook, ext_hook=_refuse_ext, strict_map_key=True
            )
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


def _refuse_ext(code: int, data: bytes) -> Any:
    raise WireError(f"msgpack extension type {code} refused")


CODECS: dict[str, Callable[[], Codec]] = {"msgpack": MsgpackCodec, "json": JsonCodec}


def get_codec(name: str) -> Codec:
    """The codec called `name`; a clear error lists the known ones."""
    try:
        return CODECS[name]()
    except KeyError:
        raise WireError(f"unknown codec {name!r}: expected one of {sorted(CODECS)}") from None
