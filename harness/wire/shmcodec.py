"""The `shm` codec: arrays through a connection's shared-memory regions, the rest as msgpack.

A frame body is a 16-byte header, two big-endian unsigned 64-bit numbers: the frame's sequence
number and the bytes its arrays copy out of the region together; then the message as msgpack in
which every array is `{"__shm__": [offset, nbytes], "dtype": .., "shape": ..}`: its bytes lie in the
sender's region at that offset. The sender writes the arrays, then the frame's sequence number at
the region's offset 0, and only then sends the frame; the receiver accepts a frame only if its
number is the next one expected and the region holds that same number, before and after copying
the arrays out. So a peer that died or stalled mid-write has sent no frame (its socket closes or
stays silent, and the reader's socket timeouts apply), and a frame can never be read out of a
region that holds another frame's data. Each direction counts its own frames from 1.

A frame's arrays together may copy at most the codec's limit out of the region (arrays may point
at the same bytes, so the region's size alone bounds nothing), and at most what its header says:
`array_bytes` reads that from the header (O(1), the skeleton is parsed once, by `decode`) so a
reader can reserve the memory before decoding, and `decode` refuses a frame whose arrays copy more
than the header said or than the limit, before the copy that would pass it.

Request/reply strictly alternate on a connection, so the writer owns its region from its frame
until the answer arrives, and the reader copies the arrays out before it answers: what a policy
keeps (a history) never aliases a region.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import msgpack
import numpy as np

from harness.wire.arrays import ALLOWED_KINDS, parse_dtype, parse_shape, raw_bytes, to_wire
from harness.wire.codecs import ND_KEY, plain_scalar
from harness.wire.errors import StreamBroken, WireError
from harness.wire.peermsgpack import refuse_ext
from harness.wire.shm import SHM_CODEC, Region

SHM_KEY = "__shm__"
_KEYS = frozenset((SHM_KEY, "dtype", "shape"))
HEADER = struct.Struct(">QQ")  # the frame's sequence number, the bytes its arrays copy out
_DATA_START = 64  # the region's first bytes hold the sequence number
_ALIGN = 64
_DTYPES: dict[str, np.dtype] = {}  # wire dtype field -> checked dtype: a frame's arrays repeat a few
_DTYPES_MAX = 64  # bound the cache: a peer's odd but valid names must not grow it without end


class ShmCodec:
    """One connection's end: writes to `outgoing`, reads from `incoming`; owns and closes both."""

    name = SHM_CODEC

    def __init__(self, outgoing: Region, incoming: Region, limit: int) -> None:
        self._out, self._in, self._limit = outgoing, incoming, limit
        self._sent = self._received = 0
        self._copied = 0  # bytes copied out of the region by the frame being decoded
        self._allowed = 0  # what the frame being decoded said it copies (its header, within the limit)

    def encode(self, msg: dict[str, Any]) -> bytes:
        region, limit = self._out, self._limit
        end = _DATA_START
        copied = 0  # what the header will say: the bytes the reader copies out

        def default(obj: Any) -> Any:  # each array goes into the region as the skeleton is packed
            nonlocal end, copied
            if not isinstance(obj, np.ndarray):
                return plain_scalar(obj)
            dtype = obj.dtype
            native = dtype.kind in ALLOWED_KINDS and dtype.isnative and obj.flags.c_contiguous
            arr = obj if native else to_wire(obj)
            data = raw_bytes(arr)
            nbytes = len(data)
            region.grow(end + nbytes, limit)
            region.write(end, data)
            field = {SHM_KEY: [end, nbytes], "dtype": arr.dtype.str, "shape": list(arr.shape)}
            end += -(-nbytes // _ALIGN) * _ALIGN
            copied += nbytes
            return field

        skeleton = msgpack.packb(msg, default=default, use_bin_type=True)
        self._sent += 1
        region.seq = self._sent
        return HEADER.pack(self._sent, copied) + skeleton

    def decode(self, body: bytes | bytearray) -> dict[str, Any]:
        seq, said = self._header(body)
        if seq != self._received + 1:
            expected = self._received + 1
            raise StreamBroken(f"shared-memory frame out of sequence: expected {expected}, got {seq}")
        self._check_region(seq)
        self._copied, self._allowed = 0, said
        try:
            msg = msgpack.unpackb(
                memoryview(body)[HEADER.size :], raw=False, object_hook=self._hook, ext_hook=refuse_ext,
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
        """The bytes decoding `body` may copy out of the region, from its header; a WireError for
        a header that says more than the limit (decode refuses a frame that copies more than this)."""
        said = self._header(body)[1]
        if said > self._limit:
            raise WireError(
                f"shared-memory frame's arrays total {said} bytes, more than the limit of {self._limit} bytes"
            )
        return said

    def _header(self, body: bytes | bytearray) -> tuple[int, int]:
        if len(body) < HEADER.size:
            raise StreamBroken(f"shared-memory frame of {len(body)} bytes has no {HEADER.size}-byte header")
        return HEADER.unpack_from(body)

    def _check_region(self, seq: int) -> None:
        held = self._in.seq
        if held != seq:
            raise StreamBroken(
                f"the {self._in.what} region holds frame {held}, the socket announced frame {seq}: "
                "the peer did not finish writing it"
            )

    def _hook(self, obj: dict[str, Any]) -> Any:
        if SHM_KEY not in obj:
            if ND_KEY in obj:
                raise WireError("inline arrays are refused on a shared-memory connection")
            return obj
        if len(obj) != 3 or obj.keys() != _KEYS:
            raise WireError(f"array object must have exactly the keys {sorted(_KEYS)}, got {sorted(obj)}")
        where = obj[SHM_KEY]
        if not (type(where) is list and len(where) == 2 and type(where[0]) is int and type(where[1]) is int):
            raise WireError(f"array location must be [offset, nbytes], got {where!r:.80}")
        offset, nbytes = where
        if offset < _DATA_START or nbytes < 0:
            raise WireError(f"array location [{offset}, {nbytes}] is outside the region's data")
        self._copied += nbytes
        if self._copied > self._limit:
            raise WireError(f"shared-memory frame's arrays total more than the limit of {self._limit} bytes")
        if self._copied > self._allowed:
            raise WireError(
                f"shared-memory frame's arrays copy more than the {self._allowed} bytes its header says"
            )
        dtype, shape = _dtype(obj["dtype"]), parse_shape(obj["shape"])
        expected = math.prod(shape) * dtype.itemsize
        if nbytes != expected:
            raise WireError(
                f"array data is {nbytes} bytes but dtype {dtype} and shape {list(shape)} need {expected}"
            )
        self._in.cover(offset + nbytes, self._limit)
        return np.frombuffer(self._in.read(offset, nbytes), dtype=dtype).reshape(shape)

    def close(self) -> None:
        self._out.close()
        self._in.close()


def _dtype(field: Any) -> np.dtype:
    """`parse_dtype`, remembered for the few names a connection's frames repeat."""
    dtype = _DTYPES.get(field) if type(field) is str else None
    if dtype is None:
        dtype = parse_dtype(field)
        if len(_DTYPES) < _DTYPES_MAX:
            _DTYPES[field] = dtype
    return dtype
