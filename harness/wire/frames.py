"""Length-prefixed frames: a 4-byte big-endian unsigned length, then that many bytes of body.

A peer's announced length is never trusted with memory: it is checked against the caller's limit,
and the body buffer starts at FIRST_READ (or the frame, if smaller) and grows only when full, to at
most GROWTH times what arrived, so a header alone costs FIRST_READ, never the size it announces.
Waiting between frames is bounded by the socket's timeout (`sock.settimeout`), a body as a whole by
`body_timeout_s`, a whole frame by an optional `deadline`; every timeout surfaces as `WireError`.
`recv_header` and `recv_body` are the two halves of `recv_frame`, for a reader that decides between
them whether it can afford the body (the model server's bytes-in-flight budget); `skip_body` reads
a refused body away in pieces.
"""

from __future__ import annotations

import socket
import struct
import time

from harness.wire.errors import PeerClosed, WireError

_HEADER = struct.Struct(">I")
DEFAULT_MAX_FRAME = 64 << 20  # the protocol's frame limit unless a side sets its own (WIRE_MAX_FRAME)
FIRST_READ = 256 << 10  # body bytes allocated before any arrived
GROWTH = 8  # x8, not x2: a 0.5 MB frame costs one 256 KiB copy, not three
# Socket buffers big enough for an observation's frame in one go: at the kernel's default (~208 KiB)
# a 0.5 MB frame crosses a Unix socket in three wake-ups of the reader.
SOCKET_BUFFER = 4 << 20


def tune(sock: socket.socket) -> None:
    """Send each frame at once (no Nagle delay on TCP) and let a frame fit the socket's buffers."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)


def send_frame(sock: socket.socket, body: bytes | bytearray | memoryview, limit: int) -> None:
    """Send one frame; refuses a body over the limit so the peer never has to."""
    size = len(body)
    if size > limit:
        raise WireError(f"frame of {size} bytes exceeds the limit of {limit} bytes (WIRE_MAX_FRAME)")
    try:
        if size < 65536:  # one write for a small frame; a large body is not copied
            sock.sendall(_HEADER.pack(size) + bytes(body))
        else:
            sock.sendall(_HEADER.pack(size))
            sock.sendall(body)
    except TimeoutError:
        raise WireError("timed out writing a frame") from None
    except OSError as exc:
        raise PeerClosed(f"connection lost while writing a frame: {exc}") from None


def recv_frame(
    sock: socket.socket,
    limit: int,
    body_timeout_s: float | None = None,
    *,
    deadline: float | None = None,
    limit_name: str = "WIRE_MAX_FRAME",
) -> bytearray:
    """Receive one frame body. Raises PeerClosed on EOF, WireError on an oversize length or timeout.

    `body_timeout_s` bounds the whole rest of a frame once its header arrived (a peer that stalls
    or trickles mid-frame), independently of how long the socket may sit idle between frames.
    `deadline` (a `time.monotonic()` value) bounds the whole frame, the wait for its header
    included. `limit_name` says in the error where the limit comes from.
    """
    size = recv_header(sock, limit, deadline=deadline, limit_name=limit_name)
    return recv_body(sock, size, body_timeout_s, deadline=deadline)


def recv_header(
    sock: socket.socket, limit: int, *, deadline: float | None = None, limit_name: str = "WIRE_MAX_FRAME"
) -> int:
    """The announced size of the next frame, refused (WireError) over `limit`."""
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, at_boundary=True, deadline=deadline))
    if size > limit:
        raise WireError(f"frame of {size} bytes exceeds the limit of {limit} bytes ({limit_name})")
    return size


def recv_body(
    sock: socket.socket, size: int, body_timeout_s: float | None = None, *, deadline: float | None = None
) -> bytearray:
    """The `size` bytes of body after a `recv_header`, bounded as `recv_frame` says."""
    if body_timeout_s is not None:
        body_deadline = time.monotonic() + body_timeout_s
        deadline = body_deadline if deadline is None else min(deadline, body_deadline)
    return _recv_exact(sock, size, at_boundary=False, deadline=deadline)


def skip_body(sock: socket.socket, size: int, body_timeout_s: float | None = None) -> None:
    """Read and drop `size` bytes of body in FIRST_READ pieces, so that a frame refused after its
    header leaves the stream at the next frame (an error reply can follow) at no memory cost."""
    deadline = None if body_timeout_s is None else time.monotonic() + body_timeout_s
    while size > 0:
        piece = min(size, FIRST_READ)
        _recv_exact(sock, piece, at_boundary=False, deadline=deadline)
        size -= piece


def _recv_exact(sock: socket.socket, size: int, *, at_boundary: bool, deadline: float | None) -> bytearray:
    """`size` bytes; within `deadline` by setting the socket's timeout to what is left of it before
    each recv, and putting the socket's own timeout back after."""
    buf = bytearray(min(size, FIRST_READ))
    got = 0
    idle = sock.gettimeout()
    try:
        while got < size:
            if got == len(buf):  # full: grow with what arrived, never straight to the announced size
                grown = bytearray(min(size, GROWTH * got))
                grown[:got] = buf
                buf = grown
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
            n = sock.recv_into(memoryview(buf)[got:])
            if n == 0:
                where = "between frames" if at_boundary and got == 0 else f"mid-frame ({got}/{size} bytes)"
                raise PeerClosed(f"peer closed the connection {where}")
            got += n
    except TimeoutError:
        raise WireError(f"timed out reading a frame ({got}/{size} bytes)") from None
    except ConnectionError as exc:
        raise PeerClosed(f"connection lost while reading a frame: {exc}") from None
    finally:
        if deadline is not None:
            sock.settimeout(idle)
    return buf
