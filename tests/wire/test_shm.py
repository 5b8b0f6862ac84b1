"""The shared-memory regions and codec on their own: round trips, growth, sequence and bounds checks,
and the server's refusals of offers it must not map."""

from __future__ import annotations

import fcntl
import os
import socket
import struct

import msgpack
import numpy as np
import pytest

from harness.wire.errors import StreamBroken, WireError
from harness.wire.shm import INITIAL_SIZE, Offer, accept_offer, same_host
from harness.wire.shmcodec import ARRAY_EXT, HEADER, ShmCodec, array_ext
from tests.wire.test_wire import assert_same, sample

LIMIT = 64 << 20


@pytest.fixture
def ends():
    """(client codec, server codec) over one offer, as the hello would set them up."""
    offer = Offer()
    request, reply = accept_offer(offer.field, LIMIT)
    client = ShmCodec(offer.request, offer.reply, LIMIT)
    server = ShmCodec(reply, request, LIMIT)
    yield client, server
    client.close()
    server.close()


def test_round_trip_both_ways(ends) -> None:
    client, server = ends
    for _ in range(3):  # the regions are reused frame after frame
        msg = sample()
        assert_same(server.decode(client.encode(msg)), msg)
        answer = {"type": "infer", "actions": np.arange(300, dtype=np.float32).reshape(30, 10)}
        assert_same(client.decode(server.encode(answer)), answer)


def test_a_kind_already_sent_is_still_made_native_and_contiguous(ends) -> None:
    """The sender keeps each (dtype, shape) it has sent; a later array of that dtype and shape that is
    transposed or big-endian must still travel by its values, not by its buffer."""
    client, server = ends
    plain = np.arange(6, dtype=np.float64).reshape(3, 2)
    odd = {
        "transposed": np.arange(6, dtype=np.float64).reshape(2, 3).T,
        "big_endian": plain.astype(">f8"),
        "strided": np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2],
    }
    assert_same(server.decode(client.encode({"a": plain})), {"a": plain})
    for name, arr in odd.items():
        got = server.decode(client.encode({name: arr}))[name]
        assert got.dtype == np.float64 and got.shape == (3, 2)
        np.testing.assert_array_equal(got, arr)


def test_arrays_do_not_alias_the_region(ends) -> None:
    """What a policy keeps (a history) must survive the client's next frame."""
    client, server = ends
    first = server.decode(client.encode({"a": np.full(1000, 1, np.uint8)}))
    server.decode(client.encode({"a": np.full(1000, 2, np.uint8)}))
    assert (first["a"] == 1).all()


def test_a_message_larger_than_the_region_grows_it(ends) -> None:
    client, server = ends
    big = {"image": np.random.default_rng(0).integers(0, 256, (3, INITIAL_SIZE), dtype=np.uint8)}
    assert_same(server.decode(client.encode(big)), big)
    assert os.fstat(client._out.fd).st_size >= 3 * INITIAL_SIZE
    assert_same(server.decode(client.encode(sample())), sample())  # and stays usable


def test_a_message_over_the_frame_limit_is_refused_by_its_writer() -> None:
    offer = Offer()
    try:
        codec = ShmCodec(offer.request, offer.reply, 2 * INITIAL_SIZE)
        with pytest.raises(WireError, match="WIRE_MAX_FRAME"):
            codec.encode({"image": np.zeros(3 * INITIAL_SIZE, np.uint8)})
    finally:
        offer.close()


def test_a_replayed_frame_is_out_of_sequence(ends) -> None:
    client, server = ends
    body = client.encode(sample())
    server.decode(body)
    with pytest.raises(StreamBroken, match="out of sequence: expected 2, got 1"):
        server.decode(body)


def test_a_frame_the_region_does_not_hold_is_refused(ends) -> None:
    """A header whose sequence number the region does not carry: the writer never finished."""
    client, server = ends
    body = client.encode(sample())
    client._out.seq = 0  # as if the writer died before its last store
    with pytest.raises(StreamBroken, match="holds frame 0, the socket announced frame 1"):
        server.decode(body)


def _frame(seq: int, array_bytes: int, msg: dict) -> bytes:
    """A hand-made frame body: the header, then the skeleton (arrays as `array_ext`)."""
    return HEADER.pack(seq, array_bytes) + msgpack.packb(msg)


def test_an_array_the_region_does_not_hold_is_refused(ends) -> None:
    client, server = ends
    client.encode({})  # the region now holds frame 1
    for shape in [(INITIAL_SIZE,), (LIMIT,)]:
        with pytest.raises(WireError, match="holds"):
            server.decode(_frame(1, LIMIT, {"a": array_ext("|u1", shape)}))
    with pytest.raises(WireError, match="holds"):  # arrays follow each other: two halves pass the end
        half = array_ext("|u1", (INITIAL_SIZE // 2,))
        server.decode(_frame(1, LIMIT, {"a": half, "b": half}))


def test_array_descriptions_are_checked(ends) -> None:
    client, server = ends
    client.encode({})  # the region now holds frame 1
    for data, match in [
        (b"", "expected ndim"),
        (bytes([33]) + bytes(33 * 8) + b"|u1", "expected ndim"),
        (bytes([2]) + bytes(8) + b"|u1", "expected ndim"),  # fewer dims than it says
        (bytes([1]) + struct.pack(">Q", 8) + b"object", "refused"),  # only plain numeric dtypes
        (bytes([1]) + struct.pack(">Q", 8) + b"\xff\xfe", "not an ASCII numpy dtype"),
        (bytes([1]) + struct.pack(">Q", 8) + b"nonsense", "not a numpy dtype"),
    ]:
        with pytest.raises(WireError, match=match):
            server.decode(_frame(1, LIMIT, {"a": msgpack.ExtType(ARRAY_EXT, data)}))
    with pytest.raises(WireError, match="extension type 5 refused"):
        server.decode(_frame(1, LIMIT, {"a": msgpack.ExtType(5, b"")}))
    with pytest.raises(WireError, match="inline arrays are refused"):
        server.decode(_frame(1, LIMIT, {"a": {"__ndarray__": b"", "dtype": "uint8", "shape": [0]}}))


def test_the_header_says_what_the_arrays_copy_and_decode_holds_it_to_that(ends) -> None:
    """The server reserves what the header says before decoding: a frame whose arrays copy more is
    refused before the copy that would pass it, and a header over the limit is refused outright."""
    client, server = ends
    body = client.encode({"a": np.zeros(1000, np.uint8), "b": {"c": np.zeros(10, np.float32)}})
    assert server.array_bytes(body) == 1040
    assert server.decode(bytes(body))["a"].nbytes == 1000
    client.encode({})  # the region now holds frame 2
    arrays = {"a": array_ext("|u1", (512,)), "b": array_ext("<f4", (128,))}
    with pytest.raises(WireError, match="copy more than the 1000 bytes its header says"):
        server.decode(_frame(2, 1000, arrays))
    with pytest.raises(WireError, match=f"more than the limit of {LIMIT} bytes"):
        server.array_bytes(_frame(2, LIMIT + 1, arrays))
    assert server.decode(_frame(2, 1024, arrays))["b"].shape == (128,)


def test_short_and_non_msgpack_bodies(ends) -> None:
    _, server = ends
    with pytest.raises(StreamBroken, match="no 16-byte header"):
        server.decode(b"\x00")


def _field(offer: Offer, **change: object) -> dict:
    return {**offer.field, **change}


def test_malformed_offers_are_refused_with_the_reason() -> None:
    offer = Offer()
    try:
        for field, match in [
            ("nope", "must hold integer pid"),
            (_field(offer, pid="1"), "must hold integer pid"),
            (_field(offer, nonce="../x"), "nonce must be 32 lowercase hex digits"),
            (_field(offer, nonce="0" * 32), "is not this connection's shared memory"),
            (_field(offer, pid=2**22 + 7), "cannot see the client's shared memory"),
        ]:
            with pytest.raises(WireError, match=match):
                accept_offer(field, LIMIT)
        with pytest.raises(WireError, match=r"holds 1048576 bytes \(limit 1024\)"):
            accept_offer(offer.field, 1024)
    finally:
        offer.close()


def test_descriptors_that_are_not_the_offered_memfds_are_never_opened() -> None:
    """A pipe (opening it could block), a socket, a plain file: all refused by their link."""
    offer = Offer()
    read_end, write_end = os.pipe()
    sock = socket.socket()
    try:
        for fd in (read_end, write_end, sock.fileno(), 0):
            with pytest.raises(WireError, match="is not this connection's shared memory"):
                accept_offer(_field(offer, request_fd=fd), LIMIT)
    finally:
        offer.close()
        os.close(read_end)
        os.close(write_end)
        sock.close()


def test_an_unsealed_memfd_is_refused() -> None:
    """A region that could shrink under the reader's mapping would kill it with SIGBUS."""
    offer = Offer()
    name = f"harness-wire-{offer.field['nonce']}-request"
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 4096)
    try:
        with pytest.raises(WireError, match="not sealed against shrinking"):
            accept_offer(_field(offer, request_fd=fd), LIMIT)
        with pytest.raises(OSError):
            os.ftruncate(offer.request.fd, 4096)  # while the offered ones cannot shrink
    finally:
        os.close(fd)
        offer.close()


def test_closing_frees_every_descriptor() -> None:
    before = set(os.listdir("/proc/self/fd"))
    offer = Offer()
    request, reply = accept_offer(offer.field, LIMIT)
    for region in (offer.request, offer.reply, request, reply):
        region.close()
        region.close()  # idempotent
    assert set(os.listdir("/proc/self/fd")) <= before
    assert fcntl.F_SEAL_SHRINK  # the platform has memfd seals (Linux), which all of this needs


def test_same_host(pair) -> None:
    a, _ = pair
    assert same_host(a)
    unix_a, unix_b = socket.socketpair()
    try:
        assert same_host(unix_a)
    finally:
        unix_a.close()
        unix_b.close()
    assert not same_host(socket.socket())  # not connected: no peer to be sure of
