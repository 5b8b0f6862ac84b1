"""One held lease and its heartbeat: what a worker does with a unit it claimed (beat, finish,
quarantine), apart from how it claims one (`harness.queue.leases`). Every step is one rename of the
owner file, the name a reaper renames too, so of the owner and any reapers exactly one wins."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from harness.queue import reaper
from harness.queue.listing import DONE
from harness.queue.units import Unit


def write_once(path: Path, text: str) -> bool:
    """Create `path` exclusively with `text`; False if it already exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, text.encode())
    except OSError as exc:  # a full disk: say which file could not be written
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    finally:
        os.close(fd)
    return True


class Lease:
    """A claimed unit. `lost` is set at the first heartbeat after a reaper took it."""

    def __init__(self, root: Path, unit: Unit, generation: str) -> None:
        self.root, self.unit, self.generation = root, unit, generation
        self.path = root / unit.key
        self.lost = threading.Event()
        self.finished = False
        self._n = 0
        self._lock = threading.Lock()

    def owner_file(self, n: int | None = None) -> Path:
        return self.path / f"owner.{self.generation}.{self._n if n is None else n}"

    def beat(self) -> bool:
        """Refresh the heartbeat; False once the lease is lost (the rename finds its name gone)."""
        with self._lock:
            if self.lost.is_set() or self.finished:
                return False
            try:
                os.rename(self.owner_file(), self.owner_file(self._n + 1))
                self._n += 1
                os.utime(self.owner_file(), None)
            except OSError as exc:
                if not reaper.lost_errno(exc):
                    return True  # a transient error: the next beat retries
                self.lost.set()
                return False
            return True

    def finish(self, done: bool) -> bool:
        """Give the lease up, marking the unit done or leaving it claimable. False (and nothing
        marked) if the lease was lost."""
        with self._lock:
            if self.lost.is_set() or self.finished:
                return False
            state = "done" if done else "released"
            if not self._rename_owner(f"{state}.{self.generation}"):
                return False
        if done:
            write_once(self.root / f"{self.unit.key}{DONE}", self.generation)  # the listing's hint
        else:
            reaper.bury(self.root, self.path, self.unit.key)
        return True

    def quarantine(self) -> bool:
        """Keep the lease dir, its owner file renamed `quarantined.<gen>`: no claim can succeed."""
        with self._lock:
            if self.lost.is_set() or self.finished:
                return False
            return self._rename_owner(f"quarantined.{self.generation}")

    def _rename_owner(self, name: str) -> bool:
        """The fence: after this rename no reaper can win, before it a reaper may have."""
        try:
            os.rename(self.owner_file(), self.path / name)
        except OSError as exc:
            if reaper.lost_errno(exc):
                self.lost.set()
                return False
            raise
        self.finished = True
        return True


class Heartbeat:
    """One thread per worker process beats every lease it holds, so a long episode never looks dead."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.leases: set[Lease] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, lease: Lease) -> None:
        with self._lock:
            self.leases.add(lease)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)
                self._thread.start()

    def discard(self, lease: Lease) -> None:
        with self._lock:
            self.leases.discard(lease)

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            with self._lock:
                leases = list(self.leases)
            for lease in leases:
                if not lease.beat():
                    self.discard(lease)
