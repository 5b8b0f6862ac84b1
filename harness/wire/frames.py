"""Length-prefixed frames: a 4-byte big-endian unsigned length, then that many bytes of body.

A peer's announced length is never trusted with memory: it is checked against the caller's limit,
and the body buffer starts at FIRST_READ (or the frame, if smaller) and grows only when full, to at
most GROWTH times what arrived, so a header alone costs FIRST_READ, never the size it announces.
Reads and writes loop over partial transfers; waiting between frames is bounded by the socket's
timeout (`sock.settimeout`), a body as a whole by `body_timeout_s`, a whole frame by an optional
`deadline`; every timeout surfaces as `WireError`. `recv_header` and `recv_body` are the two
halves of `recv_frame`, for a reader that decides between them whether it can afford the body
(the model server's bytes-in-flight budget); `skip_body` reads a refused body away in pieces.
"""

from __future__ import annotations

import os
import socket
import struct
import time

from harness.wire.errors import PeerClosed, WireError
from harness.wire.spin import Spin

_HEADER = struct.Struct(">I")
DEFAULT_MAX_FRAME = 64 << 20  # the WIRE_MAX_FRAME knob's default; each side passes its own limit
FIRST_READ = 256 << 10  # body bytes allocated before any arrived
# x8, not x2: a 0.5 MB frame costs one 256 KiB copy, where doubling's allocator churn tripled its time
GROWTH = 8


def set_no_delay(sock: socket.socket) -> None:
    """Send each frame at once (no Nagle delay) on a TCP socket; a Unix socket (the in-process debug
    mode's socketpair) has no such delay to turn off."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def send_frame(
    sock: socket.socket, body: bytes | bytearray | memoryview, limit: int = DEFAULT_MAX_FRAME
) -> None:
    """Send one frame; refuses a body over the limit so the peer never has to."""
    size = _checked_size(body, limit)
    # One sendall for small frames saves a syscall; large bodies are not copied.
    if size < 65536:
        send_bytes(sock, _HEADER.pack(size) + bytes(body))
    else:
        send_bytes(sock, _HEADER.pack(size))
        send_bytes(sock, body)


def frame_bytes(body: bytes | bytearray | memoryview, limit: int = DEFAULT_MAX_FRAME) -> bytes:
    """One frame, header and body, as a single buffer (a copy of the body: for small frames)."""
    return _HEADER.pack(_checked_size(body, limit)) + bytes(body)


def send_bytes(sock: socket.socket, data: bytes | bytearray | memoryview) -> None:
    """All of `data` (a frame or what is left of one), within the socket's timeout: one write(2)
    when the socket takes it at once (`write_ready`), else a sendall of the rest."""
    try:
        sent = write_ready(sock, data)
        if sent < len(data):
            sock.sendall(memoryview(data)[sent:])
    except TimeoutError:
        raise WireError("timed out writing a frame") from None
    except OSError as exc:
        raise PeerClosed(f"connection lost while writing a frame: {exc}") from None


def _checked_size(body: bytes | bytearray | memoryview, limit: int) -> int:
    size = len(body)
    if size > limit:
        raise WireError(f"frame of {size} bytes exceeds the limit of {limit} bytes (WIRE_MAX_FRAME)")
    return size


def recv_frame(
    sock: socket.socket,
    limit: int = DEFAULT_MAX_FRAME,
    body_timeout_s: float | None = None,
    *,
    deadline: float | None = None,
    limit_name: str = "WIRE_MAX_FRAME",
    spin: Spin | None = None,
) -> bytearray:
    """Receive one frame body. Raises PeerClosed on EOF, WireError on an oversize length or timeout.

    `body_timeout_s` bounds the whole rest of a frame once its header arrived (a peer that stalls
    or trickles mid-frame), independently of how long the socket may sit idle between frames.
    `deadline` (a `time.monotonic()` value) bounds the whole frame, the wait for its header
    included. `limit_name` says in the error where the limit comes from. `spin` polls for the
    header first while the peer is quick (`harness.wire.spin`).
    """
    size = recv_header(sock, limit, deadline=deadline, limit_name=limit_name, spin=spin)
    return recv_body(sock, size, body_timeout_s, deadline=deadline)


def recv_header(
    sock: socket.socket,
    limit: int,
    *,
    deadline: float | None = None,
    limit_name: str = "WIRE_MAX_FRAME",
    spin: Spin | None = None,
) -> int:
    """The announced size of the next frame, refused (WireError) over `limit`: `recv_frame`'s first
    half, for a reader that must decide what the body may cost before reading it."""
    header = _recv_exact(sock, _HEADER.size, at_boundary=True, deadline=deadline, spin=spin)
    (size,) = _HEADER.unpack(header)
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


def _recv_exact(
    sock: socket.socket, size: int, *, at_boundary: bool, deadline: float | None, spin: Spin | None = None
) -> bytearray:
    """`size` bytes; within `deadline` by setting the socket's timeout to what is left of it before
    each recv, and putting the socket's own timeout back after, only if one was set."""
    buf = bytearray(min(size, FIRST_READ))
    got = 0
    idle, timed = sock.gettimeout(), False
    try:
        if not at_boundary:
            got = _read_ready(sock, buf)
        elif spin is not None:
            got = spin.read(sock, buf)
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
                timed = True
            n = sock.recv_into(memoryview(buf)[got:])
            if n == 0:
                where = "between frames" if at_boundary and got == 0 else f"mid-frame ({got}/{size} bytes)"
                raise PeerClosed(f"peer closed the connection {where}")
            got += n
        if spin is not None:
            spin.arrived()
    except TimeoutError:
        raise WireError(f"timed out reading a frame ({got}/{size} bytes)") from None
    except ConnectionError as exc:
        raise PeerClosed(f"connection lost while reading a frame: {exc}") from None
    finally:
        if timed:
            sock.settimeout(idle)
    return buf


def write_ready(sock: socket.socket, data: bytes | bytearray | memoryview) -> int:
    """The bytes of `data` the socket takes at once, with one write(2); 0 if none, or for a blocking
    socket (no timeout), which is left to the caller's send. Raises OSError for a peer that is gone.

    Why, here and in `_read_ready`: Python waits in poll(2) before every send or recv on a socket
    with a timeout, and a deadline is one ioctl to set the timeout and one to put it back, each
    syscall letting go of the GIL; yet such a socket is non-blocking underneath, so one plain
    write or read can try first and never waits. A frame mostly fits the socket's buffer, and a
    body mostly arrives with its header.
    """
    if sock.gettimeout() is None:
        return 0
    try:
        return os.write(sock.fileno(), data)
    except (BlockingIOError, InterruptedError):
        return 0


def _read_ready(sock: socket.socket, buf: bytearray) -> int:
    """What of `buf` the socket holds already, taken with one read(2) (see `write_ready`): 0 if
    nothing, or EOF, which the caller's recv sees again."""
    if sock.gettimeout() is None:
        return 0
    try:
        return os.readv(sock.fileno(), [buf])
    except (BlockingIOError, InterruptedError):
        return 0
