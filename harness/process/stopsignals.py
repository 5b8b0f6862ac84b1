"""Stop signals that only raise a flag: whatever stopping takes runs in ordinary code.

A Python signal handler runs in the main thread between two bytecodes: possibly inside code that
holds a lock (an Event's, a buffered stream's) and possibly inside another run of itself. A handler
that calls `Event.set()` deadlocks when a second SIGTERM lands while the first holds that Event's
lock, and a second one does come: a child of a multi-threaded parent can get one parent-death signal
per thread of the parent that exits, and Slurm and the pools may signal a process more than once.
So the handler here only stores the signal number and writes one byte to a non-blocking pipe (a
syscall, no lock); a watcher thread blocked on that pipe sets `stopped` and runs the stop callback,
once, in ordinary code, where taking a lock or logging is safe.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """While open (a context manager; from the main thread), SIGTERM and SIGINT set `stopped` and
    call `on_stop(signum)` once, from a watcher thread."""

    def __init__(self, on_stop: Callable[[int], None] | None = None) -> None:
        self.on_stop = on_stop
        self.received: int | None = None  # the first stop signal's number
        self.stopped = threading.Event()  # set by the watcher, never by the handler
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        try:  # outside the main thread signal.signal refuses: leak no pipe then
            self._previous = {signum: signal.signal(signum, self._handle) for signum in STOP_SIGNALS}
        except ValueError:
            os.close(self._read)
            os.close(self._write)
            raise
        self._watcher = threading.Thread(target=self._watch, name="stop-signals", daemon=True)
        self._watcher.start()  # a signal that came meanwhile waits in the pipe

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        """The handler: for the first signal a plain store and one non-blocking write, for any later
        one nothing. Nothing can wait for a lock, and the handler makes no Python call (a
        `contextlib.suppress`), where the next signal of a storm would run a nested handler: under
        a storm those nested until the recursion limit, and the worker exited 1."""
        if self.received is not None:
            return
        self.received = signum
        try:  # noqa: SIM105 (contextlib.suppress is a Python call: see above)
            os.write(self._write, b"\0")
        except OSError:  # the watcher has closed the pipe: it was woken already, or is shut
            pass

    def _watch(self) -> None:
        woken = os.read(self._read, 1)  # b"": closed without a signal
        os.close(self._read)
        if not woken:
            return
        self.stopped.set()
        if self.on_stop is not None:
            self.on_stop(self.received or signal.SIGTERM)

    def run_until_stopped(self, work: Callable[[], Any]) -> None:
        """Run `work` in a daemon thread until it returns (its exception is raised here) or a stop
        signal comes: then return at once, leaving `work` to end with the process (it may be blocked
        reading a socket, which only the signal's arrival, not a flag, would have interrupted)."""
        failure: list[BaseException] = []

        def run() -> None:
            try:
                work()
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=run, name="until-stopped", daemon=True)
        thread.start()
        while thread.is_alive() and not self.stopped.wait(0.2):
            pass
        if failure and not self.stopped.is_set():
            raise failure[0]

    def close(self) -> None:
        """Restore the previous handlers; after a stop signal, ignore stop signals instead: the
        process is on its way out, and a late one of a burst must not turn its clean exit into a kill."""
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_IGN if self.received is not None else previous)
        os.close(self._write)  # the watcher wakes with b"" and ends, unless a signal came first
        self._watcher.join(5)

    def __enter__(self) -> StopSignals:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
