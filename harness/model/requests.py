"""How a model server connection's next request is read: within its bounds, inside the budget.

A frame's bound is the least of WIRE_MAX_FRAME, the bytes-in-flight budget, the observation the
session's hello declares (`Session.frame_limit`) and, before a hello, HELLO_MAX_FRAME; the error
names the one that refused it. The frame's share of the budget (`harness.model.inflight`) is
reserved after its header and before its body is read, so a refused or waiting frame costs no
memory; a shared-memory frame reserves the bytes its arrays will copy before they are copied.
"""

from __future__ import annotations

import socket
from typing import Any

from harness.config import knobs
from harness.model.inflight import Busy, InflightBudget, Reservation
from harness.model.session import Session
from harness.wire.codecs import Codec
from harness.wire.errors import StreamBroken, WireError
from harness.wire.frames import recv_body, recv_header, skip_body
from harness.wire.shmcodec import ShmCodec
from harness.wire.spin import Spin

FRAME_TIMEOUT_S = 60.0  # once a frame has started, the rest must follow
HELLO_MAX_FRAME = 1 << 20  # the largest frame before a successful hello (a hello is a few hundred bytes)
OBS_BOUND = "the observation its hello declares: 4 x cameras x image_size x 3 bytes + 1 MiB"


def inflight_budget() -> InflightBudget:
    """A budget of MODEL_SERVER_INFLIGHT_BYTES, shared by the connections given it."""
    return InflightBudget(knobs.get_int("MODEL_SERVER_INFLIGHT_BYTES", minimum=1))


def next_request(
    conn: socket.socket,
    session: Session,
    limit: int,
    budget: InflightBudget,
    hello_by: float | None,
    spin: Spin | None = None,
) -> tuple[bytearray, Reservation]:
    """The next frame's body and its share of the budget, reserved before the body is read.

    Raises `Busy` (the body read away, so the stream stays in step) when the budget stayed full.
    `spin` polls for the header while the client is quick, if no other session of its batcher is
    active: sessions that share a process would poll each other off its cores and its GIL.
    """
    bound, name = frame_bound(session, limit, budget)
    deadline = None if session.greeted else hello_by
    if spin is not None and not session.policy.batcher.alone(session.member):
        spin = None
    size = recv_header(conn, bound, deadline=deadline, limit_name=name, spin=spin)
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
    bounds = [(limit, "WIRE_MAX_FRAME"), (budget.limit, budget.knob)]
    if session.frame_limit is not None:
        bounds.append((session.frame_limit, OBS_BOUND))
    if not session.greeted:
        bounds.append((HELLO_MAX_FRAME, "before a hello"))
    return min(bounds, key=lambda bound: bound[0])


def decode_request(codec: Codec, body: bytearray, reservation: Reservation) -> dict[str, Any]:
    """The message in `body`; a shared-memory frame first reserves the bytes its arrays will copy."""
    if isinstance(codec, ShmCodec):
        try:
            reservation.extend(codec.array_bytes(body))
        except WireError as exc:  # the frame is not read out of its region: the stream is out of step
            raise StreamBroken(str(exc)) from None
    return codec.decode(body)
