"""The filesystem lease queue: many workers on many nodes share one run dir and steal units from it.

On-disk layout, all under `<run>/queue.txt.leases/` (unit keys come from `harness.units`):

    <key>/                 the unit's lease; claiming = `mkdir` of this dir (atomic: one winner).
                           Left empty once the unit is done, so that no later mkdir can claim a
                           finished unit, whatever a stale listing said.
      owner.<gen>.<n>      the owner record (JSON: host, boot id, pid, process start time, worker,
                           SLURM_JOB_ID, claimed_at, generation), written once at the claim. It is
                           the heartbeat too: every HEARTBEAT_S the owner renames it n -> n+1 and
                           touches it; its content is never rewritten.
      reaped.<gen>.<tok>   the owner file, renamed by the reaper that won (for an instant)
      released.<gen>       the owner file, renamed by its owner releasing the unit (for an instant)
    <key>.done             the unit is finished: its last owner file, renamed out of the lease dir
    <key>.crash.<n>        the n-th errored attempt (created exclusively; holds the error). A unit
                           with CRASH_LIMIT of them is quarantined: reported and never claimed again.
    .tomb.<key>.<tok>/     a released or reaped lease dir being deleted (transient)
    .probe.<host>.<pid>    a process's probe of the server clock (transient)

Every decision is the result of an atomic call (mkdir, rename, exclusive create): on NFS a stat or
exists can be wrong for tens of seconds. A listing only proposes candidates; the mkdir decides.
`<gen>` is fresh per claim, so no name is ever reused for another owner; `harness.reaper` says how
staleness is judged and how reclaiming and fencing work. `rm -rf queue.txt.leases` recovers from
any state: leases, done marks, crash counts and quarantines go, and resume (the records) tells
again what is left to run.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import knobs, reaper
from harness.owner import owner_record
from harness.rundir import RunDir
from harness.units import Unit, run_units

DONE = ".done"
CRASH = ".crash."
IDLE_S = 0.25  # first wait when every pending unit is leased; doubles up to HEARTBEAT_S
MAX_MISSES = 8  # failed mkdirs in a row before the candidate list is re-listed


def write_once(path: Path, text: str) -> bool:
    """Create `path` exclusively with `text`; False if it already exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, text.encode())
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
        """Give the lease up, marking the unit done or leaving it claimable. The rename of our owner
        file is the fence: after it no reaper can win, before it a reaper may have. False (and
        nothing marked) if the lease was lost."""
        with self._lock:
            if self.lost.is_set() or self.finished:
                return False
            target = (
                self.root / f"{self.unit.key}{DONE}" if done else self.path / f"released.{self.generation}"
            )
            try:
                os.rename(self.owner_file(), target)
            except OSError as exc:
                if reaper.lost_errno(exc):
                    self.lost.set()
                    return False
                raise
            self.finished = True
        if not done:
            tomb = self.root / f"{reaper.TOMB_PREFIX}{self.unit.key}.{secrets.token_hex(6)}"
            os.rename(self.path, tomb)
            shutil.rmtree(tomb, ignore_errors=True)
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


@dataclass
class Listing:
    """One readdir of the leases dir, parsed."""

    leased: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    crashes: dict[str, int] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)


def scan(root: Path) -> Listing:
    listing = Listing()
    try:
        listing.names = os.listdir(root)
    except FileNotFoundError:
        return listing
    present = set()
    for name in listing.names:
        if name.startswith("."):
            continue
        if name.endswith(DONE):
            listing.done.add(name[: -len(DONE)])
        elif CRASH in name:
            key, _, n = name.rpartition(CRASH)
            if n.isdigit():
                listing.crashes[key] = max(listing.crashes.get(key, 0), int(n))
        else:
            present.add(name)
    listing.leased = present - listing.done
    return listing


class LeaseQueue:
    """One worker's view of the queue: claims in its own random order and remembers what is
    finished, so a claim costs one mkdir, not a scan of every lease (O(units) traffic on NFS)."""

    def __init__(self, run: RunDir, units: list[Unit], worker_id: str, rng: random.Random | None = None):
        self.root = run.leases
        self.units = {unit.key: unit for unit in units}
        self.worker_id = worker_id
        self.ttl = knobs.get_float("LEASE_TTL")
        self.crash_limit = knobs.get_int("CRASH_LIMIT")
        self.heartbeat = Heartbeat(knobs.get_float("HEARTBEAT_S"))
        self.judge = reaper.Judge(self.ttl, knobs.get_float("LEASE_SKEW_S"))
        self.clock = reaper.ServerClock(self.root)
        self.rng = rng or random.Random(f"{worker_id}.{os.getpid()}.{time.time_ns()}")
        self.finished: set[str] = set()  # done or quarantined: never tried again
        self.crashes: dict[str, int] = {}
        self._candidates: list[str] = []
        self._leased: set[str] = set()
        self._misses = 0
        self._last_reap = time.monotonic()
        self._idle_s = IDLE_S
        self.root.mkdir(parents=True, exist_ok=True)

    def claim(self, stop: threading.Event | None = None) -> Lease | None:
        """The next unit to work on, or None when every unit is done or quarantined (or `stop`)."""
        while stop is None or not stop.is_set():
            if not self._candidates or self._misses > MAX_MISSES:
                if not self.refresh():
                    return None
                if not self._candidates:
                    if not self.reap_pass():
                        time.sleep(self._idle_s)
                        self._idle_s = min(self._idle_s * 2, self.heartbeat.interval)
                    continue
            elif time.monotonic() - self._last_reap > self.ttl / 2:
                self.reap_pass()
            lease = self._try(self._candidates.pop())
            if lease is not None:
                self._idle_s = IDLE_S
                return lease
        return None

    def quarantined(self, key: str) -> bool:
        return self.crashes.get(key, 0) >= self.crash_limit

    def refresh(self) -> bool:
        """Re-list the queue; False when nothing is left to do."""
        listing = scan(self.root)
        reaper.sweep_tombs(self.root, listing.names)
        self.crashes.update(listing.crashes)
        self.finished |= listing.done & self.units.keys()
        self.finished |= {key for key in self.units if self.quarantined(key)}
        self._leased = listing.leased & self.units.keys()
        pending = [key for key in self.units if key not in self.finished]
        self._candidates = [key for key in pending if key not in self._leased]
        self.rng.shuffle(self._candidates)
        self._misses = 0
        return bool(pending)

    def _try(self, key: str) -> Lease | None:
        path = self.root / key
        try:
            os.mkdir(path)
        except FileExistsError:
            self._misses += 1
            return None
        self._misses = 0
        lease = Lease(self.root, self.units[key], secrets.token_hex(6))
        write_once(lease.owner_file(), json.dumps(owner_record(self.worker_id, lease.generation)))
        self.heartbeat.add(lease)
        return lease

    def reap_pass(self) -> list[str]:
        """Reclaim every dead lease among those last listed; the keys this worker reclaimed."""
        self._last_reap = time.monotonic()
        now = self.clock.now()
        reaped = []
        for key in sorted(self._leased):
            view = reaper.inspect(self.root, key, now)
            if view is None:
                self._candidates.append(key)  # released meanwhile: worth a try
            elif view.done:
                self.finished.add(key)
            elif self.judge.reason(view) is not None and reaper.reap(self.root, view):
                reaped.append(key)
                self._candidates.append(key)
        self._leased -= set(self._candidates) | self.finished
        return reaped

    def mark(self, lease: Lease, done: bool) -> bool:
        """Release `lease`, as done or not. False if the lease was lost: then nothing is marked."""
        self.heartbeat.discard(lease)
        ok = lease.finish(done)
        if ok and done:
            self.finished.add(lease.unit.key)
        return ok

    def release_errored(self, lease: Lease, error: str) -> bool:
        """Count one errored attempt of the unit and release it; True if that reached CRASH_LIMIT
        (the unit is quarantined: never claimed again)."""
        key = lease.unit.key
        n = self.crashes.get(key, 0) + 1
        while not write_once(self.root / f"{key}{CRASH}{n}", error):
            n += 1
        self.crashes[key] = n
        self.mark(lease, done=False)
        if self.quarantined(key):
            self.finished.add(key)
        return self.quarantined(key)


@dataclass
class UnitState:
    """One unit as the status display shows it."""

    key: str
    unit: Unit
    state: str  # done, leased, pending, quarantined
    owner: dict[str, Any] | None = None
    heartbeat_age: float | None = None  # seconds since the owner's last heartbeat (server clock)
    stale: str | None = None  # why the reaper would reclaim it, if it would
    crashes: int = 0
    last_error: str | None = None


def snapshot(run_dir: Path | RunDir, units: list[Unit] | None = None) -> list[UnitState]:
    """Every unit's queue state (units default: the run's plan). Changes nothing in the queue: it
    only creates and removes a clock probe of its own (and uses the local clock if it cannot)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    units = run_units(run) if units is None else units
    listing = scan(run.leases)
    now = reaper.ServerClock(run.leases).now()
    judge = reaper.Judge(knobs.get_float("LEASE_TTL"), knobs.get_float("LEASE_SKEW_S"))
    limit = knobs.get_int("CRASH_LIMIT")
    states = []
    for unit in units:
        key = unit.key
        state = UnitState(key, unit, "pending", crashes=listing.crashes.get(key, 0))
        if state.crashes:
            state.last_error = _read_text(run.leases / f"{key}{CRASH}{state.crashes}")
        if key in listing.done:
            state.state = "done"
        elif state.crashes >= limit:
            state.state = "quarantined"
        elif key in listing.leased and (view := reaper.inspect(run.leases, key, now)) is not None:
            state.state = "done" if view.done else "leased"
            if not view.done:
                state.owner, state.heartbeat_age, state.stale = view.owner, view.age, judge.reason(view)
        states.append(state)
    return states


def _read_text(path: Path) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None
