"""The one place that decides which numpy arrays may cross the wire and rebuilds them safely.

Only bool, signed/unsigned integer and float dtypes travel; object, void (structured), complex,
string and datetime dtypes are refused, so decoding can never run code or unpickle anything.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from harness.wire.errors import WireError

ALLOWED_KINDS = frozenset("biuf")
MAX_NDIM = 32


def to_wire(arr: np.ndarray) -> np.ndarray:
    """A C-contiguous, native-byte-order view or copy of `arr`; refuses disallowed dtypes."""
    if arr.dtype.kind not in ALLOWED_KINDS:
        raise WireError(f"array dtype {arr.dtype} cannot be sent: only bool/int/uint/float arrays travel")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    # not np.ascontiguousarray: it turns a 0-d array into shape (1,)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def raw_bytes(arr: np.ndarray) -> memoryview:
    """A flat byte view of a `to_wire` array (no copy; works for empty and 0-d arrays)."""
    return memoryview(arr.reshape(-1).view(np.uint8))


def parse_dtype(value: Any) -> np.dtype:
    """The dtype named by a wire `dtype` field, refusing anything but plain numeric kinds."""
    if not isinstance(value, str):
        raise WireError(f"array dtype must be a string, got {type(value).__name__}")
    try:
        dtype = np.dtype(value)
    except (TypeError, ValueError):
        raise WireError(f"array dtype {value!r} is not a numpy dtype") from None
    if dtype.kind not in ALLOWED_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise WireError(f"array dtype {value!r} refused: only bool/int/uint/float arrays are accepted")
    return dtype


def parse_shape(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or len(value) > MAX_NDIM:
        raise WireError(f"array shape must be a list of at most {MAX_NDIM} integers, got {value!r:.80}")
    if not all(type(d) is int and d >= 0 for d in value):
        raise WireError(f"array shape must hold non-negative integers, got {value!r:.80}")
    return tuple(value)


def from_buffer(data: bytes | bytearray | memoryview, dtype_field: Any, shape_field: Any) -> np.ndarray:
    """Rebuild an array from raw bytes after checking that dtype, shape and size agree."""
    dtype = parse_dtype(dtype_field)
    shape = parse_shape(shape_field)
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise WireError(
            f"array data is {len(data)} bytes but dtype {dtype} and shape {list(shape)} need {expected}"
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape)
