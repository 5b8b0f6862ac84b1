"""Frames and codecs: round trips over a real TCP connection, reference compatibility, refusals."""

from __future__ import annotations

import base64
import json
import select
import socket
import struct
import threading
import time

import msgpack
import numpy as np
import pytest

from harness.wire.codecs import JsonCodec, MsgpackCodec, get_codec
from harness.wire.errors import PeerClosed, WireError
from harness.wire.frames import recv_frame, send_frame, write_ready
from tests.support.wirekit import TimeoutCounting

CODECS = [JsonCodec(), MsgpackCodec()]


def sample() -> dict:
    return {
        "type": "infer",
        "step": 3,
        "obs": {
            "images": {"cam": np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)},
            "proprio": np.linspace(0, 1, 10, dtype=np.float32),
            "flags": np.array([True, False]),
            "scalar": np.array(5, dtype=np.int64),
            "empty": np.zeros((0, 3), np.float64),
            "transposed": np.arange(6, dtype=np.uint16).reshape(2, 3).T,
            "big_endian": np.arange(3, dtype=">f8"),
            "np_scalar": np.float32(1.5),
            "text": 'quote " and \\ and ünï',
        },
    }


def assert_same(got: object, want: object) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys()
        for key, value in want.items():
            assert_same(got[key], value)
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray)
        assert got.dtype == want.dtype.newbyteorder("=") and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    else:
        assert got == want


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_round_trip_over_tcp(codec, pair) -> None:
    a, b = pair
    msg = sample()
    send_frame(a, codec.encode(msg))
    assert_same(codec.decode(recv_frame(b)), msg)


def test_json_matches_reference_format_both_ways() -> None:
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    plain = json.dumps(
        {"a": {"__ndarray__": base64.b64encode(arr.tobytes()).decode(), "dtype": "float32", "shape": [3, 4]}}
    )
    np.testing.assert_array_equal(JsonCodec().decode(plain.encode())["a"], arr)
    ours = json.loads(JsonCodec().encode({"a": arr}))["a"]
    assert ours["dtype"] == "float32" and ours["shape"] == [3, 4]
    np.testing.assert_array_equal(
        np.frombuffer(base64.b64decode(ours["__ndarray__"]), np.float32), arr.ravel()
    )


def test_marker_lookalike_strings_survive() -> None:
    codec = JsonCodec()
    msg = {"s": f"{codec._marker}:0", "a": np.ones(2)}
    out = codec.decode(codec.encode(msg))
    assert out["s"] == f"{codec._marker}:0"


def nd(data, dtype, shape) -> dict:
    return {"__ndarray__": data, "dtype": dtype, "shape": shape}


JSON_BAD = [
    (b"{not json", "invalid JSON"),
    (b"\xff\xfe", "invalid JSON"),
    (b"[1, 2]", "must be a map"),
    (json.dumps(nd("AAAA", "object", [1])).encode(), "refused"),
    (json.dumps(nd("AAAA", "V4", [1])).encode(), "refused"),
    (json.dumps(nd("AAAA", "i4,i4", [1])).encode(), "refused"),
    (json.dumps(nd("AAAA", "complex64", [1])).encode(), "refused"),
    (json.dumps(nd("AAAA", "nonsense", [1])).encode(), "not a numpy dtype"),
    (json.dumps(nd("AAAA", "uint8", [2])).encode(), "need 2"),
    (json.dumps(nd("AAAA", "uint8", [-1])).encode(), "non-negative"),
    (json.dumps(nd("AA!A", "uint8", [3])).encode(), "base64"),
    (json.dumps({**nd("AAAA", "uint8", [3]), "extra": 1}).encode(), "exactly the keys"),
]


@pytest.mark.parametrize(("body", "message"), JSON_BAD)
def test_json_refusals(body: bytes, message: str) -> None:
    with pytest.raises(WireError, match=message):
        JsonCodec().decode(body)


MSGPACK_BAD = [
    (b"\xc1", "invalid msgpack"),
    (msgpack.packb({"a": msgpack.ExtType(5, b"xx")}), "extension type 5"),
    (msgpack.packb(nd(b"\0" * 8, "O", [1])), "refused"),
    (msgpack.packb(nd(b"\0" * 8, "float32", [3])), "need 12"),
    (msgpack.packb(nd("text", "uint8", [4])), "bin bytes"),
    (msgpack.packb([1]), "must be a map"),
    (msgpack.packb({1: 2}), "invalid msgpack"),
]


@pytest.mark.parametrize(("body", "message"), MSGPACK_BAD)
def test_msgpack_refusals(body: bytes, message: str) -> None:
    with pytest.raises(WireError, match=message):
        MsgpackCodec().decode(body)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_encode_refuses_object_arrays(codec) -> None:
    with pytest.raises(WireError, match="only bool/int/uint/float"):
        codec.encode({"a": np.array([object()])})


def test_unknown_codec() -> None:
    with pytest.raises(WireError, match="unknown codec 'pickle'"):
        get_codec("pickle")


def test_oversize_frame_refused_before_allocation(pair) -> None:
    a, b = pair
    a.sendall(struct.pack(">I", 0xFFFFFFF0))
    with pytest.raises(WireError, match="exceeds the limit of 1024"):
        recv_frame(b, limit=1024)
    with pytest.raises(WireError, match="exceeds"):
        send_frame(a, b"x" * 2048, limit=1024)


def test_each_side_sets_its_own_limit(pair) -> None:
    a, b = pair
    send_frame(a, b"y" * 101, limit=1000)
    with pytest.raises(WireError, match="limit of 100"):
        recv_frame(b, limit=100)


def test_partial_writes_are_reassembled(pair) -> None:
    a, b = pair
    body = bytes(range(256)) * 40
    frame = struct.pack(">I", len(body)) + body

    def dribble() -> None:
        for i in range(0, len(frame), 997):
            a.sendall(frame[i : i + 997])
            time.sleep(0.001)

    thread = threading.Thread(target=dribble)
    thread.start()
    assert recv_frame(b) == body
    thread.join()


def test_mid_frame_close_and_timeouts(pair) -> None:
    a, b = pair
    b.settimeout(0.2)
    with pytest.raises(WireError, match="timed out"):
        recv_frame(b)
    a.sendall(struct.pack(">I", 100) + b"abc")
    with pytest.raises(WireError, match="timed out reading a frame \\(3/100"):
        recv_frame(b, body_timeout_s=0.2)
    assert b.gettimeout() == 0.2
    a.close()
    with pytest.raises(PeerClosed, match="between frames"):
        recv_frame(b)


def test_a_body_that_came_with_its_header_is_read_without_touching_the_timeout(pair) -> None:
    a, b = pair
    counted = TimeoutCounting(fileno=b.detach())
    counted.settimeout(10.0)
    counted.settimeouts = 0
    body = bytes(range(256)) * 4
    a.sendall(struct.pack(">I", len(body)) + body)
    assert select.select([counted], [], [], 10)[0]  # header and body are both in the buffer
    assert recv_frame(counted, body_timeout_s=60.0) == body
    assert counted.settimeouts == 0  # no deadline set and put back: one read(2) took the body
    assert counted.gettimeout() == 10.0
    counted.close()


def test_a_frame_larger_than_the_socket_takes_is_finished_or_times_out() -> None:
    """What one write(2) does not take is sent with the socket's timeout: whole when the reader
    reads, a WireError when it does not."""
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    a.settimeout(10.0)
    b.settimeout(10.0)
    body = bytes(range(256)) * 4096  # 1 MiB: far more than the socket's buffer
    took = write_ready(a, b"x" * (1 << 20))
    assert 0 < took < 1 << 20  # the buffer takes part of it at once, and nothing waited
    while took:
        took -= len(b.recv(took))
    got: list[bytearray] = []
    reader = threading.Thread(target=lambda: got.append(recv_frame(b)))
    reader.start()
    send_frame(a, body)
    reader.join(10)
    assert got == [body]
    a.settimeout(0.2)
    with pytest.raises(WireError, match="timed out writing a frame"):
        send_frame(a, body)  # nobody reads now
    a.close()
    b.close()


def test_a_blocking_socket_is_not_written_by_write_ready() -> None:
    a, b = socket.socketpair()
    assert a.gettimeout() is None
    assert write_ready(a, b"frame") == 0  # it could wait: left to the caller's send
    b.setblocking(False)
    with pytest.raises(BlockingIOError):
        b.recv(16)
    a.close()
    b.close()


def test_mid_frame_eof(pair) -> None:
    a, b = pair
    a.sendall(struct.pack(">I", 100) + b"abc")
    a.close()
    with pytest.raises(PeerClosed, match="mid-frame"):
        recv_frame(b)


def test_json_fast_path_leaves_lookalike_strings_alone() -> None:
    codec = JsonCodec()
    tricky = ['"__ndarray__": "AAAA"', 'x"__ndarray__":"', "ends with backslash \\", '"__ndarray__"']
    msg = {"texts": tricky, 'k"__ndarray__': "v", "a": np.arange(3, dtype=np.uint8)}
    out = codec.decode(codec.encode(msg))
    assert out["texts"] == tricky and out['k"__ndarray__'] == "v"
    np.testing.assert_array_equal(out["a"], [0, 1, 2])
    spaced = b'{"a": {"shape": [3], "__ndarray__" :\n "AAEC", "dtype": "uint8"}}'
    np.testing.assert_array_equal(codec.decode(spaced)["a"], [0, 1, 2])


def test_json_marker_cannot_be_forged_across_processes() -> None:
    forged = json.dumps({"a": nd(f"{JsonCodec()._marker}:0", "uint8", [1])}).encode()
    with pytest.raises(WireError, match="base64"):
        JsonCodec().decode(forged)
