"""The `shm` codec: arrays through a connection's shared-memory regions, the rest as msgpack.

A frame body is a 25-byte header: three big-endian unsigned 64-bit numbers, the frame's sequence
number, its base (where it starts in the sender's region) and its span (its bytes there, 0 for a
frame without arrays), then a byte, 1 if the frame is lent (`harness.wire.lent`: its reader may
view its arrays instead of copying them out). Then the message as msgpack in which every array is
the extension type ARRAY_EXT whose data says what it is: ndim (u8), the ndim dimensions
(big-endian u64 each), then the numpy dtype string (ASCII, e.g. `|u1`). In the region, a frame is
its sequence number (its stamp, u64) at its base, then its arrays one after the other in the order
the skeleton holds them, the first at base + ALIGN, each next one at the previous one's end rounded
up to ALIGN bytes: so no array can point at another's bytes, and an array's description depends
only on its dtype and shape (the sender packs each once, the reader parses each once).

The sender writes the arrays, then the stamp, and only then sends the frame; the receiver accepts
a frame only if its number is the next one expected and the region holds that same number at the
frame's base, before it reads the arrays and, when it copies them out, after. So a peer that died
or stalled mid-write has sent no frame (its socket closes or stays silent, and the reader's socket
timeouts apply), and a frame is never read out of a region that holds another frame's data. Each
direction counts its own frames from 1.

The sim client lends its requests (`lend=True`): the model server reads their arrays as read-only
views and notes each frame's release once nothing views it; the client never writes over a frame
not released. The server's replies are not lent: each goes at DATA_START, and the client copies it
out before it sends again (request and reply strictly alternate). A frame's span is at most the
codec's limit, and every array must lie inside it: `array_bytes` says what decoding will copy
(O(1): the skeleton is parsed once, by `decode`), so that a reader can reserve the memory first;
a lent frame copies nothing.
"""

from __future__ import annotations

import math
import struct
import weakref
from typing import Any

import msgpack
import numpy as np

from harness.wire.arrays import MAX_NDIM, parse_dtype, to_wire
from harness.wire.codecs import ND_KEY, plain_scalar
from harness.wire.errors import StreamBroken, WireError
from harness.wire.lent import ALIGN, DATA_START, LentFrames, Placed, aligned, region_limit
from harness.wire.peermsgpack import refuse_ext
from harness.wire.shm import SHM_CODEC, Region

ARRAY_EXT = 1  # the msgpack extension type code of an array in a region
HEADER = struct.Struct(">QQQB")  # sequence number, base, span, lent
_DIMS = [struct.Struct(f">{n}Q") for n in range(MAX_NDIM + 1)]
_NAME_MAX = 16  # dtype names longer than this are parsed every time, never kept
_KINDS_MAX = 256  # each cache below: a peer's odd but valid arrays must not grow it without end
_PACKED: dict[tuple[str, tuple[int, ...]], msgpack.ExtType] = {}  # (dtype, shape) -> its ARRAY_EXT
# (native dtype, shape) -> its ARRAY_EXT and bytes: what an array the sender has seen costs to describe
_SENT: dict[tuple[np.dtype, tuple[int, ...]], tuple[msgpack.ExtType, int]] = {}
_PARSED: dict[bytes, tuple[np.dtype, tuple[int, ...], int]] = {}  # ARRAY_EXT data -> dtype, shape, nbytes
_UNLENT = Placed(DATA_START, lend=False)


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
    """One connection's end: writes to `outgoing`, reads from `incoming`; owns and closes both.

    `lend`: this end's frames may be read as views (the sim client's requests), placed by
    `LentFrames`; else each goes at DATA_START and is copied out by its reader."""

    name = SHM_CODEC

    def __init__(self, outgoing: Region, incoming: Region, limit: int, *, lend: bool = False) -> None:
        self._out, self._in, self._limit = outgoing, incoming, limit
        self._region_limit = region_limit(limit)
        self._lent = LentFrames(incoming) if lend else None
        self._sent = self._received = 0
        # the frame being decoded: its base, where its next array is, where it ends, a view if lent
        self._base = self._next = self._end = 0
        self._view: np.ndarray | None = None
        self._viewed: dict[int, weakref.ref[np.ndarray]] = {}  # lent frames still viewed, by number

    def encode(self, msg: dict[str, Any]) -> bytes:
        arrays: list[tuple[np.ndarray, int]] = []
        span = ALIGN  # the frame's stamp, then its arrays

        def default(obj: Any) -> Any:
            nonlocal span
            if not isinstance(obj, np.ndarray):
                return plain_scalar(obj)
            sent = _SENT.get((obj.dtype, obj.shape)) if obj.flags.c_contiguous else None
            if sent is None:  # a kind not seen yet, or one that must be made native and contiguous
                obj = to_wire(obj)
                sent = _sent_kind(obj.dtype, obj.shape)
            ext, nbytes = sent
            arrays.append((obj, nbytes))
            span += aligned(nbytes)
            return ext

        skeleton = msgpack.packb(msg, default=default, use_bin_type=True)
        seq = self._sent + 1
        if not arrays:
            self._sent = seq
            return HEADER.pack(seq, 0, 0, False) + skeleton
        if span > self._limit:
            raise WireError(
                f"a message of {span} bytes exceeds the limit of {self._limit} bytes (WIRE_MAX_FRAME)"
            )
        placed = _UNLENT if self._lent is None else self._lent.place(seq, span)
        region = self._out
        region.grow(placed.base + span, self._region_limit)
        offset = placed.base + ALIGN
        for obj, nbytes in arrays:
            region.write(offset, obj, nbytes)
            offset += aligned(nbytes)
        region.set_stamp(placed.base, seq)
        if placed.lend:
            self._lent.lent(seq, placed, span)  # type: ignore[union-attr]
        self._sent = seq
        return HEADER.pack(seq, placed.base, span, placed.lend) + skeleton

    def decode(self, body: bytes | bytearray) -> dict[str, Any]:
        seq, base, span, lent = self._header(body)
        if seq != self._received + 1:
            expected = self._received + 1
            raise StreamBroken(f"shared-memory frame out of sequence: expected {expected}, got {seq}")
        if span:
            self._in.cover(base + span, self._region_limit)
            self._check_stamp(base, seq)
        self._base, self._next, self._end = base, base + ALIGN, base + span
        if span and lent:
            self._view = self._lend(seq, base, span)
        try:
            msg = msgpack.unpackb(
                memoryview(body)[HEADER.size :], raw=False, object_hook=_refuse_inline,
                ext_hook=self._array, strict_map_key=True,
            )  # fmt: skip
        except WireError:
            raise
        except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
            raise WireError(f"invalid msgpack body: {exc}") from None
        finally:
            self._view = None
        if span and not lent:
            self._check_stamp(base, seq)  # the arrays copied out were that frame's, start to end
        self._received = seq
        if not isinstance(msg, dict):
            raise WireError(f"a message must be a map, got {type(msg).__name__}")
        return msg

    def array_bytes(self, body: bytes | bytearray) -> int:
        """The bytes decoding `body` may copy out of the region, from its header (0 for a lent
        frame); a WireError for a header that breaks the limit (decode refuses it too)."""
        _, _, span, lent = self._header(body)
        return 0 if lent else span

    def _header(self, body: bytes | bytearray) -> tuple[int, int, int, int]:
        if len(body) < HEADER.size:
            raise StreamBroken(f"shared-memory frame of {len(body)} bytes has no {HEADER.size}-byte header")
        seq, base, span, lent = HEADER.unpack_from(body)
        if span > self._limit:
            raise WireError(
                f"shared-memory frame of {span} bytes, more than the limit of {self._limit} bytes"
            )
        if span and (base < DATA_START or span < ALIGN or lent > 1):
            raise WireError(
                f"shared-memory frame header: base {base}, span {span}, lent {lent}: a frame starts "
                f"at byte {DATA_START} or later, spans at least {ALIGN} bytes, and lent is 0 or 1"
            )
        return seq, base, span, lent

    def _check_stamp(self, base: int, seq: int) -> None:
        held = self._in.stamp(base)
        if held != seq:
            raise StreamBroken(
                f"the {self._in.what} region holds frame {held} at byte {base}, the socket announced "
                f"frame {seq}: the peer did not finish writing it"
            )

    def _lend(self, seq: int, base: int, span: int) -> np.ndarray:
        """The view of lent frame `seq` that its arrays are views of: when the last of them goes
        (whichever thread drops it), its writer learns that it may write there again."""
        view = self._in.view(base, span)
        self._viewed[seq] = weakref.ref(view, lambda _, seq=seq: self._released(seq))
        return view

    def _released(self, seq: int) -> None:
        del self._viewed[seq]
        self._out.note_release(seq)

    def _array(self, code: int, data: bytes) -> np.ndarray:
        """The next array: a view (a lent frame) or a copy out of the region, its description and
        bounds checked first."""
        if code != ARRAY_EXT:
            refuse_ext(code, data)
        kind = _PARSED.get(data) or _parse_array(data)
        dtype, shape, nbytes = kind
        offset = self._next
        if offset + nbytes > self._end:
            raise WireError(
                f"shared-memory frame's arrays pass the end of the frame (byte {self._end}) its header says"
            )
        self._next = offset + aligned(nbytes)
        if self._view is not None:
            return np.ndarray(shape, dtype, self._view, offset - self._base)
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
