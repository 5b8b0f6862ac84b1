"""A batch's answers leave from the thread that ran its model call, not each from its session's.

Why: after a call, every session thread that waited has to be woken and take the GIL before it
can send its answer. At K = 8 on 2 cores (`benchmarks/batching.py`) the eighth answer left
1.8-2.6 ms after the call ended, one wake-up after another, while the sims that would send the
next batch's observations waited for them. The thread that ran the call is awake and holds the
GIL: encoding and sending a small answer costs it tens of µs, so all of them leave at once and
each session thread wakes only to read its next request.

The running thread never waits on a peer: it sends what the socket takes at once, and the session's
own thread sends the rest, if any, with the connection's usual timeouts (a full socket buffer, a
client gone away: that thread sees the error, as it would have). So a stalled client cannot hold
up the other answers of its batch. It writes with one write(2) on the descriptor, which a socket
with a timeout keeps non-blocking underneath (`harness.wire.frames.write_ready`), rather than
setting the socket's timeout to 0 and back: each of those is an ioctl that lets go of the GIL, for
every answer of every batch.
"""

from __future__ import annotations

import socket
from typing import Any

from harness.wire.codecs import Codec
from harness.wire.frames import frame_bytes, send_bytes, write_ready


class EarlyReply:
    """One connection's answer sent by whichever thread has it first; its session thread finishes it."""

    def __init__(self, conn: socket.socket, limit: int) -> None:
        """`conn` must have a timeout (serve_connection's idle timeout): a blocking socket's
        descriptor would make the early write wait on the peer."""
        if conn.gettimeout() is None:
            raise ValueError("EarlyReply needs a connection with a timeout (a non-blocking descriptor)")
        self._conn, self._limit = conn, limit
        self._rest: memoryview | None = None  # what the running thread could not send at once
        self._failed: Exception | None = None  # raised in the session's thread, where it is handled

    def send(self, codec: Codec, reply: dict[str, Any]) -> None:
        """From the thread that ran the call, while the session's thread waits for its answer."""
        try:
            frame = frame_bytes(codec.encode(reply), self._limit)
        except Exception as exc:  # encoded or not, the session's thread must not encode it again
            self._failed = exc
            return
        try:
            sent = write_ready(self._conn, frame)
        except OSError:  # the peer is gone: the session's thread sends and sees it
            sent = 0
        self._rest = memoryview(frame)[sent:]

    def finish(self) -> bool:
        """In the session's thread, after its request was answered: send what is left of an answer
        sent early and say True, or False when there was none (the thread sends its reply itself)."""
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed
        rest, self._rest = self._rest, None
        if rest is None:
            return False
        if rest:
            send_bytes(self._conn, rest)
        return True
