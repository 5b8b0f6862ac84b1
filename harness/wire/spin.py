"""Waiting for the next frame without being put to sleep, while the peer answers within microseconds.

Why: a reader that blocks in recv sleeps, and the peer's write must then wake it. On an idle core
of these VMs that wake-up costs ~30 µs (the vCPU halts, and the hypervisor has to start it again),
two per round trip: more than half of a shared-memory round trip. A reader that polls the socket
instead sees the frame as soon as it is written (a loopback ping-pong here: 60 µs blocking, 6 µs
polling).

So a `Spin` polls the socket (poll(2), no timeout, then one read) for up to `budget_s` before the caller's
blocking read, but only while the peer is quick: each wait is timed, and a reader whose last wait
was longer than the budget (a model call, a sim's step) goes straight to the blocking read and
burns no CPU, until a wait is short again. A blocking wait includes the reader's wake-up, which
alone can pass the budget here, and when both ends have fallen back it includes the peer's too: so
a blocking wait within WAKE_SLACK budgets counts as short (a quick peer and the wake-ups; else two
readers that fell back together, after a pause, kept each other blocking at ~200 µs a round trip).
And a reader that fell back polls one wait in PROBE_EVERY anyway, in case its wake-ups are longer
still (one budget's CPU per PROBE_EVERY slow waits: ~6 µs a wait at the default). Between reads
it yields the core (sched_yield), so a runnable peer on the same core goes first. But a yield on a
core where another task is runnable hands it over for that task's whole slice (milliseconds): after
a poll whose yield took longer than the budget, a reader reads blocking for a pause of waits that
doubles with each such poll in a row, up to a probe's PROBE_EVERY (else, with a CPU-bound process
on each core, every other wait paid a slice: 3.7 ms a round trip), and a host's one-off hiccup
costs one blocking wait. WIRE_SPIN_US sets the budget; 0 never polls.
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Callable

DEFAULT_SPIN_US = 100  # the WIRE_SPIN_US knob's default
PROBE_EVERY = 16  # after waits longer than the budget, one in this many polls anyway
WAKE_SLACK = 3  # a blocking wait within this many budgets was a quick peer and a wake-up


class Spin:
    """One reader's polling before its blocking reads (one connection, one thread)."""

    def __init__(self, budget_us: int = DEFAULT_SPIN_US) -> None:
        if budget_us < 0:
            raise ValueError(f"WIRE_SPIN_US={budget_us}: expected an integer >= 0")
        self.budget_s = budget_us / 1e6
        self.last_wait_s = 0.0  # the first wait polls
        self._unpolled = 0  # waits in a row that went straight to the blocking read
        self._pause = 0  # waits to read blocking after polls whose yield gave the core away
        self._waiting_since: float | None = None
        self._fd = -1  # the descriptor `_poll` polls
        self._poll: Callable[[int], list[tuple[int, int]]] | None = None

    @property
    def polls(self) -> bool:
        """Whether the next wait polls: a budget, and the last wait within WAKE_SLACK budgets (only
        a blocking wait can pass one budget) with the pause after a contended poll over, or a probe
        due."""
        quick = self.last_wait_s <= WAKE_SLACK * self.budget_s and self._unpolled >= self._pause
        return self.budget_s > 0 and (quick or self._unpolled >= PROBE_EVERY - 1)

    def read(self, sock: socket.socket, buf: bytearray) -> int:
        """The bytes of `buf` that arrive within the budget (one read), 0 if none (or EOF, which the
        caller's blocking recv sees again); the wait is timed until `arrived()` when none came."""
        start = time.perf_counter()
        self._waiting_since = start
        if not self.polls or sock.gettimeout() is None:  # a blocking socket cannot be polled
            self._unpolled += 1
            return 0
        self._unpolled = 0
        fd, end = sock.fileno(), start + self.budget_s
        ready = self._poller(fd)
        while True:
            if ready(0):  # an empty socket costs no exception raised and caught: half a readv's cost
                try:
                    got = os.readv(fd, [buf])
                except (BlockingIOError, InterruptedError):
                    got = -1
                if got >= 0:  # bytes, or EOF
                    self._pause = 0
                    self.arrived()
                    return got
            now = time.perf_counter()
            if now >= end:
                self._pause = 0
                return 0
            os.sched_yield()
            if time.perf_counter() - now > self.budget_s:  # another task had the core: stop polling
                self._pause = min(2 * self._pause or 1, PROBE_EVERY - 1)
                return 0

    def _poller(self, fd: int) -> Callable[[int], list[tuple[int, int]]]:
        """`poll` over `fd` alone (made once per descriptor: a connection keeps its own)."""
        if self._poll is None or self._fd != fd:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            self._fd, self._poll = fd, poller.poll
        return self._poll

    def arrived(self) -> None:
        """The frame the last `read` waited for is here: its wait is timed."""
        if self._waiting_since is not None:
            self.last_wait_s = time.perf_counter() - self._waiting_since
            self._waiting_since = None
