"""The shared-memory regions and codec on their own: round trips, growth, sequence and bounds checks,
lent frames (views, release notes, copies for a reader that keeps what it was lent), and the
server's refusals of offers it must not map."""

from __future__ import annotations

import fcntl
import os
import socket
import struct

import msgpack
import numpy as np
import pytest

from harness.wire.errors import StreamBroken, WireError
from harness.wire.lent import ALIGN, DATA_START, region_limit
from harness.wire.shm import INITIAL_SIZE, Offer, accept_offer, same_host
from harness.wire.shmcodec import ARRAY_EXT, HEADER, ShmCodec, array_ext
from tests.wire.test_wire import assert_same, sample

LIMIT = 64 << 20


@pytest.fixture
def ends():
    """(client codec, server codec) over one offer, as the hello would set them up."""
    offer = Offer()
    request, reply = accept_offer(offer.field, LIMIT)
    client = ShmCodec(offer.request, offer.reply, LIMIT, lend=True)
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
    """What a policy keeps (a history) must survive the client's next frames."""
    client, server = ends
    first = server.decode(client.encode({"a": np.full(1000, 1, np.uint8)}))
    for value in range(2, 10):
        server.decode(client.encode({"a": np.full(1000, value, np.uint8)}))
    assert (first["a"] == 1).all()


def _sent(codec: ShmCodec, msg: dict) -> tuple[bytes, int, bool]:
    """A frame `codec` encodes, with the base and the lent flag its header says."""
    body = codec.encode(msg)
    _, base, _, lent = HEADER.unpack_from(body)
    return body, base, bool(lent)


def test_a_lent_frame_is_read_as_views_and_its_place_is_reused_once_they_go(ends) -> None:
    client, server = ends
    image = np.arange(3000, dtype=np.uint8)
    body, base, lent = _sent(client, {"a": image})
    assert lent and base == DATA_START and server.array_bytes(body) == 0  # no copy, nothing reserved
    got = server.decode(body)["a"]
    np.testing.assert_array_equal(got, image)
    assert not got.flags.owndata and not got.flags.writeable  # a read-only view of the client's region
    with pytest.raises(ValueError, match="read-only"):
        got[0] = 1
    body, second, _ = _sent(client, {"a": image})  # frame 1 is still viewed: frame 2 goes after it
    assert second >= DATA_START + ALIGN + 3000
    server.decode(body)  # frame 2's arrays go at once
    del got  # frame 1's last view
    assert _sent(client, {"a": image})[1] == DATA_START  # both released: the first place again


def test_a_reader_that_keeps_what_it_was_lent_gets_copies_until_it_lets_go(ends) -> None:
    """Frames are lent while at most the previous one is still viewed: a policy that keeps a
    history is sent copies, the frames it keeps stay as they were, and the region stays within
    three frames however long the history gets."""
    client, server = ends
    kept, lent_flags = [], []
    for value in range(40):
        body, _, lent = _sent(client, {"a": np.full(100_000, value % 250, np.uint8)})
        lent_flags.append(lent)
        assert server.array_bytes(body) == (0 if lent else ALIGN + 100_032)
        kept.append(server.decode(body)["a"])
    assert lent_flags[:2] == [True, True] and not any(lent_flags[2:])
    assert [int(a[0]) for a in kept] == [value % 250 for value in range(40)]
    assert all((a == a[0]).all() for a in kept)
    assert client._out.size <= region_limit(LIMIT) and client._out.size <= 4 * INITIAL_SIZE
    kept.clear()  # the history goes: the next frame is lent again
    body, _, lent = _sent(client, {"a": np.zeros(10, np.uint8)})
    assert lent and server.decode(body)["a"].shape == (10,)


def test_a_release_after_the_connection_closed_is_not_noted_and_views_stay_readable() -> None:
    offer = Offer()
    request, reply = accept_offer(offer.field, LIMIT)
    client = ShmCodec(offer.request, offer.reply, LIMIT, lend=True)
    server = ShmCodec(reply, request, LIMIT)
    kept = server.decode(client.encode({"a": np.full(5000, 9, np.uint8)}))["a"]
    server.close()  # the connection ends while the policy still holds a view: no BufferError
    client.close()
    assert (kept == 9).all()  # the mapping goes with the last view, not before
    del kept  # its release finds the region closed: nothing is written, nothing raised


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
    """A header whose sequence number the region does not carry at the frame's base: the writer
    never finished."""
    client, server = ends
    body, base, _ = _sent(client, sample())
    client._out.set_stamp(base, 0)  # as if the writer died before its last store
    with pytest.raises(StreamBroken, match=f"holds frame 0 at byte {base}, the socket announced frame 1"):
        server.decode(body)


def _frame(seq: int, span: int, msg: dict, lent: bool = False) -> bytes:
    """A hand-made frame body at DATA_START: the header, then the skeleton (arrays as `array_ext`)."""
    return HEADER.pack(seq, DATA_START, span, lent) + msgpack.packb(msg)


def _holds_frame_1(client: ShmCodec) -> None:
    """The client's region holds frame 1 at DATA_START, as if it had written one there."""
    client._out.set_stamp(DATA_START, 1)


def test_an_array_the_region_or_its_frame_does_not_hold_is_refused(ends) -> None:
    client, server = ends
    _holds_frame_1(client)
    for lent in (False, True):
        with pytest.raises(WireError, match="which holds"):  # a frame past the region's end
            server.decode(_frame(1, LIMIT, {"a": array_ext("|u1", (INITIAL_SIZE,))}, lent))
        with pytest.raises(WireError, match="pass the end of the frame"):  # an array past its frame
            server.decode(_frame(1, 1024, {"a": array_ext("|u1", (1024,))}, lent))
        with pytest.raises(WireError, match="pass the end of the frame"):  # arrays follow each other
            half = array_ext("|u1", (512,))
            server.decode(_frame(1, 1024, {"a": half, "b": half}, lent))
    with pytest.raises(WireError, match="a frame starts at byte 512 or later"):  # not on the table
        server.decode(HEADER.pack(1, 0, 1024, 0) + msgpack.packb({"a": array_ext("|u1", (8,))}))


def test_array_descriptions_are_checked(ends) -> None:
    client, server = ends
    _holds_frame_1(client)
    for data, match in [
        (b"", "expected ndim"),
        (bytes([33]) + bytes(33 * 8) + b"|u1", "expected ndim"),
        (bytes([2]) + bytes(8) + b"|u1", "expected ndim"),  # fewer dims than it says
        (bytes([1]) + struct.pack(">Q", 8) + b"object", "refused"),  # only plain numeric dtypes
        (bytes([1]) + struct.pack(">Q", 8) + b"\xff\xfe", "not an ASCII numpy dtype"),
        (bytes([1]) + struct.pack(">Q", 8) + b"nonsense", "not a numpy dtype"),
    ]:
        with pytest.raises(WireError, match=match):
            server.decode(_frame(1, 1024, {"a": msgpack.ExtType(ARRAY_EXT, data)}))
    with pytest.raises(WireError, match="extension type 5 refused"):
        server.decode(_frame(1, 1024, {"a": msgpack.ExtType(5, b"")}))
    with pytest.raises(WireError, match="inline arrays are refused"):
        server.decode(_frame(1, 1024, {"a": {"__ndarray__": b"", "dtype": "uint8", "shape": [0]}}))


def test_the_header_says_what_the_arrays_copy_and_decode_holds_it_to_that(ends) -> None:
    """The server reserves what the header says before decoding a frame it copies: a frame whose
    arrays pass its span is refused before the copy that would pass it, a span over the limit
    outright; a lent frame copies nothing."""
    client, server = ends
    _holds_frame_1(client)
    arrays = {"a": array_ext("|u1", (512,)), "b": array_ext("<f4", (128,))}
    assert server.array_bytes(_frame(1, 1088, arrays)) == 1088
    assert server.array_bytes(_frame(1, 1088, arrays, lent=True)) == 0
    with pytest.raises(WireError, match="pass the end of the frame"):
        server.decode(_frame(1, 1087, arrays))
    with pytest.raises(WireError, match=f"more than the limit of {LIMIT} bytes"):
        server.array_bytes(_frame(1, LIMIT + 1, arrays))
    assert server.decode(_frame(1, 1088, arrays))["b"].shape == (128,)
    answer = {"actions": np.zeros((30, 10), np.float32)}  # the server's replies are never lent
    body, base, lent = _sent(server, answer)
    assert (base, lent, client.array_bytes(body)) == (DATA_START, False, ALIGN + 1216)


def test_short_and_non_msgpack_bodies(ends) -> None:
    _, server = ends
    with pytest.raises(StreamBroken, match="no 25-byte header"):
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
