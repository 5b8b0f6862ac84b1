"""The worker's log lines: a UTC stamp, the writer, then the unit and seed a line is about."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from harness.queue.units import Unit


class WorkerLog:
    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id

    def __call__(self, message: str, unit: Unit | None = None, seed: int | None = None) -> None:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        where = f" unit={unit.key}" if unit else ""
        where += f" seed={seed}" if seed is not None else ""
        print(f"{stamp} worker={self.worker_id}{where} {message}", file=sys.stderr, flush=True)
