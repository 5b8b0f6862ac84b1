"""Stop signals only raise a flag: a storm of them costs one write and one stop, and nothing nests."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from harness.process import stopsignals
from harness.process.stopsignals import StopSignals


class CountingOs:
    """The `os` module, counting the writes made through it."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, fd: int, data: bytes) -> int:
        self.writes += 1
        return os.write(fd, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


def test_a_storm_of_stop_signals_costs_one_write_and_one_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every later signal returns before any call: a storm once nested handlers inside
    `contextlib.suppress`'s frames, each another signal's landing place, until the recursion limit."""
    counting = CountingOs()
    monkeypatch.setattr(stopsignals, "os", counting)
    before = signal.getsignal(signal.SIGTERM)
    stops: list[int] = []
    try:
        with StopSignals(stops.append) as signals:
            for _ in range(200):
                os.kill(os.getpid(), signal.SIGTERM)  # each handled here, between two bytecodes
            assert signals.stopped.wait(10)
            signals._watcher.join(10)
        assert counting.writes == 1
        assert stops == [signal.SIGTERM] and signals.received == signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, before)  # close() ignores stop signals after one came
