"""The `shm` codec: arrays through a connection's shared-memory regions, the rest as msgpack.

A frame body is a 16-byte header, two big-endian unsigned 64-bit numbers: the frame's sequence
number and the bytes its arrays copy out of the region together; then the message as msgpack in
which every array is the extension type ARRAY_EXT whose data says what it is: ndim (u8), the ndim
dimensions (big-endian u64 each), then the numpy dtype string (ASCII, e.g. `|u1`). Its bytes lie
in the sender's region, the arrays one after the other in the order the skeleton holds them, the
first at DATA_START, each next one at the previous one's end rounded up to ALIGN bytes: so no
array can point at another's bytes, and an array's description depends only on its dtype and
shape (the sender packs each once, the reader parses each once).

The sender writes the arrays, then the frame's sequence number at the region's offset 0, and only
then sends the frame; the receiver accepts a frame only if its number is the next one expected and
the region holds that same number, before and after copying the arrays out. So a peer that died or
stalled mid-write has sent no frame (its socket closes or stays silent, and the reader's socket
timeouts apply), and a frame can never be read out of a region that holds another frame's data.
Each direction counts its own frames from 1.

A frame's arrays together copy at most what its header says, and the header may say at most the
codec's limit: `array_bytes` reads it (O(1): the skeleton is parsed once, by `decode`) so that a
reader can reserve the memory before decoding, and `decode` refuses a header over the limit, and a
frame whose arrays copy more than its header said before the copy that would pass it.

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

from harness.wire.arrays import MAX_NDIM, parse_dtype, to_wire
from harness.wire.codecs import ND_KEY, plain_scalar
from harness.wire.errors import StreamBroken, WireError
from harness.wire.peermsgpack import refuse_ext
from harness.wire.shm import SHM_CODEC, Region

ARRAY_EXT = 1  # the msgpack extension type code of an array in a region
HEADER = struct.Struct(">QQ")  # the frame's sequence number, the bytes its arrays copy out
DATA_START = 64  # the region's first bytes hold the sequence number
ALIGN = 64
_DIMS = [struct.Struct(f">{n}Q") for n in range(MAX_NDIM + 1)]
_NAME_MAX = 16  # dtype names longer than this are parsed every time, never kept
_KINDS_MAX = 256  # each cache below: a peer's odd but valid arrays must not grow it without end
_PACKED: dict[tuple[str, tuple[int, ...]], msgpack.ExtType] = {}  # (dtype, shape) -> its ARRAY_EXT
# (native dtype, shape) -> its ARRAY_EXT and bytes: what an array the sender has seen costs to describe
_SENT: dict[tuple[np.dtype, tuple[int, ...]], tuple[msgpack.ExtType, int]] = {}
_PARSED: dict[bytes, tuple[np.dtype, tuple[int, ...], int]] = {}  # ARRAY_EXT data -> dtype, shape, nbytes


def array_ext(dtype: str, shape: tuple[int, ...]) -> msgpack.ExtType:
    """The skeleton's stand-in for an array of `dtype` and `shape` (its bytes: in the region)."""
    ext = _PACKED.get((dtype, shape))
    if ext is None:
        if len(shape) > MAX_NDIM:
            raise WireError(f"an array of {len(shape)} dimensions cannot be sent (at most {MAX_NDIM})")
        data = bytes([len(shape)]) + _DIMS[len(shape)].pack(*shape) + dtype.encode()
        ext = msgpack.ExtType(ARRAY_EXT, data)
        if len(_PACKED) < _KINDS_MAX:
            _PACKED[(dtype, shape)] = ext
    return ext


def _sent_kind(dtype: np.dtype, shape: tuple[int, ...]) -> tuple[msgpack.ExtType, int]:
    """The ARRAY_EXT and byte count of a `to_wire` array (native, allowed, contiguous), kept so that
    the next array of its dtype and shape costs one lookup."""
    sent = (array_ext(dtype.str, shape), math.prod(shape) * dtype.itemsize)
    if len(_SENT) < _KINDS_MAX:
        _SENT[(dtype, shape)] = sent
    return sent


class ShmCodec:
    """One connection's end: writes to `outgoing`, reads from `incoming`; owns and closes both."""

    name = SHM_CODEC

    def __init__(self, outgoing: Region, incoming: Region, limit: int) -> None:
        self._out, self._in, self._limit = outgoing, incoming, limit
        self._sent = self._received = 0
        self._copied = 0  # bytes copied out of the region by the frame being decoded
        self._allowed = 0  # what the frame being decoded said it copies (its header)
        self._next = DATA_START  # where the frame being decoded has its next array

    def encode(self, msg: dict[str, Any]) -> bytes:
        region, limit = self._out, self._limit
        end = DATA_START  # where the next array goes
        copied = 0  # what the header will say: the bytes the reader copies out

        def default(obj: Any) -> Any:  # each array goes into the region as the skeleton is packed
            nonlocal end, copied
            if not isinstance(obj, np.ndarray):
                return plain_scalar(obj)
            sent = _SENT.get((obj.dtype, obj.shape)) if obj.flags.c_contiguous else None
            if sent is None:  # a kind not seen yet, or one that must be made native and contiguous
                obj = to_wire(obj)
                sent = _sent_kind(obj.dtype, obj.shape)
            ext, nbytes = sent
            region.grow(end + nbytes, limit)
            region.write(end, obj, nbytes)
            end += -(-nbytes // ALIGN) * ALIGN
            copied += nbytes
            return ext

        skeleton = msgpack.packb(msg, default=default, use_bin_type=True)
        self._sent += 1
        region.seq = self._sent
        return HEADER.pack(self._sent, copied) + skeleton

    def decode(self, body: bytes | bytearray) -> dict[str, Any]:
        seq, said = self._header(body)
        self._within_limit(said)
        if seq != self._received + 1:
            expected = self._received + 1
            raise StreamBroken(f"shared-memory frame out of sequence: expected {expected}, got {seq}")
        self._check_region(seq)
        self._copied, self._allowed, self._next = 0, said, DATA_START
        try:
            msg = msgpack.unpackb(
                memoryview(body)[HEADER.size :], raw=False, object_hook=_refuse_inline,
                ext_hook=self._array, strict_map_key=True,
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
        self._within_limit(said)
        return said

    def _within_limit(self, said: int) -> None:
        if said > self._limit:
            raise WireError(
                f"shared-memory frame's arrays total {said} bytes, more than the limit of {self._limit} bytes"
            )

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

    def _array(self, code: int, data: bytes) -> np.ndarray:
        """A copy of the next array out of the region, its description and bounds checked first."""
        if code != ARRAY_EXT:
            refuse_ext(code, data)
        kind = _PARSED.get(data) or _parse_array(data)
        dtype, shape, nbytes = kind
        offset = self._next
        self._copied += nbytes
        if self._copied > self._allowed:  # and so never more than the limit: the header is within it
            raise WireError(
                f"shared-memory frame's arrays copy more than the {self._allowed} bytes its header says"
            )
        self._in.cover(offset + nbytes, self._limit)
        self._next = offset + -(-nbytes // ALIGN) * ALIGN
        return np.ndarray(shape, dtype, self._in.read(offset, nbytes))

    def close(self) -> None:
        self._out.close()
        self._in.close()


def _refuse_inline(obj: dict[str, Any]) -> dict[str, Any]:
    if ND_KEY in obj:
        raise WireError("inline arrays are refused on a shared-memory connection")
    return obj


def _parse_array(data: bytes) -> tuple[np.dtype, tuple[int, ...], int]:
    """(dtype, shape, nbytes) of an ARRAY_EXT's data, refusing what `parse_dtype` refuses."""
    ndim = data[0] if data else -1
    if not 0 <= ndim <= MAX_NDIM or len(data) < 1 + 8 * ndim:
        raise WireError(
            f"array description of {len(data)} bytes: expected ndim (at most {MAX_NDIM}), dims, dtype"
        )
    shape = _DIMS[ndim].unpack_from(data, 1)
    name = data[1 + 8 * ndim :]
    try:
        dtype = parse_dtype(name.decode("ascii"))
    except UnicodeDecodeError:
        raise WireError(f"array dtype {name!r:.40} is not an ASCII numpy dtype name") from None
    kind = (dtype, shape, math.prod(shape) * dtype.itemsize)
    if len(_PARSED) < _KINDS_MAX and len(name) <= _NAME_MAX:
        _PARSED[bytes(data)] = kind
    return kind
