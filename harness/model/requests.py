"""How a model server connection's next request is read: within its bounds, inside the budget.

A frame's bound is the least of WIRE_MAX_FRAME, what the bytes-in-flight budget can hold (a frame
costs DECODED_FACTOR times its size there), the observation the session's hello declares
(`Session.frame_limit`) and, before a hello, HELLO_MAX_FRAME; the error names the one that refused
it. The frame's share of the budget (`harness.model.inflight`) is reserved after its header and
before its body is read, so a refused or waiting frame costs no memory.
"""

from __future__ import annotations

import socket

from harness.model.inflight import DECODED_FACTOR, Busy, InflightBudget, Reservation
from harness.model.session import Session
from harness.wire.frames import recv_body, recv_header, skip_body

FRAME_TIMEOUT_S = 60.0  # once a frame has started, the rest must follow
HELLO_MAX_FRAME = 1 << 20  # the largest frame before a successful hello (a hello is a few hundred bytes)
OBS_BOUND = "the observation its hello declares: 4 x cameras x image_size x 3 bytes + 1 MiB"


def next_request(
    conn: socket.socket, session: Session, limit: int, budget: InflightBudget, hello_by: float | None
) -> tuple[bytearray, Reservation]:
    """The next frame's body and its share of the budget, reserved before the body is read.

    Raises `Busy` (the body read away, so the stream stays in step) when the budget stayed full.
    """
    bound, name = frame_bound(session, limit, budget)
    deadline = None if session.greeted else hello_by
    size = recv_header(conn, bound, deadline=deadline, limit_name=name)
    try:
        reservation = budget.reserve(size)
    except Busy:
        skip_body(conn, size, FRAME_TIMEOUT_S)
        raise
    try:
        return recv_body(conn, size, FRAME_TIMEOUT_S, deadline=deadline), reservation
    except BaseException:
        reservation.release()
        raise


def frame_bound(session: Session, limit: int, budget: InflightBudget) -> tuple[int, str]:
    """The largest frame `session` may send now, and what sets it (the first of equal bounds)."""
    bounds = [
        (limit, "WIRE_MAX_FRAME"),
        (budget.limit // DECODED_FACTOR, f"{budget.knob} / {DECODED_FACTOR}"),
    ]
    if session.frame_limit is not None:
        bounds.append((session.frame_limit, OBS_BOUND))
    if not session.greeted:
        bounds.append((HELLO_MAX_FRAME, "before a hello"))
    return min(bounds, key=lambda bound: bound[0])
