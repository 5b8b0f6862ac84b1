"""Decoding one msgpack map from another ecosystem's peer (openpi, vla-eval): the caller's array
hook, its items counted first (`harness.wire.bounds`: no extension types either), and one wording
for each way a frame can be bad."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack

from harness.wire.bounds import NotMsgpack, msgpack_items
from harness.wire.errors import WireError


def unpack_map(
    body: bytes | bytearray | memoryview,
    what: str,
    object_hook: Callable[[dict[Any, Any]], Any],
    strict_map_key: bool = True,
) -> dict[Any, Any]:
    """The map in `body`; a WireError naming `what` (e.g. "openpi metadata frame") otherwise."""
    try:
        msgpack_items(body)
        msg = msgpack.unpackb(body, raw=False, object_hook=object_hook, strict_map_key=strict_map_key)
    except NotMsgpack as exc:
        raise WireError(f"{what} is not msgpack: {exc}") from None
    except WireError as exc:
        raise WireError(f"{what}: {exc}") from None
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as exc:
        raise WireError(f"{what} is not msgpack: {type(exc).__name__}: {exc}") from None
    if not isinstance(msg, dict):
        raise WireError(f"{what} must be a msgpack map, got {type(msg).__name__}")
    return msg
