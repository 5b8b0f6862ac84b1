"""Polling for the next frame (harness.wire.spin): only while the peer is quick, never for long."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from harness.model.inflight import InflightBudget
from harness.model.policyload import load_policy
from harness.model.requests import next_request
from harness.model.session import Session
from harness.wire import spin as spin_module
from harness.wire.errors import PeerClosed
from harness.wire.frames import recv_frame
from harness.wire.spin import PROBE_EVERY, WAKE_SLACK, Spin


class Counting(socket.socket):
    """A socket that counts its blocking reads (each a sleep until the peer's write wakes it)."""

    recvs = 0

    def recv_into(self, *args, **kwargs) -> int:  # type: ignore[override]
        self.recvs += 1
        return super().recv_into(*args, **kwargs)


class CountingSpin(Spin):
    reads = 0

    def read(self, sock: socket.socket, buf: bytearray) -> int:
        self.reads += 1
        return super().read(sock, buf)


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    counted = Counting(fileno=b.detach())
    counted.settimeout(10.0)
    yield a, counted
    a.close()
    counted.close()


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def send_later(sock: socket.socket, data: bytes, delay_s: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay_s), sock.sendall(data)))
    thread.start()
    return thread


def test_a_frame_that_comes_within_the_budget_is_read_without_a_blocking_recv(pair) -> None:
    a, b = pair
    spin = Spin(budget_us=2_000_000)  # generous: the writer thread must be scheduled within it
    later = send_later(a, frame(b"x" * 100), 0.01)
    assert recv_frame(b, spin=spin) == b"x" * 100
    later.join()
    assert b.recvs == 0  # the header came while polling; its body came with it
    assert spin.last_wait_s < 2 and spin.polls


def test_without_a_spin_the_same_frame_is_a_blocking_recv(pair) -> None:
    a, b = pair
    later = send_later(a, frame(b"x" * 100), 0.01)
    assert recv_frame(b) == b"x" * 100
    later.join()
    assert b.recvs == 1


def test_a_slow_peer_is_not_polled_for_until_it_is_quick_again(pair) -> None:
    a, b = pair
    spin = CountingSpin(budget_us=1000)
    later = send_later(a, frame(b"slow"), 0.2)  # a model call: far beyond the 1 ms budget
    assert recv_frame(b, spin=spin) == b"slow"
    later.join()
    # timed from the read's start, which a loaded machine may run well after the writer's sleep began
    assert b.recvs == 1 and spin.last_wait_s > WAKE_SLACK * spin.budget_s and not spin.polls

    cpu = time.thread_time()
    later = send_later(a, frame(b"slow again"), 0.3)
    assert recv_frame(b, spin=spin) == b"slow again"
    later.join()
    assert time.thread_time() - cpu < 0.05  # slept in recv, not polled for 0.3 s
    assert b.recvs == 2

    a.sendall(frame(b"quick"))  # already there: the blocking read takes it at once, and it is timed
    assert recv_frame(b, spin=spin) == b"quick"
    assert spin.polls
    a.sendall(frame(b"polled"))
    assert recv_frame(b, spin=spin) == b"polled"
    assert b.recvs == 3  # the last frame came while polling


class Waking(Counting):
    """A socket whose blocking reads each pay a wake-up of `wake_s`, as an idle vCPU's do."""

    wake_s = 0.0

    def recv_into(self, *args, **kwargs) -> int:  # type: ignore[override]
        time.sleep(self.wake_s)
        return super().recv_into(*args, **kwargs)


def waking_pair(wake_s: float) -> tuple[socket.socket, Waking]:
    a, plain = socket.socketpair()
    b = Waking(fileno=plain.detach())
    b.wake_s = wake_s
    b.settimeout(10.0)
    return a, b


def fall_back(a: socket.socket, b: Waking, spin: Spin) -> None:
    """A slow frame: `spin` goes to blocking reads."""
    later = send_later(a, frame(b"slow"), 0.25)
    assert recv_frame(b, spin=spin) == b"slow"
    later.join()
    assert not spin.polls and b.recvs == 1


def test_a_blocking_wait_within_the_wake_slack_turns_polling_back_on() -> None:
    """A quick peer's frames reach a reader fallen back to blocking reads one wake-up late: a wait
    that long still counts as short, so the reader polls again after one blocking read (else two
    readers fallen back together keep each other blocking)."""
    budget_s = 0.02  # generous: the poll must not miss a frame that is there on a loaded machine
    a, b = waking_pair(1.5 * budget_s)  # a wake-up longer than the budget, within the slack
    spin = Spin(budget_us=int(budget_s * 1e6))
    fall_back(a, b, spin)
    for _ in range(4):  # a quick peer: each frame is there before the read
        a.sendall(frame(b"quick"))
        assert recv_frame(b, spin=spin) == b"quick"
        assert spin.polls
    assert b.recvs == 2  # the slow one, then one blocking read: the rest came while polling
    a.close()
    b.close()


def test_a_reader_fallen_back_to_blocking_reads_polls_again_once_the_peer_is_quick() -> None:
    """Wake-ups longer than the slack would keep it blocking, however quick the peer: a probe every
    PROBE_EVERY waits finds the peer quick."""
    budget_s = 0.01
    a, b = waking_pair((WAKE_SLACK + 1) * budget_s)
    spin = Spin(budget_us=int(budget_s * 1e6))
    fall_back(a, b, spin)
    for _ in range(3 * PROBE_EVERY):  # a quick peer: each frame is there before the read
        a.sendall(frame(b"quick"))
        assert recv_frame(b, spin=spin) == b"quick"
    assert spin.polls
    assert b.recvs == PROBE_EVERY  # the slow one, then blocking reads until the probe polled
    a.close()
    b.close()


class Yields:
    """Stands in for sched_yield: counts the polls that yielded; each takes `slow_s` (another
    runnable task's slice on the reader's core) or returns at once."""

    def __init__(self, slow_s: float) -> None:
        self.slow_s, self.count = slow_s, 0

    def __call__(self) -> None:
        self.count += 1
        time.sleep(self.slow_s)


def test_on_a_contended_core_a_reader_polls_ever_more_rarely(pair, monkeypatch) -> None:
    """A yield on a core where another task is runnable hands the core over for that task's whole
    slice: polling there costs a slice a wait. A reader backs off to a probe's rate."""
    a, b = pair
    budget_s = 0.01
    spin = Spin(budget_us=int(budget_s * 1e6))
    yields = Yields(1.5 * budget_s)
    monkeypatch.setattr(spin_module.os, "sched_yield", yields)
    waits = 3 * PROBE_EVERY
    for _ in range(waits):  # each frame comes within the wake slack, after the read began
        later = send_later(a, frame(b"late"), 1.2 * budget_s)
        assert recv_frame(b, spin=spin) == b"late"
        later.join()
    # polled at waits 1, 3, 6, 11, 20, 36: pauses of 1, 2, 4, 8 waits, then a probe's 15
    assert yields.count <= 7 < waits // 2


def test_after_one_contended_poll_a_reader_polls_again_after_one_blocking_read(pair, monkeypatch) -> None:
    """A one-off hiccup (the host took the vCPU during a yield) costs one blocking wait."""
    a, b = pair
    budget_s = 0.01
    spin = Spin(budget_us=int(budget_s * 1e6))
    yields = Yields(1.5 * budget_s)
    monkeypatch.setattr(spin_module.os, "sched_yield", yields)
    later = send_later(a, frame(b"late"), 1.2 * budget_s)  # not there at the poll: the reader yields
    assert recv_frame(b, spin=spin) == b"late"
    later.join()
    assert yields.count == 1 and not spin.polls and b.recvs == 1
    for _ in range(4):  # a quick peer: each frame is there before the read
        a.sendall(frame(b"quick"))
        assert recv_frame(b, spin=spin) == b"quick"
    assert spin.polls and b.recvs == 2  # the late one, then one blocking read: the rest polled


def test_a_budget_of_zero_never_polls(pair) -> None:
    a, b = pair
    spin = Spin(budget_us=0)
    a.sendall(frame(b"one"))
    assert recv_frame(b, spin=spin) == b"one"
    assert not spin.polls and b.recvs == 1


def test_a_negative_budget_is_refused_naming_the_knob() -> None:
    with pytest.raises(ValueError, match="WIRE_SPIN_US=-1"):
        Spin(budget_us=-1)


def test_a_peer_that_closes_while_polled_for_is_seen_closing(pair) -> None:
    a, b = pair
    spin = Spin(budget_us=2_000_000)
    a.close()
    with pytest.raises(PeerClosed, match="peer closed the connection between frames"):
        recv_frame(b, spin=spin)


def test_a_server_session_polls_only_while_no_other_session_of_its_batcher_is_active(pair) -> None:
    """Sessions sharing a process would poll each other off its cores and its GIL."""
    a, b = pair
    policy = load_policy("hold")
    session = Session(policy, None, None)
    budget = InflightBudget(1 << 20)
    spin = CountingSpin(budget_us=1000)
    a.sendall(frame(b"{}"))
    body, reservation = next_request(b, session, 1 << 20, budget, None, spin)
    reservation.release()
    assert bytes(body) == b"{}" and spin.reads == 1

    other = Session(policy, None, None)
    a.sendall(frame(b"{}"))
    body, reservation = next_request(b, session, 1 << 20, budget, None, spin)
    reservation.release()
    assert spin.reads == 2  # a session that has started no episode is not waited on

    policy.batcher.start_episode(other.member)
    a.sendall(frame(b"{}"))
    body, reservation = next_request(b, session, 1 << 20, budget, None, spin)
    reservation.release()
    assert bytes(body) == b"{}" and spin.reads == 2  # another session in an episode: a blocking read
    other.close()
    session.close()
