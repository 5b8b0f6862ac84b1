"""Frames and codecs: round trips over a real TCP connection, reference compatibility, refusals,
and bodies that would decode into far more than themselves."""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time

import msgpack
import numpy as np
import pytest

from harness.wire.bounds import MAX_ITEMS, json_items_bound, msgpack_items
from harness.wire.codecs import JsonCodec, MsgpackCodec, get_codec
from harness.wire.errors import PeerClosed, WireError
from harness.wire.frames import recv_frame, send_frame

CODECS = [JsonCodec(), MsgpackCodec()]
LIMIT = 64 << 20


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
    send_frame(a, codec.encode(msg), LIMIT)
    assert_same(codec.decode(recv_frame(b, LIMIT)), msg)


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
    (b"\xc1", "token 0xc1 is reserved"),
    (msgpack.packb({"a": msgpack.ExtType(5, b"xx")}), "extension type"),
    (msgpack.packb({"a": 1}) + b"\x00", "1 bytes after its message"),
    (msgpack.packb({"a": b"x" * 100})[:-1], "ends in the middle"),
    (b"\x82\xa1a\x01", "ends in the middle"),  # a map of two pairs holding one
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
    assert recv_frame(b, LIMIT) == body
    thread.join()


def test_mid_frame_close_and_timeouts(pair) -> None:
    a, b = pair
    b.settimeout(0.2)
    with pytest.raises(WireError, match="timed out"):
        recv_frame(b, LIMIT)
    a.sendall(struct.pack(">I", 100) + b"abc")
    with pytest.raises(WireError, match="timed out reading a frame \\(3/100"):
        recv_frame(b, LIMIT, body_timeout_s=0.2)
    assert b.gettimeout() == 0.2
    a.close()
    with pytest.raises(PeerClosed, match="between frames"):
        recv_frame(b, LIMIT)


def test_a_frame_larger_than_the_socket_takes_is_finished_or_times_out() -> None:
    """A frame bigger than the socket's buffer is sent within the socket's timeout: whole when the
    reader reads, a WireError when it does not."""
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    a.settimeout(10.0)
    b.settimeout(10.0)
    body = bytes(range(256)) * 4096  # 1 MiB: far more than the socket's buffer
    got: list[bytearray] = []
    reader = threading.Thread(target=lambda: got.append(recv_frame(b, LIMIT)))
    reader.start()
    send_frame(a, body, LIMIT)
    reader.join(10)
    assert got == [body]
    a.settimeout(0.2)
    with pytest.raises(WireError, match="timed out writing a frame"):
        send_frame(a, body, LIMIT)  # nobody reads now
    a.close()
    b.close()


def test_mid_frame_eof(pair) -> None:
    a, b = pair
    a.sendall(struct.pack(">I", 100) + b"abc")
    a.close()
    with pytest.raises(PeerClosed, match="mid-frame"):
        recv_frame(b, LIMIT)


def test_json_lookalike_strings_are_left_alone() -> None:
    codec = JsonCodec()
    tricky = ['"__ndarray__": "AAAA"', 'x"__ndarray__":"', "ends with backslash \\", '"__ndarray__"']
    msg = {"texts": tricky, 'k"__ndarray__': "v", "a": np.arange(3, dtype=np.uint8)}
    out = codec.decode(codec.encode(msg))
    assert out["texts"] == tricky and out['k"__ndarray__'] == "v"
    np.testing.assert_array_equal(out["a"], [0, 1, 2])
    spaced = b'{"a": {"shape": [3], "__ndarray__" :\n "AAEC", "dtype": "uint8"}}'
    np.testing.assert_array_equal(codec.decode(spaced)["a"], [0, 1, 2])


# Bodies that decode into far more than themselves: each item is one byte on the wire and a Python
# object of 28-64 bytes decoded (issue 63 measured 72x for empty maps).
AMPLIFYING = {
    "small ints": b"\x00",
    "empty maps": b"\x80",
    "empty arrays": b"\x90",
}


@pytest.mark.parametrize("item", AMPLIFYING.values(), ids=AMPLIFYING.keys())
@pytest.mark.parametrize("k", [1, 4, 8])
def test_a_msgpack_body_of_many_small_items_is_refused_before_decoding(item: bytes, k: int) -> None:
    """K x MAX_ITEMS items under one key, flat and nested: refused by count, before msgpack builds
    any of them (the pre-scan stops at the limit, so it costs at most MAX_ITEMS steps)."""
    n = k * MAX_ITEMS
    flat = b"\x81\xa1x\xdd" + struct.pack(">I", n) + item * n
    nested = b"\x81\xa1x\x92" + (b"\x92" + item) * n + item
    for body in (flat, nested):
        with pytest.raises(WireError, match=f"more than {MAX_ITEMS} items"):
            MsgpackCodec().decode(body)
    started = time.perf_counter()
    with pytest.raises(WireError):
        msgpack_items(flat)
    assert time.perf_counter() - started < 5.0  # bounded by MAX_ITEMS, not by the frame


@pytest.mark.parametrize("text", [b"0,", b"{},", b"[],"], ids=["numbers", "empty objects", "empty arrays"])
def test_a_json_body_of_many_small_items_is_refused_before_decoding(text: bytes) -> None:
    body = b'{"x":[' + text * MAX_ITEMS + b"0]}"
    with pytest.raises(WireError, match=f"more than {MAX_ITEMS} items"):
        JsonCodec().decode(body)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_an_observation_is_counted_in_items_not_bytes(codec) -> None:
    """Pixels travel as one blob per camera: a 3-camera observation is a few dozen items."""
    obs = {f"cam{i}": np.zeros((224, 224, 3), np.uint8) for i in range(3)}
    body = codec.encode({"type": "infer", "step": 0, "obs": {"images": obs, "proprio": np.zeros(10)}})
    count = msgpack_items(body) if codec.name == "msgpack" else json_items_bound(body)
    assert count < 100
    assert codec.decode(body)["obs"]["images"]["cam2"].shape == (224, 224, 3)
