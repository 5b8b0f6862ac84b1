"""An answer sent early by a batch's thread: it never waits on the peer, and its session finishes it."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from harness.model.earlyreply import EarlyReply
from harness.wire.codecs import MsgpackCodec
from harness.wire.errors import PeerClosed
from harness.wire.frames import recv_frame
from tests.support.wirekit import TimeoutCounting


def test_a_full_socket_does_not_hold_up_the_sender_and_the_session_sends_the_rest() -> None:
    server, client = socket.socketpair()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    server.setblocking(False)
    filler = 0
    try:
        while True:  # fill the socket: the client reads nothing yet
            filler += server.send(b"\0" * 4096)
    except BlockingIOError:
        pass
    server.settimeout(30.0)
    early, codec = EarlyReply(server, 1 << 20), MsgpackCodec()
    chunk = np.arange(300, dtype=np.float32).reshape(30, 10)
    start = time.monotonic()
    early.send(codec, {"type": "infer", "actions": chunk})
    assert time.monotonic() - start < 1.0  # it did not wait for the reader
    assert server.gettimeout() == 30.0  # the connection's timeout is put back

    finished: list[bool] = []
    session = threading.Thread(target=lambda: finished.append(early.finish()))
    session.start()  # the session's thread sends the rest, blocking until the reader makes room
    client.settimeout(30.0)
    received = b""
    while len(received) < filler:
        received += client.recv(filler - len(received))
    assert received == b"\0" * filler
    reply = codec.decode(recv_frame(client))
    session.join(30)
    assert finished == [True]
    assert reply["type"] == "infer"
    np.testing.assert_array_equal(reply["actions"], chunk)
    assert early.finish() is False  # nothing is left: the next answer is the session's own
    server.close()
    client.close()


def test_a_peer_gone_before_the_early_send_is_seen_by_the_session_thread() -> None:
    server, client = socket.socketpair()
    server.settimeout(5.0)
    client.close()
    early = EarlyReply(server, 1 << 20)
    early.send(MsgpackCodec(), {"type": "infer", "actions": np.zeros((2, 2), np.float32)})  # no raise here
    with pytest.raises(PeerClosed):
        early.finish()
    server.close()


def test_an_early_answer_leaves_the_connections_timeout_alone() -> None:
    """One write(2) on the non-blocking descriptor: no ioctl to set the timeout to 0 and back."""
    server, client = socket.socketpair()
    counted = TimeoutCounting(fileno=server.detach())
    counted.settimeout(5.0)
    counted.settimeouts = 0
    early, codec = EarlyReply(counted, 1 << 20), MsgpackCodec()
    early.send(codec, {"type": "infer", "actions": np.ones((3, 2), np.float32)})
    assert counted.settimeouts == 0 and counted.gettimeout() == 5.0
    assert early.finish() is True
    client.settimeout(5.0)
    np.testing.assert_array_equal(codec.decode(recv_frame(client))["actions"], np.ones((3, 2), np.float32))
    counted.close()
    client.close()


def test_a_connection_without_a_timeout_is_refused() -> None:
    server, client = socket.socketpair()
    with pytest.raises(ValueError, match="needs a connection with a timeout"):
        EarlyReply(server, 1 << 20)
    server.close()
    client.close()
