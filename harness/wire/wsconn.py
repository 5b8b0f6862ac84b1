"""Blocking WebSocket connections to another ecosystem's policy server (openpi, vla-eval).

`dial` retries a bounded number of times (a server still loading its model refuses connections),
then raises one WireError naming the address and the last reason; `recv` turns the ways a reply can
fail into this package's errors: a closed connection is `PeerClosed`, a text frame (openpi's error
reply) is `RemoteError`, silence past the timeout is `WireError`.
"""

from __future__ import annotations

import time
from typing import Any

import websockets
from websockets.sync.client import ClientConnection, connect

from harness.wire.errors import PeerClosed, RemoteError, WireError


def ws_url(address: str) -> str:
    """`host:port` or a ws:// / wss:// URL → a URL."""
    return address if address.startswith(("ws://", "wss://")) else f"ws://{address}"


def dial(
    address: str,
    *,
    attempts: int,
    open_timeout_s: float,
    max_size: int,
    retry_wait_s: float = 1.0,
    headers: dict[str, str] | None = None,
) -> ClientConnection:
    """An open connection to `address` after at most `attempts` tries."""
    url, last = ws_url(address), ""
    for attempt in range(1, attempts + 1):
        try:
            return connect(
                url, open_timeout=open_timeout_s, compression=None, max_size=max_size,
                ping_interval=None, additional_headers=headers,
            )  # fmt: skip
        except (OSError, TimeoutError, websockets.exceptions.WebSocketException) as exc:
            last = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, websockets.exceptions.InvalidHandshake):
                break  # something answered, but not a WebSocket server: retrying will not help
        if attempt < attempts:
            time.sleep(retry_wait_s)
    raise WireError(f"policy server {url}: cannot connect after {attempt} attempt(s): {last}")


def recv(conn: ClientConnection, timeout_s: float, what: str) -> bytes:
    """The next binary frame; `what` says what was awaited, for the error."""
    try:
        data: Any = conn.recv(timeout=timeout_s)
    except TimeoutError:
        raise WireError(f"no {what} within {timeout_s:g} s") from None
    except websockets.exceptions.ConnectionClosed as exc:
        rcvd = exc.rcvd
        why = f" (code {rcvd.code}{': ' + rcvd.reason if rcvd.reason else ''})" if rcvd else ""
        raise PeerClosed(f"the server closed the connection while we waited for {what}{why}") from None
    if isinstance(data, str):
        raise RemoteError(f"the server answered with an error text frame: {data.strip()[-600:]}")
    return bytes(data)


def send(conn: ClientConnection, data: bytes, what: str) -> None:
    try:
        conn.send(data)
    except websockets.exceptions.ConnectionClosed as exc:
        raise PeerClosed(f"the server closed the connection before {what} could be sent: {exc}") from None
