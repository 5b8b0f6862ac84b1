"""openpi's wire format: msgpack with numpy arrays as `__ndarray__` maps (openpi_client.msgpack_numpy).

Byte-compatible with `openpi_client.msgpack_numpy.packb/unpackb`, without depending on that package
(the model env does not install it): an array is `{b"__ndarray__": True, b"data": <bytes>,
b"dtype": dtype.str, b"shape": [...]}` and a numpy scalar `{b"__npgeneric__": True, b"data": <item>,
b"dtype": dtype.str}`; the keys are msgpack `bin`. Decoding goes through `harness.wire.arrays`, so only
plain numeric dtypes are rebuilt and the data length must match dtype and shape. The conversation:
the server sends its metadata map as the first frame; then each binary frame from the client is an
observation map answered by an action map; a text frame from the server is its error.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from harness.wire import wsconn
from harness.wire.arrays import ALLOWED_KINDS, from_buffer, parse_dtype, to_wire
from harness.wire.errors import WireError
from harness.wire.peermsgpack import unpack_map

_ND, _NPG = b"__ndarray__", b"__npgeneric__"


def _pack_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        arr = to_wire(obj)
        return {_ND: True, b"data": arr.tobytes(), b"dtype": arr.dtype.str, b"shape": list(arr.shape)}
    if isinstance(obj, np.generic):
        if obj.dtype.kind not in ALLOWED_KINDS:
            raise WireError(f"numpy scalar of dtype {obj.dtype} cannot be sent: only bool/int/uint/float")
        return {_NPG: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise WireError(f"cannot encode a {type(obj).__name__} in an openpi frame")


def _unpack_hook(obj: dict[Any, Any]) -> Any:
    if _ND in obj or "__ndarray__" in obj:
        data, dtype, shape = (obj.get(k, obj.get(k.decode())) for k in (b"data", b"dtype", b"shape"))
        if not isinstance(data, bytes):
            raise WireError("openpi array: `data` must be msgpack bin bytes")
        return from_buffer(data, dtype, shape)
    if _NPG in obj or "__npgeneric__" in obj:
        dtype = parse_dtype(obj.get(b"dtype", obj.get("dtype")))
        value = obj.get(b"data", obj.get("data"))
        if not isinstance(value, int | float | bool):
            raise WireError(f"openpi numpy scalar: `data` must be a number, got {type(value).__name__}")
        return dtype.type(value)
    return obj


def packb(obj: Any) -> bytes:
    """One openpi frame body (what `openpi_client.msgpack_numpy.packb` would produce)."""
    return msgpack.packb(obj, default=_pack_default, use_bin_type=True)


def unpackb(body: bytes | bytearray | memoryview, what: str = "frame") -> dict[str, Any]:
    """The map in one openpi frame body; `what` names the frame in the error (e.g. "metadata frame")."""
    return unpack_map(body, f"openpi {what}", _unpack_hook, strict_map_key=False)


class OpenpiConnection:
    """The client side of one openpi connection: the metadata frame on connect, then `infer` calls."""

    def __init__(self, address: str, *, attempts: int, timeout_s: float, max_size: int) -> None:
        self.url = wsconn.ws_url(address)
        self.timeout_s = timeout_s
        self._ws = wsconn.dial(
            address, attempts=attempts, open_timeout_s=min(timeout_s, 30.0), max_size=max_size
        )
        try:
            body = wsconn.recv(self._ws, timeout_s, "metadata frame")
            self.metadata = unpackb(body, "metadata frame")
        except WireError as exc:
            self.close()
            raise WireError(f"openpi server {self.url}: {exc} (is it an openpi server?)") from None

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        """One observation → the server's action map. Raises PeerClosed, RemoteError, WireError."""
        wsconn.send(self._ws, packb(obs), "an observation")
        return unpackb(wsconn.recv(self._ws, self.timeout_s, "action reply"), "action frame")

    def close(self) -> None:
        self._ws.close()
