"""Length-prefixed frames: a 4-byte big-endian unsigned length, then that many bytes of body.

The length is checked against a limit before any buffer is allocated, so a garbage or hostile
prefix cannot make a process allocate gigabytes. Reads and writes loop over partial transfers;
timeouts are the socket's (`sock.settimeout`), and surface as `WireError`.
"""

from __future__ import annotations

import socket
import struct

from harness.wire.errors import PeerClosed, WireError

_HEADER = struct.Struct(">I")
DEFAULT_MAX_FRAME = 64 << 20  # the WIRE_MAX_FRAME knob's default; each side passes its own limit


def send_frame(
    sock: socket.socket, body: bytes | bytearray | memoryview, limit: int = DEFAULT_MAX_FRAME
) -> None:
    """Send one frame; refuses a body over the limit so the peer never has to."""
    size = len(body)
    if size > limit:
        raise WireError(f"frame of {size} bytes exceeds the limit of {limit} bytes (WIRE_MAX_FRAME)")
    try:
        # One sendall for small frames saves a syscall; large bodies are not copied.
        if size < 65536:
            sock.sendall(_HEADER.pack(size) + bytes(body))
        else:
            sock.sendall(_HEADER.pack(size))
            sock.sendall(body)
    except TimeoutError:
        raise WireError("timed out writing a frame") from None
    except OSError as exc:
        raise PeerClosed(f"connection lost while writing a frame: {exc}") from None


def recv_frame(
    sock: socket.socket, limit: int = DEFAULT_MAX_FRAME, body_timeout_s: float | None = None
) -> bytearray:
    """Receive one frame body. Raises PeerClosed on EOF, WireError on an oversize length or timeout.

    `body_timeout_s` bounds the rest of a frame once its header arrived (a peer that stalls
    mid-frame), independently of how long the socket may sit idle between frames.
    """
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, at_boundary=True))
    if size > limit:
        raise WireError(f"frame of {size} bytes exceeds the limit of {limit} bytes (WIRE_MAX_FRAME)")
    if body_timeout_s is None:
        return _recv_exact(sock, size, at_boundary=False)
    idle = sock.gettimeout()
    sock.settimeout(body_timeout_s)
    try:
        return _recv_exact(sock, size, at_boundary=False)
    finally:
        sock.settimeout(idle)


def _recv_exact(sock: socket.socket, size: int, *, at_boundary: bool) -> bytearray:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    try:
        while got < size:
            n = sock.recv_into(view[got:], size - got)
            if n == 0:
                where = "between frames" if at_boundary and got == 0 else f"mid-frame ({got}/{size} bytes)"
                raise PeerClosed(f"peer closed the connection {where}")
            got += n
    except TimeoutError:
        raise WireError(f"timed out reading a frame ({got}/{size} bytes)") from None
    except ConnectionError as exc:
        raise PeerClosed(f"connection lost while reading a frame: {exc}") from None
    return buf
