"""The `shm` codec: arrays through a connection's shared-memory regions, the rest as msgpack.

A frame body is an 8-byte big-endian sequence number, then the message as msgpack in which every
array is `{"__shm__": [offset, nbytes], "dtype": .., "shape": ..}`: its bytes lie in the sender's
region at that offset. The sender writes the arrays, then the frame's sequence number at the
region's offset 0, and only then sends the frame; the receiver accepts a frame only if its number
is the next one expected and the region holds that same number, before and after copying the
arrays out. So a peer that died or stalled mid-write has sent no frame (its socket closes or stays
silent, and the reader's socket timeouts apply), and a frame can never be read out of a region
that holds another frame's data. Each direction counts its own frames from 1.

A frame's arrays together may copy at most the codec's limit out of the region (arrays may point
at the same bytes, so the region's size alone bounds nothing); `array_bytes` says what a frame
will copy before it is decoded, so a reader can reserve that memory first.

Request/reply strictly alternate on a connection, so the writer owns its region from its frame
until the answer arrives, and the reader copies the arrays out before it answers: what a policy
keeps (a history) never aliases a region.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import numpy as np

from harness.wire.arrays import from_buffer, raw_bytes, to_wire
from harness.wire.codecs import ND_KEY, plain_scalar
from harness.wire.errors import StreamBroken, WireError
from harness.wire.peermsgpack import refuse_ext
from harness.wire.shm import SHM_CODEC, Region

SHM_KEY = "__shm__"
_KEYS = frozenset((SHM_KEY, "dtype", "shape"))
_SEQ = struct.Struct(">Q")
_DATA_START = 64  # the region's first bytes hold the sequence number
_ALIGN = 64


class ShmCodec:
    """One connection's end: writes to `outgoing`, reads from `incoming`; owns and closes both."""

    name = SHM_CODEC

    def __init__(self, outgoing: Region, incoming: Region, limit: int) -> None:
        self._out, self._in, self._limit = outgoing, incoming, limit
        self._sent = self._received = 0
        self._copied = 0  # bytes copied out of the region by the frame being decoded

    def encode(self, msg: dict[str, Any]) -> bytes:
        arrays: list[tuple[int, memoryview]] = []
        end = _DATA_START

        def default(obj: Any) -> Any:
            nonlocal end
            if not isinstance(obj, np.ndarray):
                return plain_scalar(obj)
            arr = to_wire(obj)
            data = raw_bytes(arr)
            arrays.append((end, data))
            field = {SHM_KEY: [end, len(data)], "dtype": arr.dtype.str, "shape": list(arr.shape)}
            end += -(-len(data) // _ALIGN) * _ALIGN
            return field

        skeleton = msgpack.packb(msg, default=default, use_bin_type=True)
        self._out.grow(end, self._limit)
        for offset, data in arrays:
            self._out.write(offset, data)
        self._sent += 1
        self._out.seq = self._sent
        return _SEQ.pack(self._sent) + skeleton

    def decode(self, body: bytes | bytearray) -> dict[str, Any]:
        if len(body) < _SEQ.size:
            raise StreamBroken(f"shared-memory frame of {len(body)} bytes has no sequence number")
        (seq,) = _SEQ.unpack_from(body)
        if seq != self._received + 1:
            expected = self._received + 1
            raise StreamBroken(f"shared-memory frame out of sequence: expected {expected}, got {seq}")
        self._check_region(seq)
        self._copied = 0
        try:
            msg = msgpack.unpackb(
                memoryview(body)[_SEQ.size :], raw=False, object_hook=self._hook, ext_hook=refuse_ext,
                strict_map_key=True,
            )  # fmt: skip
        except WireError:
            raise
        except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
            raise WireError(f"invalid msgpack body: {exc}") from None
        self._check_region(seq)  # the arrays copied out were that frame's, start to end
        self._received = seq
        if not isinstance(msg, dict):
            raise WireError(f"a message must be a map, got {type(msg).__name__}")
        return msg

    def array_bytes(self, body: bytes | bytearray) -> int:
        """The bytes decoding `body` will copy out of the region (0 for a frame decode refuses)."""
        total = 0

        def count(obj: dict[str, Any]) -> Any:
            nonlocal total
            where = obj.get(SHM_KEY)
            if isinstance(where, list) and len(where) == 2 and type(where[1]) is int and where[1] > 0:
                total += where[1]
            return obj

        try:
            msgpack.unpackb(
                memoryview(body)[_SEQ.size :], raw=False, object_hook=count, ext_hook=refuse_ext,
                strict_map_key=True,
            )  # fmt: skip
        except (WireError, ValueError, TypeError, msgpack.UnpackException, RecursionError):
            return 0
        return total

    def _check_region(self, seq: int) -> None:
        held = self._in.seq
        if held != seq:
            raise StreamBroken(
                f"the {self._in.what} region holds frame {held}, the socket announced frame {seq}: "
                "the peer did not finish writing it"
            )

    def _hook(self, obj: dict[str, Any]) -> Any:
        if ND_KEY in obj:
            raise WireError("inline arrays are refused on a shared-memory connection")
        if SHM_KEY not in obj:
            return obj
        if obj.keys() != _KEYS:
            raise WireError(f"array object must have exactly the keys {sorted(_KEYS)}, got {sorted(obj)}")
        where = obj[SHM_KEY]
        if not (isinstance(where, list) and len(where) == 2 and all(type(v) is int for v in where)):
            raise WireError(f"array location must be [offset, nbytes], got {where!r:.80}")
        offset, nbytes = where
        if offset < _DATA_START or nbytes < 0:
            raise WireError(f"array location [{offset}, {nbytes}] is outside the region's data")
        self._copied += nbytes
        if self._copied > self._limit:
            raise WireError(f"shared-memory frame's arrays total more than the limit of {self._limit} bytes")
        self._in.cover(offset + nbytes, self._limit)
        return from_buffer(self._in.read(offset, nbytes), obj["dtype"], obj["shape"])

    def close(self) -> None:
        self._out.close()
        self._in.close()
