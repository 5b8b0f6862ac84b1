"""What a frame may decode into: a count of its items, taken before anything is built.

Why: a body's bytes say little about the memory its decoding takes. In msgpack an empty map or
array is one byte and a small integer one byte, yet each becomes a Python object of 28-64 bytes
plus its slot in a container: 16 MiB of empty maps decoded into 1.2 GB (72x the frame) and, while
it decoded, held the GIL from every other session for seconds. Arrays travel as `bin` blobs,
whose decoded size is their length, so counting *items* (every value and key) bounds the rest.

`msgpack_items` walks a msgpack body's tokens without building any: a blob is skipped by its
length, so an observation of a few dozen items and megabytes of pixels costs microseconds, and a
hostile body is refused after at most MAX_ITEMS tokens (about 30 ms of Python here), before
msgpack allocates anything. For JSON, each value or key after the first of its container follows a
`,` or opens with `[`/`{`, and `:` pairs keys: counting those bytes (bytes.count, C speed) bounds
the items from above.
"""

from __future__ import annotations

import struct

from harness.wire.errors import WireError

MAX_ITEMS = 100_000  # values and keys in one message: an observation has tens, its pixels are blobs

CUT_SHORT = "it ends in the middle of its message"
_U8, _U16, _U32 = struct.Struct(">B"), struct.Struct(">H"), struct.Struct(">I")
# Tokens of a fixed size after their first byte (nil, bools, numbers).
_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8,
          0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}  # fmt: skip
# Blobs (bin, str) whose length follows the first byte in 1, 2 or 4 bytes.
_BLOB = {0xC4: _U8, 0xC5: _U16, 0xC6: _U32, 0xD9: _U8, 0xDA: _U16, 0xDB: _U32}
# Containers whose element count follows in 2 or 4 bytes: (length struct, items per element).
# Extension types (refused): the offset of their type byte after the first byte.
_EXT = {0xC7: 1, 0xC8: 2, 0xC9: 4, 0xD4: 0, 0xD5: 0, 0xD6: 0, 0xD7: 0, 0xD8: 0}
_CONTAINER = {0xDC: (_U16, 1), 0xDD: (_U32, 1), 0xDE: (_U16, 2), 0xDF: (_U32, 2)}


class NotMsgpack(WireError):
    """The body is not one well-formed msgpack object (the caller says which body, and how)."""


def msgpack_items(body: bytes | bytearray | memoryview, limit: int = MAX_ITEMS) -> int:
    """How many items (values and map keys) the msgpack object in `body` holds; WireError when
    that passes `limit` or it holds an extension type (which we never accept), NotMsgpack when
    the body is cut short, carries bytes after its object or holds the reserved 0xc1."""
    data = memoryview(body).cast("B")
    size, pos, pending, items = len(data), 0, 1, 0
    try:
        while pending:
            first = data[pos]
            pos += 1
            pending -= 1
            items += 1
            if items > limit:
                raise WireError(f"message holds more than {limit} items (values and keys): refused")
            if first <= 0x7F or first >= 0xE0:  # fixints
                continue
            if first <= 0x8F:  # fixmap
                pending += 2 * (first & 0x0F)
            elif first <= 0x9F:  # fixarray
                pending += first & 0x0F
            elif first <= 0xBF:  # fixstr
                pos += first & 0x1F
            elif first in _FIXED:
                pos += _FIXED[first]
            elif first in _BLOB:
                length = _BLOB[first]
                pos += length.size + length.unpack_from(data, pos)[0]
            elif first in _CONTAINER:
                length, per = _CONTAINER[first]
                pending += per * length.unpack_from(data, pos)[0]
                pos += length.size
            elif first in _EXT:
                code = struct.unpack_from(">b", data, pos + _EXT[first])[0]
                raise WireError(f"msgpack extension type {code} refused")
            else:
                raise NotMsgpack(f"token 0x{first:02x} is reserved")
    except (IndexError, struct.error):
        raise NotMsgpack(CUT_SHORT) from None
    if pos != size:
        raise NotMsgpack(f"{size - pos} bytes after its message" if pos < size else CUT_SHORT)
    return items


def json_items_bound(body: bytes | bytearray, limit: int = MAX_ITEMS) -> int:
    """An upper bound on the items a JSON body decodes into; WireError when it passes `limit`."""
    bound = 1 + sum(body.count(c) for c in (b",", b"[", b"{", b":"))
    if bound > limit:
        raise WireError(f"message may hold more than {limit} items (values and keys): refused")
    return bound
