"""The model server's budget of request memory in flight across all its sessions, and giving the
memory of big requests back.

Why: every connection has its own thread, so N clients each sending a WIRE_MAX_FRAME frame at once
held N bodies and N sets of decoded arrays together (8 x 64 MiB took the server up by ~850 MB).
A frame bigger than SMALL_FRAME reserves what it will cost here before its body is read, all or
nothing (no two frames can each hold part of the budget and wait for the rest): DECODED_FACTOR
times its size, its body and what that decodes into, since each array is copied out of the body
once and everything else a body holds is capped by its item count (`harness.wire.bounds`). A
reservation waits at most WAIT_S for the budget, then is refused (`Busy`), and is held until its
request's reply went out. Requests up to SMALL_FRAME are not counted: they fit the one first read
every connection may cost anyway (MODEL_SERVER_MAX_CONNS bounds those), so a ping or a small
observation never waits behind a big frame.

Giving memory back: a process's first budget fixes glibc's allocation thresholds
(`settle_allocator`), so buffers of 1 MiB and more are mappings of their own that go back to the
kernel when freed, instead of pages that the per-thread arenas keep; and when the last
reservation is released with at least TRIM_AFTER bytes released since the last trim, free pages
inside the arenas go back too (`malloc_trim`). Without either the server's RSS stayed up after
the clients left.
"""

from __future__ import annotations

import ctypes
import threading
import time

from harness.wire.errors import WireError

SMALL_FRAME = 256 << 10  # frames up to this size are not counted (harness.wire.frames.FIRST_READ)
DECODED_FACTOR = 2  # a frame costs its body and, at most, as much again decoded
WAIT_S = 20.0  # the longest a frame waits for the budget before it is refused
TRIM_AFTER = 8 << 20  # bytes released since the last trim that make the next idle moment trim


class Busy(WireError):
    """The budget stayed full for WAIT_S: this request is refused, the connection lives on."""


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_AT = 1 << 20  # buffers from this size get their own mapping, unmapped when freed
TRIM_AT = 8 << 20  # an arena's free top beyond this goes back to the kernel at once


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim.argtypes, libc.mallopt.argtypes = [ctypes.c_size_t], [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):  # not glibc (musl, other systems): nothing to tune
        return None
    return libc


_LIBC = _glibc()
_tuned = threading.Lock()


def settle_allocator() -> None:
    """Fix glibc's thresholds for this process (once), so the memory of big frames goes back.

    By default glibc raises its mmap threshold to the size of the last big buffer freed (up to
    32 MiB), after which a frame's 2 and 16 MiB growth buffers come from each connection thread's
    own arena, whose free top it keeps (malloc_trim does not trim those): ~19 MB per thread that
    ever read a big frame. Fixed thresholds keep buffers of MMAP_AT and more in their own mappings.
    """
    if _LIBC is not None and _tuned.acquire(blocking=False):
        _LIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_AT)
        _LIBC.mallopt(_M_TRIM_THRESHOLD, TRIM_AT)


def give_back_memory() -> None:
    """glibc's malloc_trim(0): free pages inside the arenas go back to the kernel."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


class InflightBudget:
    """At most `limit` bytes of requests held at once by the sessions that share it."""

    def __init__(self, limit: int, knob: str = "MODEL_SERVER_INFLIGHT_BYTES") -> None:
        self.limit = limit
        self.knob = knob
        self._held = 0
        self._released = 0  # bytes released since the last trim
        self._cond = threading.Condition()
        settle_allocator()

    @property
    def held(self) -> int:
        return self._held

    def reserve(self, size: int) -> Reservation:
        """A reservation for a request whose frame is `size` bytes (charged DECODED_FACTOR x size
        once it passes SMALL_FRAME); `Busy` after WAIT_S, WireError if it could never fit."""
        cost = DECODED_FACTOR * size
        if cost > self.limit:  # could never fit: refused now, not after WAIT_S
            raise WireError(
                f"a request of {size} bytes, {cost} bytes decoded, exceeds the limit of "
                f"{self.limit} bytes ({self.knob})"
            )
        charged = cost if size > SMALL_FRAME else 0
        if charged:
            self._acquire(charged)
        return Reservation(self, charged)

    def _acquire(self, size: int) -> None:
        deadline = time.monotonic() + WAIT_S
        with self._cond:
            while self._held + size > self.limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Busy(
                        f"server busy: {self._held} bytes of requests in flight, {size} more would pass "
                        f"{self.knob}={self.limit}; waited {WAIT_S:g} s, try again"
                    )
                self._cond.wait(left)
            self._held += size

    def _release(self, size: int) -> None:
        with self._cond:
            self._held -= size
            self._released += size
            trim = self._held == 0 and self._released >= TRIM_AFTER
            if trim:
                self._released = 0
            self._cond.notify_all()
        if trim:
            give_back_memory()


class Reservation:
    """One request's share of the budget; `release()` (or leaving its `with`) gives it back."""

    def __init__(self, budget: InflightBudget, size: int) -> None:
        self._budget = budget
        self.size = size  # charged to the budget

    def release(self) -> None:
        """Give the bytes back; idempotent. Call it once the request's memory is dropped."""
        size, self.size = self.size, 0
        if size:
            self._budget._release(size)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
